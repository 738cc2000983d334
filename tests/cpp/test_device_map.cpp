// libacc's device-map planning against Accelerate's own results: tests/bigmodel/make_device_map_fixtures.py
// recorded, for transformers models built empty (Llama 7B-like, small Llama, Mistral, tied Qwen2, Mixtral, GPT-2,
// BERT), their module trees, compute_module_sizes per dtype, and 37 cases of infer_auto_device_map /
// get_balanced_memory / device_map modes with Accelerate's maps (tests/bigmodel/README.md). The trees are rebuilt
// here from the recordings and planned by src/bigmodel/device_map.cpp: the same sizes and the same maps.
// And prepare_pippy's "auto" split points (pippy_split_points.json beside the fixture).
//   test_device_map FIXTURE_JSON
#include <acc/json.hpp>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "bigmodel/device_map.hpp"
#include "bigmodel/plan.hpp"
#include "models/hf/pretrained.hpp"
#include "formats/hf_weights.hpp"

namespace acc::core::bigmodel {
namespace {

using json::Value;
std::unique_ptr<json::Document> g_doc;
std::unique_ptr<json::Document> g_pippy;  // pippy_split_points.json, beside the fixture

Value item(const Value& o, const char* key) { return o.get(key); }
std::string str(const Value& o, const char* key) { return o.get_string(key); }

// A device of the fixture: an integer (accelerator) or "cpu" / "disk".
Device device_of(const Value& v) { return v.is_number() ? std::to_string(v.as_int()) : v.as_string(); }
// A size of the fixture: bytes as an integer, or a string ("10GiB").
std::string size_of(const Value& v) { return v.is_number() ? std::to_string(v.as_int()) : v.as_string(); }

int element_size(const std::string& dtype) {
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "int64") return 8;
  return 1;
}

// The tree nn.Module shows: modules from named_modules (pre-order), tensors from Accelerate's list; a tied
// duplicate (a tied lm_head.weight, which named_parameters leaves out) is added to its module.
ModuleTree tree_of(const Value& model) {
  ModuleTree tree;
  std::map<std::string, int> index;
  for (const auto& [name, m] : item(model, "module_classes").items()) {
    index[name] = static_cast<int>(tree.modules.size());
    tree.modules.push_back({m.as_string(), {}, {}, {}});
    if (name.empty()) continue;
    const size_t dot = name.rfind('.');
    const std::string parent = dot == std::string::npos ? "" : name.substr(0, dot);
    tree.modules[index.at(parent)].children.emplace_back(name.substr(dot == std::string::npos ? 0 : dot + 1),
                                                         index[name]);
  }
  std::map<std::string, ModuleTree::Tensor> tensors;
  const auto add = [&](const std::string& name, const ModuleTree::Tensor& t, bool buffer) {
    const size_t dot = name.rfind('.');
    auto& m = tree.modules[index.at(dot == std::string::npos ? "" : name.substr(0, dot))];
    (buffer ? m.buffers : m.parameters).emplace_back(name.substr(dot == std::string::npos ? 0 : dot + 1), t);
    tensors[name] = t;
  };
  for (const Value& t : item(model, "tensors").elements()) {
    ModuleTree::Tensor x;
    x.numel = 1;
    for (const Value& d : item(t, "shape").elements()) x.numel *= d.as_int();
    const std::string dtype = str(t, "dtype");
    x.element_size = element_size(dtype);
    x.integer = dtype.rfind("int", 0) == 0 || dtype.rfind("uint", 0) == 0 || dtype == "bool";
    add(str(t, "name"), x, str(t, "kind") == "buffer");
  }
  for (const Value& g : item(model, "tied_parameters").elements()) {
    std::vector<std::string> group;
    for (const Value& p : g.elements()) group.push_back(p.as_string());
    const auto present =
        std::find_if(group.begin(), group.end(), [&](const std::string& p) { return tensors.count(p); });
    for (const auto& p : group)
      if (!tensors.count(p) && present != group.end()) add(p, tensors.at(*present), false);
    tree.tied.push_back(group);
  }
  return tree;
}

// The keys where libacc's map differs from Accelerate's, a line each.
std::string map_diff(const std::map<std::string, Device>& want, const std::map<std::string, Device>& got) {
  std::ostringstream diff;
  for (const auto& [k, v] : want)
    if (!got.count(k) || got.at(k) != v)
      diff << "  " << k << ": Accelerate " << v << ", libacc " << (got.count(k) ? got.at(k) : "-") << "\n";
  for (const auto& [k, v] : got)
    if (!want.count(k)) diff << "  " << k << ": Accelerate -, libacc " << v << "\n";
  return diff.str();
}

TEST(DeviceMap, ModuleSizesEqualAccelerates) {
  int checked = 0;
  for (const auto& [model_name, model] : item(g_doc->root(), "models").items()) {
    const ModuleTree tree = tree_of(model);
    for (const auto& [dtype, per] : item(model, "module_sizes").items()) {
      const ModuleSizes sizes = compute_module_sizes(tree, dtype == "none" ? 0 : element_size(dtype));
      for (const auto& [module, s] : per.items()) {
        ASSERT_EQ(sizes.of(module), s.as_int()) << model_name << " " << dtype << " '" << module << "'";
        ++checked;
      }
      EXPECT_EQ(sizes.bytes.size(), per.size()) << model_name << " " << dtype;
    }
  }
  std::printf("%d module sizes equal Accelerate's\n", checked);
}

TEST(DeviceMap, MapsEqualAccelerates) {
  int cases = 0, failed = 0;
  for (const Value& c : item(g_doc->root(), "cases").elements()) {
    ++cases;
    const std::string id = str(c, "id"), mode = str(c, "mode");
    const Value in = item(c, "inputs");
    const ModuleTree tree = tree_of(item(item(g_doc->root(), "models"), str(c, "model").c_str()));
    std::vector<std::pair<Device, std::string>> raw;
    for (const Value& p : item(in, "max_memory").elements()) raw.emplace_back(device_of(p.at(0)), size_of(p.at(1)));
    MapOptions o;
    for (const Value& n : item(in, "no_split_module_classes").elements()) o.no_split.push_back(n.as_string());
    const std::string dtype = in.get_string_or("dtype", "");
    o.element_size = dtype.empty() ? 0 : element_size(dtype);
    o.offload_buffers = in.get_bool_or("offload_buffers", false);
    o.fallback_allocation = in.get_bool_or("fallback_allocation", false);
    std::map<std::string, Device> got;
    std::string error;
    try {
      Budget budget = ordered_budget(raw);
      if (mode == "balanced" || mode == "balanced_low_0" || mode == "auto")
        budget = balanced_memory(tree, budget, o.no_split, o.element_size, mode == "balanced_low_0");
      got = infer_auto_device_map(tree, budget, o);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (c.has("error")) {
      EXPECT_FALSE(error.empty()) << id << ": Accelerate refused it (" << str(c, "error") << "), libacc did not";
      continue;
    }
    ASSERT_TRUE(error.empty()) << id << ": " << error;
    std::map<std::string, Device> want;
    for (const auto& [k, e] : item(c, "device_map").items()) want[k] = device_of(e);
    if (got != want) {
      ++failed;
      ADD_FAILURE() << id << " (" << str(c, "description") << "):\n" << map_diff(want, got);
    }
  }
  std::printf("%d cases, %d maps differ from Accelerate's\n", cases, failed);
}

// libacc's model of a recorded one, built empty from its config (acc_model_from_config with "device": "meta").
std::unique_ptr<Model> libacc_model(const Value& model) {
  json::Writer config;  // the recorded config, with the model's class as its architecture
  config.begin_object();
  for (const auto& [k, v] : item(model, "config_json").items())
    if (k != "architectures") config.key(k).value(v);
  config.key("architectures").begin_array().value(str(model, "class")).end_array().end_object();
  return hf::from_config(config.str(), R"({"device": "meta"})");
}

// libacc's module trees (tree_of) are transformers': the same modules in named_modules order, the weightless ones
// (Model::weightless_modules) of the same classes, and compute_module_sizes the same for every name, per dtype.
// Mixtral's differ below its decoder layers (see below).
TEST(DeviceMap, LibaccTreesAndSizesAreTransformers) {
  int checked = 0;
  for (const auto& [model_name, model] : item(g_doc->root(), "models").items()) {
    if (!model.has("config_json") || model_name.rfind("mixtral", 0) == 0) continue;
    const auto m = libacc_model(model);
    const ModuleTree tree = acc::core::tree_of(*m);
    std::vector<std::pair<std::string, std::string>> ours, theirs;  // (name, class) in named_modules order
    const std::function<void(int, const std::string&)> walk = [&](int i, const std::string& name) {
      ours.emplace_back(name, tree.modules[static_cast<size_t>(i)].class_name);
      for (const auto& [n, c] : tree.modules[static_cast<size_t>(i)].children)
        walk(c, name.empty() ? n : name + "." + n);
    };
    walk(0, "");
    for (const auto& [name, cls] : item(model, "module_classes").items()) theirs.emplace_back(name, cls.as_string());
    ASSERT_EQ(ours.size(), theirs.size()) << model_name;
    std::set<std::string> weightless;
    for (const auto& w : m->weightless_modules()) weightless.insert(w.name);
    for (size_t i = 0; i < ours.size(); ++i) {
      ASSERT_EQ(ours[i].first, theirs[i].first) << model_name << " module " << i;
      if (weightless.count(ours[i].first)) {
        EXPECT_EQ(ours[i].second, theirs[i].second) << model_name << " " << ours[i].first;
      }
    }
    for (const auto& [dtype, per] : item(model, "module_sizes").items()) {
      const auto sizes = json::Document::object(bigmodel::module_sizes_json(*m, dtype == "none" ? "" : dtype), "sizes");
      EXPECT_EQ(sizes.root().size(), per.size()) << model_name << " " << dtype;
      for (const auto& [name, bytes] : per.items()) {
        ASSERT_TRUE(sizes.root().has(name)) << model_name << " " << dtype << " '" << name << "'";
        EXPECT_EQ(sizes.root().get_int(name), bytes.as_int()) << model_name << " " << dtype << " '" << name << "'";
        ++checked;
      }
    }
  }
  std::printf("%d module sizes of libacc's models equal Accelerate's\n", checked);
  EXPECT_GT(checked, 1000);
}

// libacc's own models, built empty from the same configs (acc_model_from_config with "device": "meta"), planned
// with tree_of: their names, sizes and module trees are transformers' (weightless modules such as rotary_emb, its
// non-persistent inv_freq buffers, dropout and activations included: Model::weightless_modules), so the maps are
// Accelerate's, key for key. One exception: Mixtral split below its decoder layers (transformers 5 fuses the
// experts in memory; libacc keeps the checkpoint's per-expert modules), which is not compared.
TEST(DeviceMap, LibaccModelsPlanAsAccelerate) {
  int compared = 0;
  for (const Value& c : item(g_doc->root(), "cases").elements()) {
    const Value model = item(item(g_doc->root(), "models"), str(c, "model").c_str());
    const Value in = item(c, "inputs");
    if (c.has("error") || !model.has("config_json")) continue;
    if (str(c, "model").rfind("mixtral", 0) == 0 && item(in, "no_split_module_classes").size() == 0) continue;
    auto m = libacc_model(model);
    json::Writer options;
    options.begin_object().key("device_map").value(str(c, "mode") == "infer" ? "sequential" : str(c, "mode"));
    options.key("max_memory").begin_object();
    for (const Value& p : item(in, "max_memory").elements()) {
      options.key(device_of(p.at(0)));
      p.at(1).is_number() ? options.value(p.at(1).as_int()) : options.value(p.at(1).as_string());
    }
    options.end_object().key("no_split_module_classes").value(item(in, "no_split_module_classes"));
    options.key("offload_buffers").value(in.get_bool_or("offload_buffers", false));
    options.key("fallback_allocation").value(in.get_bool_or("fallback_allocation", false));
    if (in.has_value("dtype")) options.key("dtype").value(in.get_string("dtype"));
    options.end_object();
    const auto got = json::Document::object(bigmodel::plan_device_map(*m, options.str().c_str()), "device map");
    std::map<std::string, Device> ours, theirs;
    for (const auto& [k, e] : got.root().items()) ours[k] = device_of(e);
    for (const auto& [k, e] : item(c, "device_map").items()) theirs[k] = device_of(e);
    if (ours != theirs) ADD_FAILURE() << str(c, "id") << ":\n" << map_diff(theirs, ours);
    ++compared;
  }
  std::printf("%d cases planned on libacc's own empty models\n", compared);
  EXPECT_GE(compared, 30);
}

// prepare_pippy(split_points="auto") as Accelerate computes it (tests/bigmodel/make_pippy_fixtures.py): generate_device_map
// over 2, 3 and 4 processes on libacc's own empty models, the first module of each device from 1 on, with
// no_split_module_classes None and the model's _no_split_modules.
TEST(DeviceMap, PippySplitPointsAreAccelerates) {
  ASSERT_TRUE(g_pippy);
  int compared = 0;
  for (const Value& c : item(g_pippy->root(), "cases").elements()) {
    const auto m = libacc_model(item(item(g_doc->root(), "models"), str(c, "model").c_str()));
    std::vector<std::string> no_split;
    if (!c.get("no_split_module_classes").is_null())
      for (const Value& v : item(c, "no_split_module_classes").elements()) no_split.push_back(v.as_string());
    const int n = static_cast<int>(c.get_int("num_processes"));
    const std::string what = str(c, "model") + " on " + std::to_string(n) + " processes, no_split " +
                             c.get("no_split_module_classes").text();
    if (c.has("error")) {
      EXPECT_THROW(pippy_split_points(tree_of(*m), n, no_split, m->no_split_modules()), std::invalid_argument) << what;
    } else {
      std::vector<std::string> want;
      for (const Value& v : item(c, "split_points").elements()) want.push_back(v.as_string());
      EXPECT_EQ(pippy_split_points(tree_of(*m), n, no_split, m->no_split_modules()), want) << what;
    }
    ++compared;
  }
  EXPECT_GE(compared, 24);
}

// Sizes as Accelerate's convert_file_size_to_int parses them, with two deliberate differences: a string of digits
// is bytes (Accelerate takes bytes only as a Python int; C callers pass strings) and "TB" is accepted.
TEST(DeviceMap, SizeStringsParseAsAccelerates) {
  for (const Value& c : item(g_doc->root(), "convert_file_size_to_int").elements()) {
    const std::string input = size_of(item(c, "input"));
    if (input == "7" && c.has("error")) {
      EXPECT_EQ(parse_shard_size(input), 7);
    } else if (input == "3TB") {
      EXPECT_EQ(parse_shard_size(input), 3000000000000);
    } else if (c.has("error")) {
      EXPECT_THROW(parse_shard_size(input), std::invalid_argument) << input;
    } else {
      EXPECT_EQ(parse_shard_size(input), item(c, "bytes").as_int()) << input;
    }
  }
}

}  // namespace
}  // namespace acc::core::bigmodel

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) return 2;
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  try {
    acc::core::bigmodel::g_doc = std::make_unique<acc::json::Document>(text.str(), argv[1]);
    const std::string path(argv[1]), pippy = path.substr(0, path.rfind('/') + 1) + "pippy_split_points.json";
    std::ifstream pin(pippy);
    std::stringstream ptext;
    ptext << pin.rdbuf();
    acc::core::bigmodel::g_pippy = std::make_unique<acc::json::Document>(ptext.str(), pippy);
  } catch (const acc::json::Error& e) {
    std::fprintf(stderr, "cannot read %s\n", e.what());
    return 2;
  }
  return RUN_ALL_TESTS();
}
