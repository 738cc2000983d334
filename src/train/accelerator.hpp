// The Accelerator: one training process's context. It owns the process group, knows the device and
// the configuration, prepares models / optimizers / schedulers / loaders, and runs backward and the
// collectives. The C ABI is a thin layer over this class and the Slot types below.
#pragma once
#include <acc/config.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "models/model.hpp"
#include "parallel/ddp.hpp"
#include "precision/precision.hpp"
#include "runtime/comm.hpp"
#include "runtime/process_state.hpp"
#include "train/optim.hpp"

namespace acc {

class Accelerator;

// A model and, once prepared, how it trains in this job.
struct ModelSlot {
  std::shared_ptr<Model> model;
  std::shared_ptr<Accelerator> owner;       // set by prepare
  std::unique_ptr<GradientReducer> reducer; // DDP, when distributed
  bool in_accumulate = false;                // inside acc_accumulate_begin/end
  bool skip_sync = false;                    // DDP no_sync for this micro-step
  ForwardResult forward(const at::Tensor& input, const at::Tensor& targets);
};

struct OptimizerSlot {
  std::shared_ptr<ModelSlot> model;
  std::unique_ptr<Optimizer> opt;
  std::shared_ptr<Accelerator> owner;
  bool unscaled = false;      // fp16: grads already divided by the scale in this step
  bool found_inf = false;     // fp16: what that unscale found
  bool step_was_skipped = false;
  // AcceleratedOptimizer: a no-op on accumulation steps; under fp16 skipped on inf/nan gradients.
  void step();
  void zero_grad();
};

struct SchedulerSlot {
  std::shared_ptr<OptimizerSlot> opt;
  Schedule schedule;
  int64_t steps = 0;  // LambdaLR's last_epoch
  std::shared_ptr<Accelerator> owner;
  void apply() const { opt->opt->set_lr(opt->opt->base_lr() * schedule.factor(steps)); }
  void step();
};

// Accelerate's GradientState: whether this micro-step ends an accumulation cycle.
struct GradientState {
  int64_t num_steps = 1;
  bool sync_with_dataloader = true;
  bool sync_each_batch = false;
  bool sync_gradients = true;
  int64_t step = 0;
};

class Accelerator final : public std::enable_shared_from_this<Accelerator>, public LoaderObserver {
 public:
  // Resolves the config (defaults < ACCELERATE_* env < explicit JSON), reads the process state and,
  // with more than one process, joins the process group.
  static std::shared_ptr<Accelerator> create(const char* config_json);
  ~Accelerator() override;

  const ProcessState& state() const { return state_; }
  const config::Config& config() const { return config_; }
  const std::string& config_json() const { return config_json_; }
  c10::Device device() const { return device_; }
  const std::string& device_name() const { return device_name_; }
  const std::string& distributed_type() const { return distributed_type_; }
  bool distributed() const { return comm_ != nullptr; }

  // Each argument may be null. Throws std::logic_error on a call-order mistake.
  void prepare(const std::shared_ptr<ModelSlot>& model, const std::shared_ptr<OptimizerSlot>& opt,
               const std::shared_ptr<SchedulerSlot>& sched, const std::shared_ptr<DataLoader>& loader);
  void backward(const at::Tensor& loss);

  // Gradient accumulation (Accelerate's accumulate(model) context, split in two calls).
  void accumulate_begin(const std::shared_ptr<ModelSlot>& model);
  void accumulate_end(const std::shared_ptr<ModelSlot>& model);
  const GradientState& gradient_state() const { return grad_; }
  bool split_batches() const;

  // Mixed precision.
  const std::string& mixed_precision() const { return mixed_precision_; }
  GradScaler* scaler() { return scaler_ ? scaler_.get() : nullptr; }
  void unscale_gradients(OptimizerSlot& opt);
  double clip_grad_norm(ModelSlot& model, double max_norm, double norm_type);
  void clip_grad_value(ModelSlot& model, double clip_value);

  at::Tensor gather(const at::Tensor& t);
  at::Tensor gather_for_metrics(const at::Tensor& t);
  at::Tensor reduce(const at::Tensor& t, ReduceOp op);
  void wait_for_everyone();
  void broadcast_from_main(const std::vector<at::Tensor>& tensors);  // in place, from rank 0
  at::Tensor broadcast(const at::Tensor& t, int from_process);
  at::Tensor pad_across_processes(const at::Tensor& t, int64_t dim, double pad_index, bool pad_first);
  struct Split {
    int64_t start, count, padded_count;
  };
  Split split_between_processes(int64_t n, bool apply_padding) const;
  void main_process_first(bool local, bool entering);
  void set_trigger() { trigger_ = true; }
  bool check_trigger();

  // LoaderObserver: the stack of loaders being iterated (Accelerate's GradientState).
  void loader_begin(const void* loader) override;
  void loader_end(const void* loader) override;

 private:
  Accelerator() = default;
  void set_mixed_precision(const std::string& mode);
  const DataLoader* active_loader() const;

  config::Config config_;
  std::string config_json_;
  ProcessState state_;
  std::shared_ptr<Comm> comm_;
  c10::Device device_{c10::kCPU};
  std::string device_name_ = "cpu", distributed_type_ = "NO";
  std::vector<std::weak_ptr<ModelSlot>> models_;
  std::vector<std::weak_ptr<OptimizerSlot>> optimizers_;
  GradientState grad_;
  std::string mixed_precision_ = "no";
  std::unique_ptr<GradScaler> scaler_;
  std::vector<const void*> active_;                  // loaders mid-epoch, innermost last
  bool trigger_ = false;
  std::mutex mu_;
};

}  // namespace acc
