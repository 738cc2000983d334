// LoRA adapters against peft itself: tests/finetune/make_fixtures.py made adapters with peft 0.21 on the committed
// tiny models and recorded logits, loss, gradients, greedy ids and merged weights (tests/finetune/README.md). Here
// libacc loads each adapter peft saved and must give the same numbers; saves it and reads it back; builds the same
// adapter from the case's LoraConfig arguments; and refuses bad input without changing anything.
//   test_lora SOURCE_ROOT [gtest flags]
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/linear.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/adapter.hpp"
#include "checkpoint/save_model.hpp"
#include "formats/safetensors.hpp"
#include "models/hf/families.hpp"
#include "models/hf/generate.hpp"
#include "models/hf/pretrained.hpp"
#include "models/lora.hpp"
#include "train/accelerator.hpp"
#include "util/errors.hpp"
#include <acc/files.hpp>
#include <acc/json.hpp>
#include <acc/limits.hpp>

namespace fs = std::filesystem;

namespace acc::core {
namespace {

std::string g_root;

std::string fixtures() { return g_root + "/tests/finetune/fixtures"; }

// cases.json, kept parsed for the whole run.
const json::Value& cases() {
  static const json::Document doc(config::read_file(fixtures() + "/cases.json"), "cases.json");
  static const json::Value v = doc.root().get("cases");
  return v;
}

std::map<std::string, at::Tensor> expected_of(const std::string& c) {
  std::map<std::string, at::Tensor> m;
  for (auto& [k, t] : load_safetensors(fixtures() + "/" + c + "/expected.safetensors")) m[k] = t.clone();
  return m;
}

std::shared_ptr<PreparedModel> base_model(const std::string& c) {
  auto slot = std::make_shared<PreparedModel>();
  slot->model =
      hf::from_pretrained(g_root + "/" + cases().get(c).get_string("base_model_dir"), R"({"dtype": "float32"})");
  return slot;
}

bool is_bert(const std::string& c) { return cases().get(c).get_string("model") == "bert"; }

TensorDict batch_of(const std::string& c, std::map<std::string, at::Tensor>& e, bool labels = true) {
  TensorDict b{{"input_ids", e["input_ids"]}, {"attention_mask", e["attention_mask"]}};
  if (is_bert(c)) b.set("token_type_ids", e["token_type_ids"]);
  if (labels) b.set("labels", e["labels"]);
  return b;
}

// max |a - b| where the mask keeps the position (a padded position's logits mean nothing); bert's [B, C] whole.
double logits_diff(const at::Tensor& a, const at::Tensor& b, const at::Tensor& mask) {
  at::Tensor d = (a - b).abs();
  if (a.dim() == 3) d = d.masked_select(mask.ne(0).unsqueeze(-1).expand_as(d));
  return d.max().item<double>();
}

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

std::map<std::string, at::Tensor> params_of(Model& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& [n, t] : m.named_parameters()) out[n] = t;
  return out;
}

// peft's in-memory name (base_model.model.<m>.lora_A.default.weight, <m>.modules_to_save.default.weight,
// <m>.base_layer.bias) as libacc names the parameter (<m>.lora_A.weight, <m>.weight, <m>.bias).
std::string libacc_name(std::string n) {
  n = n.substr(std::string(lora::kKeyPrefix).size());
  for (const std::string drop : {".default", ".modules_to_save", ".base_layer"})
    for (size_t at; (at = n.find(drop + ".")) != std::string::npos;) n.erase(at, drop.size());
  return n;
}

// Every case of the fixtures.
const char* const kCases[] = {"llama_qv",       "llama_all_linear",      "llama_rslora",
                              "llama_patterns", "llama_modules_to_save", "llama_layers",
                              "llama_regex",    "mistral_attn",          "qwen2_bias_lora_only",
                              "gpt2_conv1d",    "mixtral_all_linear",    "bert_seq_cls"};

class Case : public testing::TestWithParam<const char*> {};

TEST_P(Case, LoadedAdapterGivesPeftsLogitsLossGradientsAndGreedyIds) {
  const std::string c = GetParam();
  auto e = expected_of(c);
  auto slot = base_model(c);
  load_adapter(*slot, fixtures() + "/" + c, R"({"is_trainable": true})");
  Model& model = *slot->model;
  EXPECT_FALSE(model.is_training());
  TensorDict out = model.forward(batch_of(c, e));
  const double dl = logits_diff(out.at("logits"), e["logits"], e["attention_mask"]);
  const double dloss = std::abs(out.at("loss").item<double>() - e["loss"].item<double>());
  std::printf("%s: logits %.3g, loss %.3g\n", c.c_str(), dl, dloss);
  EXPECT_LE(dl, 1e-5) << c;
  EXPECT_LE(dloss, 1e-5) << c;

  // Every trainable tensor has peft's gradient, by file key; nothing else trains.
  out.at("loss").backward();
  auto adapter = lora::find(lora_root(model));
  ASSERT_TRUE(adapter);
  auto params = params_of(model);
  std::set<std::string> keys;
  double worst = 0;
  for (const auto& entry : adapter->entries) {
    keys.insert(entry.key);
    ASSERT_TRUE(e.count("grad/" + entry.key)) << c << ": peft has no gradient for " << entry.key;
    const at::Tensor& g = params.at(entry.name).grad();
    ASSERT_TRUE(g.defined()) << c << ": no gradient for " << entry.name;
    const double d = max_diff(g, e["grad/" + entry.key]);
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-5) << c << ": " << entry.key;
  }
  std::printf("%s: %zu gradients, max |diff| %.3g\n", c.c_str(), keys.size(), worst);
  for (const auto& [k, t] : e)
    if (k.rfind("grad/", 0) == 0) {
      EXPECT_TRUE(keys.count(k.substr(5))) << c << ": libacc does not train " << k;
    }
  std::set<std::string> trainable;
  for (auto& [n, p] : model.trainable_parameters()) trainable.insert(n);
  std::set<std::string> entries;
  for (const auto& entry : adapter->entries) entries.insert(entry.name);
  EXPECT_EQ(trainable, entries) << c;

  if (!is_bert(c)) {  // generation with the adapter active
    c10::NoGradGuard no_grad;
    auto& lm = dynamic_cast<hf::CausalLM&>(model);
    hf::GenerationOptions o = hf::parse_generation_options(R"({"max_new_tokens": 8})", lm.generation_defaults);
    at::Tensor ids = hf::generate(model, e["prompt_ids"], {}, o);
    EXPECT_TRUE(ids.equal(e["greedy_ids"])) << c << ": " << ids << " vs " << e["greedy_ids"];
  }
}

