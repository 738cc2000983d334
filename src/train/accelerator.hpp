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
  ForwardResult forward(const at::Tensor& input, const at::Tensor& targets);
};

struct OptimizerSlot {
  std::shared_ptr<ModelSlot> model;
  std::unique_ptr<Optimizer> opt;
  std::shared_ptr<Accelerator> owner;
};

struct SchedulerSlot {
  std::shared_ptr<OptimizerSlot> opt;
  Schedule schedule;
  int64_t steps = 0;  // LambdaLR's last_epoch
  std::shared_ptr<Accelerator> owner;
  void apply() const { opt->opt->set_lr(opt->opt->base_lr() * schedule.factor(steps)); }
  void step();
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

  at::Tensor gather(const at::Tensor& t);
  at::Tensor gather_for_metrics(const at::Tensor& t);
  at::Tensor reduce(const at::Tensor& t, ReduceOp op);
  void wait_for_everyone();
  void broadcast_from_main(const std::vector<at::Tensor>& tensors);  // in place, from rank 0

  // LoaderObserver: the stack of loaders being iterated (Accelerate's GradientState).
  void loader_begin(const void* loader) override;
  void loader_end(const void* loader) override;

 private:
  Accelerator() = default;
  const DataLoader* active_loader() const;

  config::Config config_;
  std::string config_json_;
  ProcessState state_;
  std::shared_ptr<Comm> comm_;
  c10::Device device_{c10::kCPU};
  std::string device_name_ = "cpu", distributed_type_ = "NO";
  std::vector<std::weak_ptr<ModelSlot>> models_;
  std::vector<std::weak_ptr<DataLoader>> loaders_;   // prepared loaders, to find the active one
  std::vector<const void*> active_;                  // loaders mid-epoch, innermost last
  std::mutex mu_;
};

}  // namespace acc
