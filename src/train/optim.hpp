// Optimizers (LibTorch's SGD, Adam, AdamW) and learning-rate schedules, as LambdaLR factors.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}

namespace acc {

class Optimizer {
 public:
  // options: see acc_optimizer_create in acc.h.
  Optimizer(std::vector<at::Tensor> params, const char* options_json);
  ~Optimizer();
  void step();
  void zero_grad();
  double lr() const;
  void set_lr(double lr);
  double base_lr() const { return base_lr_; }
  const std::vector<at::Tensor>& params() const { return params_; }

 private:
  std::vector<at::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> impl_;
  double base_lr_;
};

// lr = base_lr * factor(step), where step counts scheduler steps taken (LambdaLR semantics).
class Schedule {
 public:
  explicit Schedule(const char* options_json);
  double factor(int64_t step) const;

 private:
  std::string type_;
  int64_t warmup_ = 0, total_ = 0;
  double min_ratio_ = 0;
};

}  // namespace acc