TEST_P(Case, MergedModelGivesPeftsMergedLogitsAndWeights) {
  const std::string c = GetParam();
  auto e = expected_of(c);
  auto slot = base_model(c);
  const auto base = params_of(*slot->model);
  std::map<std::string, at::Tensor> before;
  for (auto& [n, t] : base) before[n] = t.clone();
  load_adapter(*slot, fixtures() + "/" + c, nullptr);
  merge_adapter(*slot);
  Model& model = *slot->model;
  EXPECT_FALSE(lora::find(lora_root(model)));
  // A plain model again: the base's names and shapes.
  auto merged = params_of(model);
  ASSERT_EQ(merged.size(), base.size()) << c;
  for (auto& [n, t] : base) EXPECT_TRUE(merged.count(n) && merged[n].sizes() == t.sizes()) << c << ": " << n;
  c10::NoGradGuard no_grad;
  TensorDict out = model.forward(batch_of(c, e));
  const double d = logits_diff(out.at("logits"), e["logits_merged"], e["attention_mask"]);
  std::printf("%s merged: logits %.3g\n", c.c_str(), d);
  EXPECT_LE(d, 1e-5) << c;
  // The tensors that changed are peft's; where the fixture holds them, with peft's values (on-disk layout).
  std::set<std::string> changed;
  for (auto& [n, t] : merged)
    if (!t.equal(before[n])) changed.insert(n);
  std::set<std::string> want;
  for (const auto& v : cases().get(c).get("merged_changed").elements()) want.insert(v.as_string());
  EXPECT_EQ(changed, want) << c;
  for (const auto& [k, t] : e)
    if (k.rfind("merged/", 0) == 0) {
      const std::string n = k.substr(7);
      ASSERT_TRUE(merged.count(n)) << c << ": " << n;
      EXPECT_LE(max_diff(merged[n], t), 1e-6) << c << ": " << n;
    }

  // save_pretrained writes a plain transformers checkpoint: read back, the merged weights and logits (Mixtral's
  // routed sum is not bit-reproducible across models: within 1e-5).
  const std::string dir = testing::TempDir() + "/lora_merged_" + c;
  fs::remove_all(dir);
  save_pretrained(*slot, dir, "");
  auto again = hf::from_pretrained(dir, R"({"dtype": "float32"})");
  EXPECT_EQ(again->state().size(), model.state().size());
  at::Tensor reloaded = again->forward(batch_of(c, e)).at("logits");
  EXPECT_LE(max_diff(reloaded, out.at("logits")), 1e-5) << c;
  for (auto& [n, t] : again->named_parameters()) EXPECT_TRUE(t.equal(merged[n])) << c << ": " << n;
  fs::remove_all(dir);
}

TEST_P(Case, SavedAdapterIsPeftsFileAndReloads) {
  const std::string c = GetParam();
  auto e = expected_of(c);
  auto slot = base_model(c);
  const std::string from = fixtures() + "/" + c;
  load_adapter(*slot, from, nullptr);
  const std::string dir = testing::TempDir() + "/lora_saved_" + c;
  fs::remove_all(dir);
  fs::create_directories(dir);
  config::write_file_atomic(dir + "/README.md", "mine");  // a user's file stays
  save_adapter(*slot, dir);
  EXPECT_EQ(config::read_file(dir + "/README.md"), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 3);

  // The same keys, shapes and values as peft's file.
  std::map<std::string, at::Tensor> theirs, ours;
  for (auto& [k, t] : load_safetensors(from + "/adapter_model.safetensors")) theirs[k] = t.clone();
  for (auto& [k, t] : load_safetensors(dir + "/adapter_model.safetensors")) ours[k] = t.clone();
  ASSERT_EQ(ours.size(), theirs.size()) << c;
  for (auto& [k, t] : theirs) {
    ASSERT_TRUE(ours.count(k)) << c << ": " << k;
    EXPECT_TRUE(ours[k].equal(t)) << c << ": " << k;
  }
  // The header's metadata is peft's {"format": "pt"}.
  const std::string bytes = config::read_file(dir + "/adapter_model.safetensors");
  EXPECT_NE(bytes.find(R"("__metadata__":{"format":"pt"})"), std::string::npos);

  // Every field peft writes, keys sorted, and the values that matter equal to peft's.
  const json::Document mine(config::read_file(dir + "/adapter_config.json"), "ours");
  const json::Document peft(config::read_file(from + "/adapter_config.json"), "peft's");
  EXPECT_EQ(mine.root().keys(), peft.root().keys()) << c;
  auto sorted_keys = mine.root().keys();
  EXPECT_TRUE(std::is_sorted(sorted_keys.begin(), sorted_keys.end()));
  for (const auto& key : peft.root().keys()) {
    json::Value a = mine.root().get(key), b = peft.root().get(key);
    if (key == "target_modules" && a.is_array()) {  // a Python set: any order
      std::set<std::string> sa, sb;
      for (auto& v : a.elements()) sa.insert(v.as_string());
      for (auto& v : b.elements()) sb.insert(v.as_string());
      EXPECT_EQ(sa, sb) << c;
    } else if (key == "modules_to_save" && a.is_array()) {
      EXPECT_EQ(a.size(), b.size()) << c;
    } else {
      EXPECT_EQ(a.text(), b.text()) << c << ": " << key;
    }
  }

  // Read back onto a fresh base: the same logits, bit for bit.
  auto again = base_model(c);
  load_adapter(*again, dir, nullptr);
  c10::NoGradGuard no_grad;
  EXPECT_TRUE(again->model->forward(batch_of(c, e, false))
                  .at("logits")
                  .equal(slot->model->forward(batch_of(c, e, false)).at("logits")))
      << c;
  fs::remove_all(dir);
}

