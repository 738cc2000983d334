// What every strategy shares, and the single-process strategy.
#include "parallel/strategy.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

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
