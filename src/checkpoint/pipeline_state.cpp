#include "checkpoint/pipeline_state.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "acc/json.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/strategy.hpp"
#include "util/errors.hpp"

namespace acc::core::pipeline_checkpoint {

namespace {

// The names of the optimizer's parameters (its whole groups, flattened), from the model's.
std::vector<std::string> local_names(const PreparedOptimizer& opt) {
  std::map<const void*, std::string> names;
  for (const auto& [name, p] : opt.model->model->named_parameters()) names.emplace(p.unsafeGetTensorImpl(), name);
  std::vector<std::string> out;
  for (const auto& g : opt.opt->whole_groups())
    for (const at::Tensor& p : g) out.push_back(names.at(p.unsafeGetTensorImpl()));
  return out;
}

// A parameter index as the optimizer JSON's state keys write it.
size_t parameter_index(const std::string& text, const std::string& source) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument(source + ": state key '" + text + "' is not a parameter index");
  return std::stoul(text);
}

// The optimizer JSON with each parameter group's num_params from `counts` and the state entries `entries` (index ->
// step, -1: none), the rest of each group as `groups` has it.
std::string optimizer_json(const json::Value& root, const std::vector<size_t>& counts,
                           const std::map<size_t, int64_t>& entries) {
  json::Writer j;
  j.begin_object().key("type").value(root.get_string("type")).key("param_groups").begin_array();
  const json::Value groups = root.get("param_groups");
  for (size_t g = 0; g < groups.size(); ++g) {
    j.begin_object();
    for (const auto& [k, v] : groups.at(g).items()) {
      j.key(k);
      if (k == "num_params") j.value(static_cast<int64_t>(counts[g]));
      else j.value(v);
    }
    j.end_object();
  }
  j.end_array().key("state").begin_object();
  for (const auto& [i, step] : entries) {
    j.key(std::to_string(i)).begin_object();
    if (step >= 0) j.key("step").value(step);
    j.end_object();
  }
  j.end_object().end_object();
  return j.str();
}

}  // namespace

NamedTensors whole_model(const PreparedModel& model, const NamedTensors& mine) {
  return model.pipeline->whole_state(mine);
}

Optimizer::State whole_optimizer(const PreparedOptimizer& opt, const Optimizer::State& mine) {
  if (opt.pipeline_names.empty())
    throw StateError("save_state: the optimizer of a pipeline-parallel model must be built before prepare (its state "
                     "is saved by the whole model's parameters, whose order it then knows)");
  const std::vector<std::string> names = local_names(opt);
  const json::Document doc = json::Document::object(mine.json, "optimizer state");
  // Every entry under its parameter's name, so that the pp group's ranks' entries can be gathered and put in order:
  // "entry:{name}" its step (-1: none), "opt:{name}:{kind}" its tensors.
  NamedTensors named;
  const json::Value state = doc.root().get("state");
  for (const std::string& key : state.keys()) {
    const json::Value e = state.get(key);
    named.emplace_back("entry:" + names.at(parameter_index(key, "optimizer state")),
                       at::scalar_tensor(e.get_int_or("step", -1), at::kLong));
  }
  for (const auto& [key, t] : mine.tensors) {
    const auto [i, kind] = optimizer_state_key(key, "optimizer state");
    named.emplace_back("opt:" + names.at(i) + ":" + kind, t);
  }
  std::map<std::string, at::Tensor> all;
  for (auto& [name, t] : opt.model->pipeline->whole_state(named)) all.emplace(name, t.cpu());
  Optimizer::State out;
  std::vector<size_t> counts;
  std::map<size_t, int64_t> entries;
  size_t k = 0;
  for (const auto& group : opt.pipeline_names) {
    counts.push_back(group.size());
    for (const std::string& name : group) {
      if (auto it = all.find("entry:" + name); it != all.end()) entries[k] = it->second.item<int64_t>();
      const std::string prefix = "opt:" + name + ":";
      for (auto it = all.lower_bound(prefix); it != all.end() && it->first.rfind(prefix, 0) == 0; ++it)
        out.tensors.emplace_back("state." + std::to_string(k) + "." + it->first.substr(prefix.size()), it->second);
      ++k;
    }
  }
  out.json = optimizer_json(doc.root(), counts, entries);
  return out;
}

NamedTensors stage_model(const PreparedModel& model, const NamedTensors& whole, const std::string& source) {
  std::set<std::string> mine, modules;  // this rank's tensors; every stage's modules
  for (const auto& [name, t] : model.model->state()) mine.insert(name);
  const pp::Pipeline& p = *model.pipeline;
  for (size_t s = 0; s < p.layout().size(); ++s)
    for (const std::string& m : p.stage_modules(static_cast<int>(s))) modules.insert(m + ".");
  NamedTensors out;
  for (const auto& [name, t] : whole) {
    if (mine.count(name)) out.emplace_back(name, t);
    else if (std::none_of(modules.begin(), modules.end(), [&](const std::string& m) { return name.rfind(m, 0) == 0; }))
      throw std::invalid_argument(source + ": '" + name + "' is not a tensor of the model (no stage holds it)");
  }
  return out;
}

Optimizer::State stage_optimizer(const PreparedOptimizer& opt, const Optimizer::State& whole,
                                 const std::string& source) {
  if (opt.pipeline_names.empty())
    throw StateError("load_state: the optimizer of a pipeline-parallel model must be built before prepare");
  const json::Document doc = json::Document::object(whole.json, source);
  const json::Value groups = doc.root().get("param_groups");
  if (groups.size() != opt.pipeline_names.size())
    throw std::invalid_argument(source + ": 'param_groups' has " + std::to_string(groups.size()) +
                                " groups; this optimizer has " + std::to_string(opt.pipeline_names.size()));
  // The checkpoint's index of each of this rank's parameters (by name; a tied weight's first).
  std::map<std::string, size_t> index;
  size_t k = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& names = opt.pipeline_names[g];
    if (groups.at(g).get_int("num_params") != static_cast<int64_t>(names.size()))
      throw std::invalid_argument(source + ": param_groups[" + std::to_string(g) + "] has " +
                                  std::to_string(groups.at(g).get_int("num_params")) +
                                  " parameters; this optimizer's has " + std::to_string(names.size()));
    for (const std::string& name : names) index.emplace(name, k++);
  }
  const std::vector<std::string> names = local_names(opt);
  std::map<size_t, size_t> local_of;  // the checkpoint's index -> this optimizer's
  for (size_t i = 0; i < names.size(); ++i) local_of.emplace(index.at(names[i]), i);
  std::vector<size_t> counts;
  for (const auto& g : opt.opt->whole_groups()) counts.push_back(g.size());
  std::map<size_t, int64_t> entries;
  const json::Value state = doc.root().get("state");
  for (const std::string& key : state.keys())
    if (auto it = local_of.find(parameter_index(key, source)); it != local_of.end())
      entries[it->second] = state.get(key).get_int_or("step", -1);
  Optimizer::State out;
  for (const auto& [key, t] : whole.tensors) {
    const auto [i, kind] = optimizer_state_key(key, source);
    if (auto it = local_of.find(i); it != local_of.end())
      out.tensors.emplace_back("state." + std::to_string(it->second) + "." + kind, t);
  }
  out.json = optimizer_json(doc.root(), counts, entries);
  return out;
}

}  // namespace acc::core::pipeline_checkpoint