TEST_P(Case, AddLoraMakesPeftsParameters) {
  const std::string c = GetParam();
  auto slot = base_model(c);
  const std::string args = cases().get(c).get("lora_config_args").text();
  add_lora(*slot, args.c_str());
  // What trains, by file key (peft's in-memory name less the adapter name and the modules_to_save wrapper) and shape.
  std::map<std::string, std::vector<int64_t>> want, got, want_names, got_names;
  for (const auto& [n, shape] : cases().get(c).get("trainable_parameters").items()) {
    std::vector<int64_t> s;
    for (const auto& d : shape.elements()) s.push_back(d.as_int());
    std::string key = n;
    for (const std::string drop : {".default", ".modules_to_save"})
      for (size_t at; (at = key.find(drop + ".")) != std::string::npos;) key.erase(at, drop.size());
    want[key] = s;
    want_names[libacc_name(n)] = s;
  }
  auto adapter = lora::find(lora_root(*slot->model));
  ASSERT_TRUE(adapter);
  std::map<std::string, std::string> key_of;
  for (const auto& entry : adapter->entries) key_of[entry.name] = entry.key;
  for (auto& [n, p] : slot->model->trainable_parameters()) {
    ASSERT_TRUE(key_of.count(n)) << c << ": " << n << " trains but is not in the adapter";
    got[key_of[n]] = p.sizes().vec();
    got_names[n] = p.sizes().vec();
  }
  EXPECT_EQ(got, want) << c;
  // And the names are peft's less "base_model.model." (but where Mixtral's differ: libacc keeps the experts of the
  // checkpoint, block_sparse_moe.experts.E, where transformers 5 fuses them into mlp.experts).
  if (c != "mixtral_all_linear") {
    EXPECT_EQ(got_names, want_names) << c;
  }
  // The config's generated parts, as peft wrote them.
  const json::Document peft(config::read_file(fixtures() + "/" + c + "/adapter_config.json"), "peft's");
  const json::Document ours(lora::config_file_text(*adapter), "ours");
  for (const char* key : {"rank_pattern", "alpha_pattern", "modules_to_save", "task_type", "auto_mapping"})
    EXPECT_EQ(ours.root().get(key).text(), peft.root().get(key).text()) << c << ": " << key;
  for (const char* key : {"target_modules", "target_parameters"}) {
    json::Value a = ours.root().get(key), b = peft.root().get(key);
    if (!a.is_array() || !b.is_array()) {
      EXPECT_EQ(a.text(), b.text()) << c << ": " << key;
      continue;
    }
    std::set<std::string> sa, sb;
    for (auto& v : a.elements()) sa.insert(v.as_string());
    for (auto& v : b.elements()) sb.insert(v.as_string());
    EXPECT_EQ(sa, sb) << c << ": " << key;
  }
  // A new adapter changes nothing yet (B = 0), unless init_lora_weights is false.
  auto e = expected_of(c);
  auto plain = base_model(c);
  c10::NoGradGuard no_grad;
  const auto init = cases().get(c).get("lora_config_args").find("init_lora_weights");
  const bool noop = !init || !init->is_bool() || init->as_bool();
  if (noop) {
    EXPECT_TRUE(slot->model->forward(batch_of(c, e, false))
                    .at("logits")
                    .equal(plain->model->forward(batch_of(c, e, false)).at("logits")))
        << c;
  }
}

// For tests/finetune/check_peft_loads.py (ACC_LORA_SAVED=DIR): per case, an adapter libacc made from the case's
// LoraConfig arguments, its trained tensors moved as make_fixtures.py moved peft's, saved with save_adapter, and beside it
// libacc_outputs.safetensors with the inputs and libacc's logits; under merged/, the model merged and saved with
// save_pretrained, with its logits. peft must load the adapter onto the base, and transformers the merged model, and
// both agree.
TEST_P(Case, AdapterForPeft) {
  const char* out = std::getenv("ACC_LORA_SAVED");
  if (!out) GTEST_SKIP() << "ACC_LORA_SAVED is not set (tests/finetune/check_peft_loads.py sets it)";
  const std::string c = GetParam();
  at::manual_seed(static_cast<uint64_t>(cases().get(c).get_int("seed")));  // the same adapter every run
  auto slot = base_model(c);
  add_lora(*slot, cases().get(c).get("lora_config_args").text().c_str());
  {
    c10::NoGradGuard no_grad;
    // As make_fixtures.py: every lora_B N(0, 0.1^2), every other trained tensor (but lora_A) moved by N(0, 0.05^2).
    for (auto& [n, p] : slot->model->trainable_parameters())
      if (n.ends_with(".lora_B.weight")) p.copy_(at::randn_like(p) * 0.1);
      else if (!n.ends_with(".lora_A.weight")) p.add_(at::randn_like(p) * 0.05);
  }
  const std::string dir = std::string(out) + "/" + c;
  save_adapter(*slot, dir);
  auto e = expected_of(c);
  TensorDict batch = batch_of(c, e, false);
  c10::NoGradGuard no_grad;
  NamedTensors saved;
  for (const auto& [k, t] : batch.items()) saved.emplace_back(k, t);
  saved.emplace_back("logits", slot->model->forward(batch).at("logits"));
  save_safetensors(saved, dir + "/libacc_outputs.safetensors",
                   {{"base_model_dir", g_root + "/" + cases().get(c).get_string("base_model_dir")}});
  // Merged and saved as a plain transformers checkpoint, with the merged model's logits.
  merge_adapter(*slot);
  save_pretrained(*slot, dir + "/merged", "");
  NamedTensors merged;
  for (const auto& [k, t] : batch.items()) merged.emplace_back(k, t);
  merged.emplace_back("logits", slot->model->forward(batch).at("logits"));
  save_safetensors(merged, dir + "/merged/libacc_outputs.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Peft, Case, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

/* ------------------------------------------------------------------------------------------ bad input */

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& ex) {
    return ex.what();
  }
  return "(no error)";
}

std::vector<std::string> names_of(Model& m) {
  std::vector<std::string> v;
  for (auto& [n, t] : m.state()) v.push_back(n);
  return v;
}

