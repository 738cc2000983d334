#include "bigmodel/plan.hpp"

#include <ATen/ATen.h>

#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "util/dtypes.hpp"
#include "util/errors.hpp"
#include <acc/json.hpp>
#include "util/options.hpp"

namespace acc::core::bigmodel {

namespace {

int element_size_of(const std::string& dtype, const std::string& source) {
  if (dtype.empty()) return 0;
  if (const auto t = float_dtype_named(dtype)) return static_cast<int>(c10::elementSize(*t));
  throw OptionsError(source + ": dtype '" + dtype + "' is not " + kFloatDtypeNames);
}

}  // namespace

Budget available_memory() {
  // psutil.virtual_memory().available is /proc/meminfo's MemAvailable.
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return {{"cpu", kib * 1024}};
  throw std::runtime_error("max_memory: cannot read the available memory from /proc/meminfo; give max_memory");
}

std::string plan_device_map(const Model& model, const char* options_json) {
  const std::string source = "device map options";
  const json::Document doc = json::Document::object(options_json && *options_json ? options_json : "{}", source);
  const json::Value o = doc.root();
  const std::set<std::string> known = {"device_map", "max_memory",      "no_split_module_classes",
                                       "dtype",      "offload_buffers", "fallback_allocation"};
  for (const std::string& k : o.keys())
    if (!known.count(k))
      throw OptionsError(source + ": unknown key '" + k +
                         "' (known: device_map, max_memory, no_split_module_classes, "
                         "dtype, offload_buffers, fallback_allocation)");
  const std::string mode = o.get_string_or("device_map", "auto");
  if (mode != "auto" && mode != "balanced" && mode != "balanced_low_0" && mode != "sequential")
    throw OptionsError(source + ": device_map '" + mode + "' is not auto, balanced, balanced_low_0 or sequential");
  Budget budget;
  if (o.has_value("max_memory")) {
    std::vector<std::pair<Device, std::string>> raw;
    json::Value m = o.get("max_memory");
    for (const std::string& d : m.keys()) {
      json::Value v = m.get(d);
      try {
        raw.emplace_back(d, std::to_string(v.as_int()));
      } catch (const std::invalid_argument&) {
        raw.emplace_back(d, v.as_string());
      }
    }
    try {
      budget = ordered_budget(raw);
    } catch (const std::invalid_argument& e) {
      throw OptionsError(source + ": " + e.what());
    }
  } else {
    budget = available_memory();
  }
  MapOptions plan;
  if (o.has_value("no_split_module_classes")) {
    json::Value n = o.get("no_split_module_classes");
    for (size_t i = 0; i < n.size(); ++i) plan.no_split.push_back(n.at(i).as_string());
  } else {
    plan.no_split = model.no_split_modules();
  }
  plan.element_size = element_size_of(o.get_string_or("dtype", ""), source);
  plan.offload_buffers = o.get_bool_or("offload_buffers", false);
  plan.fallback_allocation = o.get_bool_or("fallback_allocation", false);
  const ModuleTree tree = tree_of(model);
  // Accelerate's load_checkpoint_and_dispatch: "auto" is "balanced" (the same as "sequential" without accelerators).
  if (mode != "sequential")
    budget = balanced_memory(tree, budget, plan.no_split, plan.element_size, mode == "balanced_low_0");
  const std::map<std::string, Device> map = infer_auto_device_map(tree, budget, plan);
  // In the model's order (named_modules, each module's tensors first), as Accelerate's map reads.
  std::vector<std::string> order;
  const std::function<void(int, const std::string&)> walk = [&](int m, const std::string& name) {
    if (map.count(name)) order.push_back(name);
    const std::string prefix = name.empty() ? "" : name + ".";
    for (const auto& [n, t] : tree.modules[m].parameters)
      if (map.count(prefix + n)) order.push_back(prefix + n);
    for (const auto& [n, c] : tree.modules[m].children) walk(c, prefix + n);
    for (const auto& [n, t] : tree.modules[m].buffers)
      if (map.count(prefix + n)) order.push_back(prefix + n);
  };
  walk(0, "");
  json::Writer j;
  j.begin_object();
  for (const std::string& name : order) {
    const Device& device = map.at(name);
    j.key(name);
    if (is_accelerator(device)) j.value(static_cast<int64_t>(std::stoll(device)));
    else j.value(device);
  }
  j.end_object();
  return j.str();
}

std::string module_sizes_json(const Model& model, const std::string& dtype) {
  const ModuleSizes sizes = compute_module_sizes(tree_of(model), element_size_of(dtype, "module sizes"));
  json::Writer j;
  j.begin_object();
  for (const std::string& name : sizes.order) j.key(name).value(sizes.of(name));
  j.end_object();
  return j.str();
}

}  // namespace acc::core::bigmodel
