// What every strategy shares, and the single-process strategy.
#include "parallel/strategy.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <stdexcept>

#include "models/model.hpp"
#include "models/tensor_parallel.hpp"

namespace acc::core {

std::vector<at::Tensor> Strategy::optimizer_parameters() const { return model_->trainable_tensors(); }

bool Strategy::state_in_model() const { return tp::sharding_of(*model_) == nullptr; }

at::Tensor Strategy::grad_norm(double norm_type) const {
  // A model split by tensor parallelism: every rank's slices count (collective over its group).
  if (const tp::Sharding* split = tp::sharding_of(*model_)) return tp::grad_norm(*model_, *split, norm_type);
  // torch.nn.utils.clip_grad_norm_'s total: the norm of the per-tensor norms.
  std::vector<at::Tensor> norms;
  for (auto& [name, p] : model_->named_parameters())
    if (p.grad().defined()) norms.push_back(at::linalg_vector_norm(p.grad().detach().to(at::kFloat), norm_type));
  if (norms.empty()) return at::zeros({}, at::kFloat);
  return at::linalg_vector_norm(at::stack(norms), norm_type);
}

NamedTensors Strategy::full_state_dict(const std::set<std::string>* only) const {
  // Tensor parallelism: split parameters are gathered whole (collective: every rank asks for the same names).
  const tp::Sharding* split = tp::sharding_of(*model_);
  NamedTensors out;
  for (auto& [name, t] : model_->state())
    if (!only || only->count(name)) out.emplace_back(name, split ? tp::full_tensor(*split, name, t) : std::move(t));
  return out;
}

void Strategy::load_full_state_dict(const NamedTensors& tensors, const std::string& source) {
  const tp::Sharding* split = tp::sharding_of(*model_);
  model_->load_state_dict(split ? tp::slice_state(*split, tensors) : tensors, source);
}

namespace {

// The optimizer state's tensors "state.{i}.{name}" with each parameter's split name (or "" when it is not split).
std::vector<std::string> split_names(const Model& model, const tp::Sharding& split, const Strategy::ParamGroups& whole,
                                     const NamedTensors& tensors, const std::string& source) {
  std::map<const void*, std::string> names;  // a tied weight's first name
  for (const auto& [name, p] : model.named_parameters()) names.emplace(p.unsafeGetTensorImpl(), name);
  std::vector<const at::Tensor*> params;
  for (const auto& g : whole)
    for (const at::Tensor& p : g) params.push_back(&p);
  std::vector<std::string> out;
  for (const auto& [key, t] : tensors) {
    const size_t dot = key.find('.', 6);
    if (key.rfind("state.", 0) != 0 || dot == std::string::npos || dot == 6 ||
        key.find_first_not_of("0123456789", 6) != dot)
      throw std::invalid_argument(source + ": '" + key + "' is not an optimizer state tensor name");
    const size_t i = std::stoul(key.substr(6, dot - 6));
    if (i >= params.size())
      throw std::invalid_argument(source + ": '" + key + "': the optimizer has " + std::to_string(params.size()) +
                                  " parameters");
    auto it = names.find(params[i]->unsafeGetTensorImpl());
    out.push_back(it != names.end() && split.shards.count(it->second) ? it->second : std::string());
  }
  return out;
}

}  // namespace

void Strategy::state_to_whole_parameters(const ParamGroups& whole, NamedTensors& tensors) const {
  const tp::Sharding* split = tp::sharding_of(*model_);
  if (!split) return;
  const std::vector<std::string> names = split_names(*model_, *split, whole, tensors, "optimizer state");
  for (size_t k = 0; k < tensors.size(); ++k)
    if (!names[k].empty()) tensors[k].second = tp::full_tensor(*split, names[k], tensors[k].second);
}

void Strategy::state_to_slices(const ParamGroups& whole, NamedTensors& tensors, const std::string& source) const {
  const tp::Sharding* split = tp::sharding_of(*model_);
  if (!split) return;
  const std::vector<std::string> names = split_names(*model_, *split, whole, tensors, source);
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (names[k].empty()) continue;
    try {
      tensors[k].second = tp::slice_tensor(*split, names[k], tensors[k].second);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(source + ": '" + tensors[k].first + "': " + e.what());
    }
  }
}

namespace {

class SingleStrategy final : public Strategy {
 public:
  SingleStrategy(std::shared_ptr<Model> model, c10::Device device) : Strategy(std::move(model)) {
    model_->to(device);
  }
  std::string name() const override { return "single"; }
};

}  // namespace

std::unique_ptr<Strategy> make_single_strategy(std::shared_ptr<Model> model, c10::Device device) {
  return std::make_unique<SingleStrategy>(std::move(model), device);
}

}  // namespace acc::core