TEST(BadInput, TargetsMatchingNothingListTheLinearLayers) {
  auto slot = base_model("llama_qv");
  const auto names = names_of(*slot->model);
  const std::string m = message_of([&] { add_lora(*slot, R"({"target_modules": ["nope"]})"); });
  EXPECT_NE(m.find("[nope] matched no linear layer"), std::string::npos) << m;
  EXPECT_NE(m.find("model.layers.0.self_attn.q_proj"), std::string::npos) << m;
  EXPECT_NE(m.find("lm_head"), std::string::npos) << m;
  EXPECT_THROW(add_lora(*slot, R"({"target_modules": "q_proj"})"), std::invalid_argument);  // a string is a regex
  EXPECT_THROW(add_lora(*slot, R"({"target_modules": ["q_proj"], "layers_to_transform": [7]})"), std::invalid_argument);
  EXPECT_NE(message_of([&] { add_lora(*slot, R"({"target_modules": ["self_attn"]})"); }).find("not a linear layer"),
            std::string::npos);
  EXPECT_EQ(names_of(*slot->model), names);
  for (auto& [n, p] : slot->model->named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;
}

TEST(BadInput, BadConfigsNameTheKey) {
  auto slot = base_model("llama_qv");
  const auto names = names_of(*slot->model);
  for (const auto& [json, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"r": 0, "target_modules": ["q_proj"]})", "r must be a positive integer"},
           {R"({"r": -3, "target_modules": ["q_proj"]})", "r must be a positive integer"},
           {R"({"r": 4, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 0}})", "rank_pattern.q_proj"},
           {R"({"target_modules": ["q_proj"], "lora_alhpa": 8})", "unknown LoraConfig field 'lora_alhpa'"},
           {R"({"target_modules": ["q_proj"], "bias": "some"})", "bias must be"},
           {R"({"target_modules": ".*", "layers_to_transform": [0]})", "layers_to_transform"},
           {R"({"target_modules": ["q_proj"], "peft_type": "IA3"})", "IA3"},
           {R"({"target_modules": "(", "r": 2})", "target_modules"},
           // Refused when read, naming the key, in the form peft matches it (a \\Q that the wrapping leaves open).
           {R"({"target_modules": ["q_proj"], "rank_pattern": {"\\Qq_proj": 4}})", "rank_pattern"},
           // peft reads the layer number as group 1: a layers_pattern with a group of its own is refused by name.
           {R"j({"target_modules": ["q_proj"], "layers_to_transform": [0], "layers_pattern": "(layers)"})j",
            "layers_pattern '(layers)' captures a group of its own"}}) {
    const std::string m = message_of([&] { add_lora(*slot, json.c_str()); });
    EXPECT_NE(m.find(key), std::string::npos) << json << " -> " << m;
  }
  EXPECT_THROW(add_lora(*slot, R"({"target_modules": ["q_proj"], "use_dora": true})"), UnsupportedError);
  EXPECT_THROW(add_lora(*slot, R"({"target_modules": ["q_proj"], "init_lora_weights": "pissa"})"), UnsupportedError);
  EXPECT_EQ(names_of(*slot->model), names);
  // One adapter at a time; merging without one is a call-order error.
  EXPECT_THROW(merge_adapter(*slot), StateError);
  add_lora(*slot, R"({"target_modules": ["q_proj"]})");
  EXPECT_THROW(add_lora(*slot, R"({"target_modules": ["v_proj"]})"), StateError);
}

