// What every strategy shares, and the single-process strategy.
#include "parallel/strategy.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "models/model.hpp"

namespace acc::core {

std::vector<at::Tensor> Strategy::optimizer_parameters() const { return model_->trainable_tensors(); }

at::Tensor Strategy::grad_norm(double norm_type) const {
  // torch.nn.utils.clip_grad_norm_'s total: the norm of the per-tensor norms.
  std::vector<at::Tensor> norms;
  for (auto& [name, p] : model_->named_parameters())
    if (p.grad().defined()) norms.push_back(at::linalg_vector_norm(p.grad().detach().to(at::kFloat), norm_type));
  if (norms.empty()) return at::zeros({}, at::kFloat);
  return at::linalg_vector_norm(at::stack(norms), norm_type);
}

NamedTensors Strategy::full_state_dict(const std::set<std::string>* only) const {
  NamedTensors out;
  for (auto& [name, t] : model_->state())
    if (!only || only->count(name)) out.emplace_back(name, std::move(t));
  return out;
}

void Strategy::load_full_state_dict(const NamedTensors& tensors, const std::string& source) {
  model_->load_state_dict(tensors, source);
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
