#include "train/optim.hpp"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>

#include "util/options.hpp"

namespace acc {

Optimizer::Optimizer(std::vector<at::Tensor> params, const char* options_json) : params_(std::move(params)) {
  Options o(options_json, "optimizer options",
            {"type", "lr", "momentum", "dampening", "nesterov", "betas", "eps", "weight_decay", "amsgrad"});
  std::string type = o.get_string("type", "", {"sgd", "adam", "adamw"});
  if (type.empty()) throw OptionsError("optimizer options: 'type' is required: \"sgd\", \"adam\" or \"adamw\"");
  base_lr_ = o.get_double("lr", type == "sgd" ? 0.01 : 1e-3);
  if (!(base_lr_ >= 0)) throw OptionsError("optimizer options: 'lr' must be >= 0");
  auto betas = o.get_double_list("betas", {0.9, 0.999});
  if (betas.size() != 2 || betas[0] < 0 || betas[0] >= 1 || betas[1] < 0 || betas[1] >= 1)
    throw OptionsError("optimizer options: 'betas' must be two numbers in [0, 1)");
  double eps = o.get_double("eps", 1e-8);
  double wd = o.get_double("weight_decay", type == "adamw" ? 0.01 : 0.0);
  if (wd < 0) throw OptionsError("optimizer options: 'weight_decay' must be >= 0");
  if (type == "sgd") {
    torch::optim::SGDOptions so(base_lr_);
    so.momentum(o.get_double("momentum", 0.0)).dampening(o.get_double("dampening", 0.0))
        .weight_decay(wd).nesterov(o.get_bool("nesterov", false));
    impl_ = std::make_unique<torch::optim::SGD>(params_, so);
  } else if (type == "adam") {
    torch::optim::AdamOptions ao(base_lr_);
    ao.betas({betas[0], betas[1]}).eps(eps).weight_decay(wd).amsgrad(o.get_bool("amsgrad", false));
    impl_ = std::make_unique<torch::optim::Adam>(params_, ao);
  } else {
    torch::optim::AdamWOptions ao(base_lr_);
    ao.betas({betas[0], betas[1]}).eps(eps).weight_decay(wd).amsgrad(o.get_bool("amsgrad", false));
    impl_ = std::make_unique<torch::optim::AdamW>(params_, ao);
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::step() { impl_->step(); }

void Optimizer::zero_grad() { impl_->zero_grad(/*set_to_none=*/true); }

double Optimizer::lr() const { return impl_->param_groups().front().options().get_lr(); }

void Optimizer::set_lr(double lr) {
  for (auto& g : impl_->param_groups()) g.options().set_lr(lr);
}

Schedule::Schedule(const char* options_json) {
  Options o(options_json, "scheduler options", {"type", "warmup_steps", "total_steps", "min_lr_ratio"});
  type_ = o.get_string("type", "constant", {"constant", "linear", "cosine"});
  warmup_ = o.get_int("warmup_steps", 0, 0);
  bool needs_total = type_ != "constant";
  total_ = o.get_int("total_steps", needs_total ? std::nullopt : std::optional<int64_t>(0), 0);
  if (needs_total && total_ <= warmup_)
    throw OptionsError("scheduler options: 'total_steps' (" + std::to_string(total_) +
                       ") must exceed 'warmup_steps' (" + std::to_string(warmup_) + ")");
  min_ratio_ = o.get_double("min_lr_ratio", 0.0);
  if (min_ratio_ < 0 || min_ratio_ > 1) throw OptionsError("scheduler options: 'min_lr_ratio' must be in [0, 1]");
}

double Schedule::factor(int64_t step) const {
  // The shapes of transformers' get_{constant,linear,cosine}_schedule_with_warmup.
  if (step < warmup_) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_));
  if (type_ == "constant") return 1.0;
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  progress = std::min(progress, 1.0);
  if (type_ == "linear") return std::max(0.0, 1.0 - progress);
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_ratio_ + (1.0 - min_ratio_) * cosine;
}

}  // namespace acc