// Regular expressions from adapter_config.json and from callers run on RE2 (issue 36): linear in the name, so a
// pattern that made std::regex backtrack past 60 s finishes at once; 30,000 nested groups (a stack overflow in
// std::regex's compiler) and what RE2 cannot express (backreferences, lookaround) are refused naming the reason.
TEST(BadInput, PatternsFromFilesRunInLinearTimeOrAreRefused) {
  const std::string from = fixtures() + "/llama_qv";
  const std::string config = config::read_file(from + "/adapter_config.json");
  auto with_targets = [&](const std::string& name, const std::string& targets_json) {
    const std::string dir = testing::TempDir() + "/lora_pattern_" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(from + "/adapter_model.safetensors", dir + "/adapter_model.safetensors");
    const json::Document doc(config, "adapter_config.json");
    json::Writer w;
    w.begin_object();
    for (const auto& [k, v] : doc.root().items()) {
      w.key(k);
      if (k == "target_modules") w.raw(targets_json);
      else w.value(v);
    }
    w.end_object();
    config::write_file_atomic(dir + "/adapter_config.json", w.str());
    return dir;
  };
  auto slot = base_model("llama_qv");
  const auto names = names_of(*slot->model);
  auto timed = [](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string m = message_of(f);
    return std::make_pair(m, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  auto [m, seconds] = timed([&] { load_adapter(*slot, with_targets("backtrack", R"("(.|.)*x")"), nullptr); });
  EXPECT_NE(m.find("target_modules '(.|.)*x' matched no linear layer"), std::string::npos) << m;
  EXPECT_LT(seconds, 1.0);
  std::tie(m, seconds) = timed([&] { slot->model->set_requires_grad("(.|.)*x", false); });
  EXPECT_NE(m.find("requires_grad pattern '(.|.)*x' matches no parameter name"), std::string::npos) << m;
  EXPECT_LT(seconds, 1.0);
  const std::string nested = std::string(30000, '(') + "q_proj" + std::string(30000, ')');
  m = message_of([&] { load_adapter(*slot, with_targets("nested", json::quote(nested)), nullptr); });
  EXPECT_NE(m.find("target_modules"), std::string::npos) << m.substr(0, 300);
  EXPECT_NE(m.find("longer than 4096 bytes"), std::string::npos) << m.substr(0, 300);
  EXPECT_LT(m.size(), 400u);  // the pattern is shown cut short
  m = message_of([&] { slot->model->set_requires_grad(nested, false); });
  EXPECT_NE(m.find("longer than 4096 bytes"), std::string::npos) << m.substr(0, 300);
  for (const auto& [pattern, why] :
       std::vector<std::pair<std::string, std::string>>{{R"(.*(q)\1_proj)", R"(invalid escape sequence: \1)"},
                                                        {".*(?<!k)_proj", "invalid perl operator: (?<"},
                                                        {"(?!k).*_proj", "invalid perl operator: (?!"}}) {
    m = message_of([&] { load_adapter(*slot, with_targets("refused", json::quote(pattern)), nullptr); });
    EXPECT_NE(m.find("'" + pattern + "' is not a regular expression libacc reads (" + why + ")"), std::string::npos)
        << m;
  }
  EXPECT_EQ(names_of(*slot->model), names);
  for (auto& [n, p] : slot->model->named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;
  // As deep as the length allows: RE2 parses it without recursion, and it selects what it says.
  auto deep_slot = base_model("llama_qv");
  const std::string deep = std::string(2000, '(') + ".*(q|v)_proj" + std::string(2000, ')');
  load_adapter(*deep_slot, with_targets("deep", json::quote(deep)), nullptr);
  EXPECT_EQ(lora::find(lora_root(*deep_slot->model))->targets.size(), 4u);
}

// The patterns peft's and Accelerate's documentation show keep their meaning (re.fullmatch; rank_pattern and
// alpha_pattern keys matched at the end of a name, at a dot).
TEST(Lora, DocumentedPatternsSelectWhatPeftSelects) {
  auto targets_of = [](const char* lora_config) {
    auto slot = base_model("llama_qv");
    add_lora(*slot, lora_config);
    std::map<std::string, std::pair<int64_t, double>> out;
    for (const auto& t : lora::find(lora_root(*slot->model))->targets) out[t.module] = {t.r, t.alpha};
    return out;
  };
  using Targets = std::map<std::string, std::pair<int64_t, double>>;
  const std::string a0 = "model.layers.0.self_attn.", a1 = "model.layers.1.self_attn.";
  EXPECT_EQ(targets_of(R"j({"r": 4, "lora_alpha": 8, "target_modules": ".*\\.(q_proj|v_proj)"})j"),
            (Targets{
                {a0 + "q_proj", {4, 8}}, {a0 + "v_proj", {4, 8}}, {a1 + "q_proj", {4, 8}}, {a1 + "v_proj", {4, 8}}}));
  EXPECT_EQ(targets_of(R"({"r": 4, "lora_alpha": 8, "target_modules": "^.*(q|k|v)_proj$"})").size(), 6u);
  EXPECT_EQ(targets_of(R"({"r": 4, "lora_alpha": 8, "target_modules": "model.*\\.layers\\.1\\..*(k|v)_proj"})"),
            (Targets{{a1 + "k_proj", {4, 8}}, {a1 + "v_proj", {4, 8}}}));
  EXPECT_EQ(targets_of(R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "layers_to_transform": [1],
                           "layers_pattern": "layers"})"),
            (Targets{{a1 + "q_proj", {4, 8}}}));
  EXPECT_EQ(targets_of(R"({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
                           "rank_pattern": {"^model.layers.0.self_attn.q_proj": 2, "layers\\.1\\.self_attn\\.(q|v)_proj": 6},
                           "alpha_pattern": {"v_proj": 32}})"),
            (Targets{
                {a0 + "q_proj", {2, 8}}, {a0 + "v_proj", {4, 32}}, {a1 + "q_proj", {6, 8}}, {a1 + "v_proj", {6, 32}}}));
}

TEST(BadInput, TiedHeadCannotBeSavedOrTargeted) {
  auto slot = base_model("qwen2_bias_lora_only");
  EXPECT_THROW(add_lora(*slot, R"({"target_modules": ["q_proj"], "modules_to_save": ["lm_head"]})"), UnsupportedError);
}

// An adapter whose names or shapes do not fit: an error naming the tensor, and the model unchanged.
TEST(BadInput, MismatchedAdapterChangesNothing) {
  const std::string from = fixtures() + "/llama_qv";
  NamedTensors tensors = load_safetensors(from + "/adapter_model.safetensors");
  const std::string config = config::read_file(from + "/adapter_config.json");
  auto write = [&](const std::string& name, const NamedTensors& t, const std::string& cfg) {
    const std::string dir = testing::TempDir() + "/lora_bad_" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    save_safetensors(t, dir + "/adapter_model.safetensors");
    config::write_file_atomic(dir + "/adapter_config.json", cfg);
    return dir;
  };
  auto slot = base_model("llama_qv");
  const auto names = names_of(*slot->model);
  std::map<std::string, at::Tensor> before;
  for (auto& [n, t] : slot->model->named_parameters()) before[n] = t.clone();
  auto unchanged = [&] {
    EXPECT_EQ(names_of(*slot->model), names);
    for (auto& [n, t] : slot->model->named_parameters()) {
      EXPECT_TRUE(t.equal(before[n])) << n;
      EXPECT_TRUE(t.requires_grad()) << n;
    }
  };
  const std::string key = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight";
  NamedTensors renamed = tensors, reshaped = tensors, missing, extra = tensors;
  for (auto& [k, t] : renamed)
    if (k == key) k = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.wieght";
  for (auto& [k, t] : reshaped)
    if (k == key) t = at::zeros({8, 4});
  for (auto& [k, t] : tensors)
    if (k != key) missing.emplace_back(k, t);
  extra.emplace_back("base_model.model.model.layers.0.mlp.up_proj.lora_A.weight", at::zeros({4, 32}));
  std::string m = message_of([&] { load_adapter(*slot, write("renamed", renamed, config), nullptr); });
  EXPECT_NE(m.find("lacks '" + key + "'"), std::string::npos) << m;
  unchanged();
  m = message_of([&] { load_adapter(*slot, write("reshaped", reshaped, config), nullptr); });
  EXPECT_NE(m.find("'" + key + "' has shape [8, 4]"), std::string::npos) << m;
  unchanged();
  m = message_of([&] { load_adapter(*slot, write("missing", missing, config), nullptr); });
  EXPECT_NE(m.find(key), std::string::npos) << m;
  unchanged();
  m = message_of([&] { load_adapter(*slot, write("extra", extra, config), nullptr); });
  EXPECT_NE(m.find("holds 'base_model.model.model.layers.0.mlp.up_proj.lora_A.weight'"), std::string::npos) << m;
  unchanged();
  // A config that does not fit its tensors (r 8 for tensors of rank 4): the first tensor is named.
  std::string r8 = config;
  r8.replace(r8.find("\"r\": 4"), 6, "\"r\": 8");
  m = message_of([&] { load_adapter(*slot, write("r8", tensors, r8), nullptr); });
  EXPECT_NE(m.find("has shape [4, 32]"), std::string::npos) << m;
  EXPECT_NE(m.find("but [8, 32] in the adapter on this model"), std::string::npos) << m;
  unchanged();
  // The adapter on a model without those layers: the targets are named with the model's linear layers.
  auto other = base_model("gpt2_conv1d");
  m = message_of([&] { load_adapter(*other, from, nullptr); });
  EXPECT_NE(m.find("matched no linear layer"), std::string::npos) << m;
  EXPECT_NE(m.find("transformer.h.0.attn.c_attn"), std::string::npos) << m;
  EXPECT_FALSE(lora::find(lora_root(*other->model)));
  // A config with an unknown key.
  std::string bad = config;
  bad.insert(bad.find('{') + 1, "\n  \"lora_rank\": 4,");
  m = message_of([&] { load_adapter(*slot, write("config", tensors, bad), nullptr); });
  EXPECT_NE(m.find("lora_rank"), std::string::npos) << m;
  unchanged();
}

TEST(BadInput, SaveWritesNothingHalf) {
  auto slot = base_model("llama_qv");
  const std::string dir = testing::TempDir() + "/lora_nothing";
  fs::remove_all(dir);
  EXPECT_THROW(save_adapter(*slot, dir), StateError);  // no adapter
  EXPECT_FALSE(fs::exists(dir));
  add_lora(*slot, R"({"target_modules": ["q_proj"]})");
  config::write_file_atomic(dir, "a file where the folder should be");
  EXPECT_THROW(save_adapter(*slot, dir), std::exception);
  EXPECT_EQ(config::read_file(dir), "a file where the folder should be");
  fs::remove(dir);
}

// Issue 36: adapter_config.json is read within the limits of a config file (acc/limits.hpp), as the launch config is:
// at most kAdapterConfigBytes, a string value at most 4096 bytes, 64 levels of nesting, 4096 keys an object, a key
// (rank_pattern's patterns) at most 4096 bytes; each refused naming the file, and the key where there is one. A
// 50 MB string value was read whole.
TEST(BadInput, AdapterConfigIsReadWithinTheLimits) {
  const std::string from = fixtures() + "/llama_qv";
  const json::Document peft(config::read_file(from + "/adapter_config.json"), "adapter_config.json");
  // The fixture's config with `key` set to `value_json`, beside the fixture's weights.
  auto with = [&](const std::string& name, const std::string& key, const std::string& value_json) {
    const std::string dir = testing::TempDir() + "/lora_limits_" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(from + "/adapter_model.safetensors", dir + "/adapter_model.safetensors");
    std::string text = "{";
    for (const auto& [k, v] : peft.root().items())
      if (k != key) text += json::quote(k) + ": " + v.text() + ", ";
    text += json::quote(key) + ": " + value_json + "}";
    config::write_file_atomic(dir + "/adapter_config.json", text);
    return dir;
  };
  auto slot = base_model("llama_qv");
  const auto names = names_of(*slot->model);
  auto refused = [&](const std::string& dir, const std::vector<std::string>& parts) {
    const std::string m = message_of([&] { load_adapter(*slot, dir, nullptr); });
    EXPECT_NE(m.find(dir + "/adapter_config.json"), std::string::npos) << m.substr(0, 400);
    for (const auto& part : parts) EXPECT_NE(m.find(part), std::string::npos) << part << " in " << m.substr(0, 400);
    EXPECT_LT(m.size(), 1000u);
    EXPECT_EQ(names_of(*slot->model), names);
  };
  const std::string big(50u << 20, 'q');
  refused(with("50mb", "target_modules", "\"" + big + "\""),
          {"more than the limit of " + std::to_string(limits::kAdapterConfigBytes)});
  const std::string long_name(5000, 'q');
  refused(with("string", "target_modules", R"(["q_proj", ")" + long_name + R"("])"),
          {"string longer than 4096 bytes (the limit) in 'target_modules[1]'"});
  refused(with("1mb", "base_model_name_or_path", "\"" + std::string(1u << 20, 'p') + "\""),
          {"string longer than 4096 bytes (the limit) in 'base_model_name_or_path'"});
  std::string deep = "1";
  for (int i = 0; i < 100; ++i) deep = "{\"a\": " + deep + "}";
  refused(with("deep", "runtime_config", deep), {"nesting deeper than 64 levels (the limit) in 'runtime_config.a.a."});
  std::string many = "{";
  for (int i = 0; i < 5000; ++i) many += (i ? ", \"" : "\"") + std::to_string(i) + "_proj\": 2";
  refused(with("keys", "rank_pattern", many + "}"),
          {"more than 4096 keys in one object (the limit) in 'rank_pattern'"});
  refused(with("key", "rank_pattern", "{\"" + std::string(5000, 'k') + "\": 2}"),
          {"key longer than 4096 bytes (the limit) in 'rank_pattern'"});
  // Within the limits: a rank_pattern key of 300 bytes (a pattern, as long as patterns may be), 4096 keys.
  const std::string key300 = "(" + std::string(296, 'x') + "|v)_proj";
  load_adapter(*slot, with("fine", "rank_pattern", "{\"" + key300 + "\": 4}"), nullptr);
  EXPECT_EQ(lora::find(lora_root(*slot->model))->targets.size(), 4u);
  // add_lora's config is read by the same reader: a 50 MB value is refused at its 4097th byte, naming the key.
  auto other = base_model("llama_qv");
  const std::string m = message_of([&] {
    add_lora(*other, (R"({"r": 2, "target_modules": ["q_proj"], "revision": ")" + big + "\"}").c_str());
  });
  EXPECT_NE(m.find("LoRA config"), std::string::npos) << m.substr(0, 400);
  EXPECT_NE(m.find("string longer than 4096 bytes (the limit) in 'revision'"), std::string::npos) << m.substr(0, 400);
  EXPECT_FALSE(lora::find(lora_root(*other->model)));
}

