// Optimizers and learning-rate schedules. An Optimizer wraps a torch::optim::Optimizer: one libacc makes
// from JSON options (SGD, Adam, AdamW; stepped by ATen's fused CPU/GPU kernels where the options allow)
// or a C++ caller's own.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/batch.hpp"

namespace torch::optim {
class Optimizer;
class LRScheduler;
}  // namespace torch::optim

namespace acc::core {

class Model;

class Optimizer {
 public:
  // options: see acc_optimizer_create in acc.h (defaults are PyTorch's). param_groups select parameters by name;
  // no_decay_names gives the parameters of the "transformers" preset's group without decay (make_optimizer: the
  // model's biases and norms).
  Optimizer(const NamedTensors& params, const char* options_json,
            const std::function<std::vector<std::string>()>& no_decay_names = {});
  // Tensors without names (a strategy's shards): param_groups name them by their index, "0", "1", ...
  Optimizer(const std::vector<at::Tensor>& params, const char* options_json);
  explicit Optimizer(std::shared_ptr<torch::optim::Optimizer> impl);
  ~Optimizer();
  void step();
  void zero_grad();
  double lr() const;  // the first parameter group's
  // Sets every group's lr to its initial lr times `factor` (LambdaLR).
  void scale_lr(double factor);
  std::vector<at::Tensor> params() const;
  // Steps a sharded strategy's pieces of `params` instead of them: each parameter group holds the pieces of its
  // parameters, in order (`pieces_of`). The optimizer must hold exactly `params` and not have stepped yet.
  void rebind(const std::vector<at::Tensor>& params,
              const std::function<std::vector<at::Tensor>(const at::Tensor&)>& pieces_of);
  // Drops from its parameter groups every parameter not in `params` (pipeline parallelism: the other stages'); the
  // groups stay, possibly empty, so that they keep their indices and options.
  void keep_only(const std::vector<at::Tensor>& params);
  // rebind's conditions alone (prepare checks them before it changes anything).
  void check_rebind(const std::vector<at::Tensor>& params) const;
  // Holds replacement(p) instead of each parameter p for which it is defined (zero3_init_flag: the meta parameters
  // of a model built before prepare, replaced when prepare made them; models/deferred.hpp).
  void replace_parameters(const std::function<at::Tensor(const at::Tensor&)>& replacement);
  // The parameter groups of whole parameters: what the optimizer held before rebind (what a checkpoint's state
  // is indexed by), else what it holds.
  std::vector<std::vector<at::Tensor>> whole_groups() const;
  torch::optim::Optimizer& impl() { return *impl_; }
  const std::shared_ptr<torch::optim::Optimizer>& shared_impl() const { return impl_; }
  bool fused() const { return fused_; }

  // The state for a checkpoint, as torch's state_dict without pickles: the per-parameter tensors named
  // "state.{i}.{exp_avg|exp_avg_sq|max_exp_avg_sq|momentum_buffer|square_avg|grad_avg|sum}" (i: the
  // parameter's index in param-group order) and the rest as JSON (the type, each group's lr and
  // initial_lr, each parameter's step). SGD, Adam, AdamW, RMSprop and Adagrad.
  struct State {
    NamedTensors tensors;
    std::string json;
  };
  State save_state() const;
  // Restores a saved state: the type, the groups and every tensor's shape must match this optimizer's
  // (nothing changes when one does not); errors name `source` and the key.
  void load_state(const State& state, const std::string& source);

 private:
  std::shared_ptr<torch::optim::Optimizer> impl_;
  std::vector<double> initial_lr_;  // per parameter group
  std::vector<std::vector<at::Tensor>> whole_;  // rebind's: the groups' whole parameters
  bool fused_ = false;
};

// An optimizer over a model's trainable parameters (acc_optimizer_create).
std::unique_ptr<Optimizer> make_optimizer(const Model& model, const char* options_json);

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
