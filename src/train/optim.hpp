// Optimizers and learning-rate schedules. An Optimizer wraps a torch::optim::Optimizer: one libacc makes
// from JSON options (SGD, Adam, AdamW; stepped by ATen's fused CPU/GPU kernels where the options allow)
// or a C++ caller's own.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
class LRScheduler;
}  // namespace torch::optim

namespace acc::core {

class Optimizer {
 public:
  // options: see acc_optimizer_create in acc.h (defaults are PyTorch's).
  Optimizer(std::vector<at::Tensor> params, const char* options_json);
  explicit Optimizer(std::shared_ptr<torch::optim::Optimizer> impl);
  ~Optimizer();
  void step();
  void zero_grad();
  double lr() const;  // the first parameter group's
  // Sets every group's lr to its initial lr times `factor` (LambdaLR).
  void scale_lr(double factor);
  std::vector<at::Tensor> params() const;
  torch::optim::Optimizer& impl() { return *impl_; }
  bool fused() const { return fused_; }

 private:
  std::shared_ptr<torch::optim::Optimizer> impl_;
  std::vector<double> initial_lr_;  // per parameter group
  bool fused_ = false;
};

// lr = initial_lr * factor(step), where step counts scheduler steps taken (LambdaLR semantics).
class Schedule {
 public:
  explicit Schedule(const char* options_json);
  double factor(int64_t step) const;

 private:
  std::string type_;
  int64_t warmup_ = 0, total_ = 0;
  double min_ratio_ = 0;
};

}  // namespace acc::core