// Issue 36: target_modules (and exclude_modules) lists were de-duplicated in quadratic time, and each module name
// compared with every entry: 200,000 names took minutes. Now a hash set, and a module's name looked up by its
// suffixes: linear. The same targets as the short list.
TEST(BadInput, LongTargetListsAreLinear) {
  std::string targets = R"(["q_proj")", excluded = R"(["nothing")";
  for (int i = 0; i < 200000; ++i) {
    targets += ", \"layer_" + std::to_string(i % 150000) + "\"";  // a quarter repeated
    excluded += ", \"excluded_" + std::to_string(i) + "\"";
  }
  targets += R"(, "v_proj", "q_proj"])";
  excluded += R"(, "layers.1.self_attn.v_proj"])";
  auto slot = base_model("llama_qv");
  const auto t0 = std::chrono::steady_clock::now();
  add_lora(*slot, (R"({"r": 2, "target_modules": )" + targets + R"(, "exclude_modules": )" + excluded + "}").c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("200,000 target_modules and 200,000 exclude_modules: %.3f s\n", seconds);
  EXPECT_LT(seconds, 10.0);
  auto adapter = lora::find(lora_root(*slot->model));
  std::set<std::string> got;
  for (const auto& t : adapter->targets) got.insert(t.module);
  EXPECT_EQ(got, (std::set<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                        "model.layers.1.self_attn.q_proj"}));
  // peft keeps a set: each name once.
  EXPECT_EQ(adapter->config.target_modules.size(), 150002u);
  EXPECT_EQ(adapter->config.exclude_modules.size(), 200002u);
}

