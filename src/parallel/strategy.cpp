// What every strategy shares, and the single-process strategy.
#include "parallel/strategy.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <stdexcept>

#include "models/model.hpp"

namespace acc::core {

std::vector<at::Tensor> Strategy::optimizer_parameters() const { return model_->trainable_tensors(); }

bool Strategy::state_in_model() const { return !model_->placements().any_split(); }

at::Tensor Strategy::grad_norm(double norm_type, const std::set<std::string>& left_out) const {
  // torch.nn.utils.clip_grad_norm_'s total (a split parameter's slices all count: collective over its group).
  return acc::core::grad_norm(*model_, norm_type, left_out);
}

NamedTensors Strategy::full_state_dict(const std::set<std::string>* only) const {
  // Split parameters are gathered whole (collective: every rank asks for the same names).
  NamedTensors out;
  for (auto& [name, t] : model_->state())
    if (!only || only->count(name)) out.emplace_back(name, whole_tensor(model_->placements(), name, t));
  return out;
}

void Strategy::load_full_state_dict(const NamedTensors& tensors, const std::string& source) {
  model_->load_state_dict(local_state(model_->placements(), tensors), source);
}

std::pair<size_t, std::string> optimizer_state_key(const std::string& key, const std::string& source) {
  const size_t dot = key.find('.', 6);
  if (key.rfind("state.", 0) != 0 || dot == std::string::npos || dot == 6 || dot > 15 ||
      key.find_first_not_of("0123456789", 6) != dot)
    throw std::invalid_argument(source + ": '" + key + "' is not an optimizer state tensor name");
  return {std::stoul(key.substr(6, dot - 6)), key.substr(dot + 1)};
}

void broadcast_from_rank0(Comm& comm, const Model& model) {
  std::vector<at::Tensor> state;
  for (auto& [name, t] : model.state()) state.push_back(t);
  broadcast_from_rank0(comm, state);
}

namespace {

// The optimizer state's tensors "state.{i}.{name}" with each parameter's split name (or "" when it is not split).
std::vector<std::string> split_names(const Model& model, const Strategy::ParamGroups& whole,
                                     const NamedTensors& tensors, const std::string& source) {
  std::map<const void*, std::string> names;  // a tied weight's first name
  for (const auto& [name, p] : model.named_parameters()) names.emplace(p.unsafeGetTensorImpl(), name);
  std::vector<const at::Tensor*> params;
  for (const auto& g : whole)
    for (const at::Tensor& p : g) params.push_back(&p);
  std::vector<std::string> out;
  for (const auto& [key, t] : tensors) {
    const size_t i = optimizer_state_key(key, source).first;
    if (i >= params.size())
      throw std::invalid_argument(source + ": '" + key + "': the optimizer has " + std::to_string(params.size()) +
                                  " parameters");
    auto it = names.find(params[i]->unsafeGetTensorImpl());
    out.push_back(it != names.end() && model.placements().split_of(it->second) ? it->second : std::string());
  }
  return out;
}

}  // namespace

void Strategy::state_to_whole_parameters(const ParamGroups& whole, NamedTensors& tensors) const {
  if (!model_->placements().any_split()) return;
  const std::vector<std::string> names = split_names(*model_, whole, tensors, "optimizer state");
  for (size_t k = 0; k < tensors.size(); ++k)
    if (!names[k].empty()) tensors[k].second = whole_tensor(model_->placements(), names[k], tensors[k].second);
}

void Strategy::state_to_slices(const ParamGroups& whole, NamedTensors& tensors, const std::string& source) const {
  if (!model_->placements().any_split()) return;
  const std::vector<std::string> names = split_names(*model_, whole, tensors, source);
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (names[k].empty()) continue;
    try {
      tensors[k].second = local_tensor(model_->placements(), names[k], tensors[k].second);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(source + ": '" + tensors[k].first + "': " + e.what());
    }
  }
}

namespace {

class SingleStrategy final : public Strategy {
 public:
  SingleStrategy(std::shared_ptr<Model> model, c10::Device device) : Strategy(std::move(model)) { model_->to(device); }
  std::string name() const override { return "single"; }
};

}  // namespace

std::unique_ptr<Strategy> make_single_strategy(std::shared_ptr<Model> model, c10::Device device) {
  return std::make_unique<SingleStrategy>(std::move(model), device);
}

}  // namespace acc::core