// rank_pattern's keys are compiled once per plan, not once per module name (fuzz_adapter_config's finding: 400 keys
// of 4 KB took 8 s on this 2-layer model, and a 16 MiB file would take minutes on a large one).
TEST(BadInput, ManyRankPatternsAreCompiledOnce) {
  std::string ranks = "{";
  for (int i = 0; i < 400; ++i)
    ranks +=
        (i ? ", \"" : "\"") + std::string(4000, 'x') + std::to_string(i) + "|nothing_" + std::to_string(i) + "\": 3";
  ranks += R"(, "q_proj": 4})";
  auto slot = base_model("llama_qv");
  const auto t0 = std::chrono::steady_clock::now();
  add_lora(*slot, (R"({"r": 2, "target_modules": ["q_proj", "v_proj"], "rank_pattern": )" + ranks + "}").c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("401 rank_pattern keys of 4 KB: %.3f s\n", seconds);
  EXPECT_LT(seconds, 5.0);
  for (const auto& t : lora::find(lora_root(*slot->model))->targets)
    EXPECT_EQ(t.r, t.module.find("q_proj") != std::string::npos ? 4 : 2) << t.module;
}

// RLIMIT_FSIZE while alive: a write past `bytes` fails with EFBIG (SIGXFSZ ignored), as on a full disk, so a
// save fails at the first file larger than that.
struct FileSizeLimit {
  rlimit old{};
  sighandler_t old_handler;
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old);
    rlimit r = old;
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
};

std::set<std::string> entries_of(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Issue 36: save_adapter wrote the weights, then the config; when the config failed, the folder held the new
// weights beside the old config. Now both files are staged in one folder inside `dir` and moved into place only
// when both are written: the previous adapter stays whole, and nothing of the failed save is left.
TEST(BadInput, FailedSaveKeepsThePreviousAdapterWhole) {
  const std::string dir = testing::TempDir() + "/lora_half";
  fs::remove_all(dir);
  fs::create_directories(dir);
  config::write_file_atomic(dir + "/README.md", "mine");
  auto first = base_model("llama_qv");
  add_lora(*first, R"({"target_modules": ["q_proj"], "r": 2})");
  save_adapter(*first, dir);
  const std::string old_weights = config::read_file(dir + "/adapter_model.safetensors");
  const std::string old_config = config::read_file(dir + "/adapter_config.json");
  const std::set<std::string> saved = entries_of(dir);
  EXPECT_EQ(saved, (std::set<std::string>{"README.md", "adapter_config.json", "adapter_model.safetensors"}));

  // Another adapter whose config (many target names) is larger than its weights.
  std::string targets = R"(["v_proj")";
  for (int i = 0; i < 400; ++i) targets += ", \"not_a_layer_" + std::to_string(i) + "\"";
  targets += "]";
  auto second = base_model("llama_qv");
  add_lora(*second, (R"({"r": 4, "init_lora_weights": false, "target_modules": )" + targets + "}").c_str());
  const std::string scratch = testing::TempDir() + "/lora_half_sizes";
  fs::remove_all(scratch);
  save_adapter(*second, scratch);
  const auto weights_size = fs::file_size(scratch + "/adapter_model.safetensors");
  const auto config_size = fs::file_size(scratch + "/adapter_config.json");
  ASSERT_LT(weights_size + 1024, config_size);
  fs::remove_all(scratch);

  // The weights fit under the limit, the config does not: the second write fails.
  std::string m;
  {
    FileSizeLimit limit(weights_size + 512);
    m = message_of([&] { save_adapter(*second, dir); });
  }
  EXPECT_NE(m.find("adapter_config.json"), std::string::npos) << m;
  EXPECT_NE(m.find("File too large"), std::string::npos) << m;
  EXPECT_TRUE(config::read_file(dir + "/adapter_model.safetensors") == old_weights) << "the weights changed";
  EXPECT_EQ(config::read_file(dir + "/adapter_config.json"), old_config);
  EXPECT_EQ(entries_of(dir), saved);  // no staging folder, no temporary file
  EXPECT_EQ(entries_of(testing::TempDir()).count(".lora_half.acc-staging"), 0u);
  auto reloaded = base_model("llama_qv");
  load_adapter(*reloaded, dir, nullptr);
  EXPECT_EQ(lora::find(lora_root(*reloaded->model))->targets.size(), 2u);  // the first adapter's q_proj

  // A staging folder a killed save left (its lock held by nobody) is emptied and reused; then both files are new.
  fs::create_directories(dir + "/.adapter.acc-staging");
  config::write_file_atomic(dir + "/.adapter.acc-staging/adapter_model.safetensors", "half");
  save_adapter(*second, dir);
  EXPECT_EQ(entries_of(dir), saved);
  EXPECT_FALSE(config::read_file(dir + "/adapter_model.safetensors") == old_weights) << "the weights are old";
  EXPECT_NE(config::read_file(dir + "/adapter_config.json").find("not_a_layer_399"), std::string::npos);
  EXPECT_EQ(config::read_file(dir + "/README.md"), "mine");
  // Two saves into one folder at once: the second is refused naming the folder, the first's files untouched.
  const std::string now_weights = config::read_file(dir + "/adapter_model.safetensors");
  {
    config::StagingFolder busy(dir + "/.adapter.acc-staging");
    m = message_of([&] { save_adapter(*first, dir); });
  }
  EXPECT_NE(m.find("another process is saving into it right now"), std::string::npos) << m;
  EXPECT_TRUE(config::read_file(dir + "/adapter_model.safetensors") == now_weights) << "the weights changed";
  EXPECT_EQ(entries_of(dir), saved);
  fs::remove_all(dir);
}

// Mixtral under transformers 5 (PEFT_NOTES.md section 9): peft nests the two fused expert targets of a layer in
// target_parameters' set order, so a file may hold gate_up_proj as "experts" and down_proj as "experts.base_layer";
// libacc reads which is which from the shapes. w1 without w3 cannot be targeted, and a regular expression reaching
// the experts is refused (peft resolves it against parameters libacc does not have).
TEST(Mixtral, FusedExpertsEitherNestingAndBadTargets) {
  const std::string from = fixtures() + "/mixtral_all_linear";
  NamedTensors swapped;
  for (auto& [k, t] : load_safetensors(from + "/adapter_model.safetensors")) {
    std::string key = k;
    const std::string inner = ".experts.base_layer.lora_", outer = ".experts.lora_";
    if (size_t at = key.find(inner); at != std::string::npos) key.replace(at, inner.size(), outer);
    else if (size_t at2 = key.find(outer); at2 != std::string::npos) key.replace(at2, outer.size(), inner);
    swapped.emplace_back(key, t);
  }
  const std::string dir = testing::TempDir() + "/lora_mixtral_swapped";
  fs::remove_all(dir);
  fs::create_directories(dir);
  save_safetensors(swapped, dir + "/adapter_model.safetensors");
  config::write_file_atomic(dir + "/adapter_config.json", config::read_file(from + "/adapter_config.json"));
  auto e = expected_of("mixtral_all_linear");
  auto slot = base_model("mixtral_all_linear");
  load_adapter(*slot, dir, nullptr);
  c10::NoGradGuard no_grad;
  const double d = logits_diff(slot->model->forward(batch_of("mixtral_all_linear", e)).at("logits"), e["logits"],
                               e["attention_mask"]);
  EXPECT_LE(d, 1e-5);
  fs::remove_all(dir);

  auto plain = base_model("mixtral_all_linear");
  const std::string m = message_of([&] { add_lora(*plain, R"({"target_modules": ["q_proj", "w1"]})"); });
  EXPECT_NE(m.find("w1 without w3"), std::string::npos) << m;
  EXPECT_THROW(add_lora(*plain, R"({"target_modules": ".*w[13]"})"), UnsupportedError);
  EXPECT_THROW(add_lora(*plain, R"({"target_modules": ["w1", "w3"], "lora_dropout": 0.1})"), std::invalid_argument);
  EXPECT_FALSE(lora::find(lora_root(*plain->model)));
  add_lora(*plain, R"({"target_modules": ["w2"], "r": 3})");  // down_proj alone: "mlp.experts"
  auto adapter = lora::find(lora_root(*plain->model));
  std::set<std::string> keys;
  for (const auto& entry : adapter->entries) keys.insert(entry.key);
  EXPECT_TRUE(keys.count("base_model.model.model.layers.1.mlp.experts.lora_B.weight"));
  EXPECT_EQ(keys.size(), 4u);
}

// init_lora_weights as peft's reset_lora_parameters: true: A ~ U(+-1/sqrt(in)), B = 0; "gaussian": A ~ N(0, 1/r^2),
// B = 0; false: both as nn.Linear (B not zero). Dropout acts in training mode only. A bfloat16 base gets float32
// adapters (peft's autocast_adapter_dtype) and keeps its output dtype.
TEST(Lora, InitDropoutAndDtypes) {
  for (const std::string init : {"true", "\"gaussian\"", "false"}) {
    auto slot = base_model("llama_qv");
    add_lora(*slot, (R"({"r": 16, "target_modules": ["q_proj"], "init_lora_weights": )" + init + "}").c_str());
    auto params = params_of(*slot->model);
    const at::Tensor a = params.at("model.layers.0.self_attn.q_proj.lora_A.weight");
    const at::Tensor b = params.at("model.layers.0.self_attn.q_proj.lora_B.weight");
    EXPECT_EQ(b.abs().max().item<double>() == 0, init != "false") << init;
    if (init == "true") {
      EXPECT_LE(a.abs().max().item<double>(), 1 / std::sqrt(32.0)) << init;
    }
    if (init != "\"gaussian\"") {
      EXPECT_GT(a.abs().max().item<double>(), 0.5 / std::sqrt(32.0)) << init;
    }
    if (init == "\"gaussian\"") {
      EXPECT_NEAR(a.std().item<double>(), 1.0 / 16, 0.01) << init;
    }
  }
  auto e = expected_of("llama_qv");
  auto slot = base_model("llama_qv");
  add_lora(*slot, R"({"target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.5, "init_lora_weights": false})");
  Model& m = *slot->model;
  c10::NoGradGuard no_grad;
  const TensorDict batch = batch_of("llama_qv", e, false);
  EXPECT_TRUE(m.forward(batch).at("logits").equal(m.forward(batch).at("logits")));  // eval: no dropout
  m.train(true);
  EXPECT_FALSE(m.forward(batch).at("logits").equal(m.forward(batch).at("logits")));
  m.train(false);

  auto bf16 = std::make_shared<PreparedModel>();
  bf16->model = hf::from_pretrained(g_root + "/tests/hf/fixtures/llama/model", R"({"dtype": "bfloat16"})");
  load_adapter(*bf16, fixtures() + "/llama_qv", nullptr);
  EXPECT_EQ(params_of(*bf16->model).at("model.layers.0.self_attn.q_proj.lora_A.weight").scalar_type(), at::kFloat);
  at::Tensor logits = bf16->model->forward(batch).at("logits");
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);
  EXPECT_LE(logits_diff(logits.to(at::kFloat), e["logits"], e["attention_mask"]), 0.3);  // bf16 rounding
  merge_adapter(*bf16);
  EXPECT_EQ(bf16->model->forward(batch).at("logits").scalar_type(), at::kBFloat16);
}

// The built-in families take adapters too: GPT's Conv1D layers (fan_in_fan_out) and the MLP's Linear layers.
TEST(BuiltIn, GptAndMlpTakeAdaptersAndMerge) {
  at::manual_seed(0);
  for (const char* spec :
       {R"({"type": "gpt", "vocab_size": 50, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16})",
        R"({"type": "mlp", "sizes": [6, 12, 3]})"}) {
    auto slot = std::make_shared<PreparedModel>();
    slot->model = make_builtin_model(spec);
    const bool gpt = std::string(spec).find("gpt") != std::string::npos;
    add_lora(*slot, gpt ? R"({"target_modules": ["c_attn", "c_proj"], "r": 2, "init_lora_weights": false})"
                        : R"({"target_modules": "all-linear", "r": 2, "init_lora_weights": false})");
    Model& m = *slot->model;
    m.train(false);
    at::Tensor x = gpt ? at::randint(50, {2, 8}, at::kLong) : at::randn({4, 6});
    TensorDict b{{m.input_name(), x}};
    c10::NoGradGuard no_grad;
    at::Tensor adapted = m.forward(b).items().front().second;
    merge_adapter(*slot);
    at::Tensor merged = m.forward(b).items().front().second;
    // float rounding of W x + B A x against (W + B A) x grows with the outputs' size
    EXPECT_LE(max_diff(adapted, merged), 1e-6 * std::max(1.0, adapted.abs().max().item<double>())) << spec;
    EXPECT_FALSE(lora::find(lora_root(m)));
  }
}

// A C++ user's torch::nn::Linear cannot take an adapter: the error names it and says what to use.
TEST(UserModule, TorchLinearIsAClearError) {
  struct Net : torch::nn::Module {
    Net() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
    torch::nn::Linear fc{nullptr};
  };
  auto slot = std::make_shared<PreparedModel>();
  slot->model = std::make_shared<NnModel>(std::make_shared<Net>());
  const std::string m = message_of([&] { add_lora(*slot, R"({"target_modules": ["fc"]})"); });
  EXPECT_NE(m.find("'fc' is a torch::nn::Linear"), std::string::npos) << m;
  EXPECT_NE(m.find("acc::Linear"), std::string::npos) << m;
}

}  // namespace
}  // namespace acc::core

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_lora SOURCE_ROOT\n");
    return 2;
  }
  acc::core::g_root = argv[1];
  return RUN_ALL_TESTS();
}
