// The Accelerator: one training process's context. It owns the process group, knows the device and
// the configuration, prepares models / optimizers / schedulers / loaders, and runs backward and the
// collectives. The C ABI is a thin layer over this class and the Prepared* types below.
#pragma once
#include <acc/config.hpp>
#include <acc/config_views.hpp>

#include <map>
#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "models/model.hpp"
#include "parallel/parallelize.hpp"
#include "parallel/strategy.hpp"
#include "precision/fp8.hpp"
#include "precision/precision.hpp"
#include "runtime/comm.hpp"
#include "runtime/mesh.hpp"
#include "runtime/process_state.hpp"
#include "tracking/tracking.hpp"
#include "train/optim.hpp"
#include "train/profiler.hpp"
#include "train/verify.hpp"

namespace acc::core {

class Accelerator;

// A model and, once prepared, how it trains in this job.
struct PreparedModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<Accelerator> owner;  // set by prepare
  std::unique_ptr<Strategy> strategy;  // set by prepare: owns the parameters across processes
  bool in_accumulate = false;          // inside accumulate_begin/end
  c10::Device device{c10::kCPU};       // set by prepare: where the model lives (placement_device)
  bool skip_sync = false;              // no_sync for this micro-step
  // Tensor parallelism: the parameters prepare replaced by this rank's slices (an optimizer built before prepare is
  // moved onto them).
  ReplacedParameters split_replaced;
  // Pipeline parallelism: the cut model's schedule (set by prepare), and the loss of the training step forward last
  // ran (its forward and backward both: Accelerator::backward then only synchronises).
  std::shared_ptr<pp::Pipeline> pipeline;
  at::Tensor pipeline_loss;
  // prepare_pippy's (pipelined inference; src/train/pippy.cpp): the forward returns the logits alone.
  struct Pippy {
    int64_t num_chunks = 1;
    bool gather_output = false;
  };
  std::optional<Pippy> pippy;
  // The batch's tensors follow the model to its device; runs inside a ForwardScope; outputs in fp32. Pipelined: a
  // training step (Pipeline::step) in training mode, an eval_step otherwise; the output is {"loss": the mean loss}.
  TensorDict forward(const TensorDict& batch);
  TensorDict pipeline_forward(const TensorDict& batch);
  // prepare_pippy's: {"logits": ...} on the last process (every process with gather_output); {} on the others.
  TensorDict pippy_forward(const TensorDict& batch);
  // The model, to read or write its tensors directly: refused (StateError) while a ZeRO-3 strategy keeps only
  // shards of them (save_model and load_state go through the strategy instead).
  Model& tensors(const char* what) const;
  // Model::set_requires_grad, refused (StateError) once prepared: the strategies read requires_grad when they wrap.
  int64_t set_requires_grad(const std::string& pattern, bool on);
};

// Accelerate's prepare_pippy arguments (example_args aside: libacc's stages need no tracing).
struct PippyOptions {
  std::vector<std::string> split_points;  // the modules stages 1, 2, ... begin with; empty: "auto"
  std::vector<std::string> no_split_module_classes;  // "auto"'s (not given: the model's _no_split_modules)
  bool no_split_given = false;
  int num_chunks = 0;  // micro-batches (0: the number of processes)
  bool gather_output = false;
  // {"split_points": "auto" | [...], "no_split_module_classes": [...], "num_chunks": n, "gather_output": b};
  // std::invalid_argument naming an unknown or ill-typed option.
  static PippyOptions from_json(const std::string& text);
};

// Where prepare puts a model: the accelerator's device, or with device_placement false (Accelerate's
// Accelerator(device_placement=False)) where the model's tensors already are (the accelerator's device if it has none).
c10::Device placement_device(bool device_placement, c10::Device accelerator_device, const Model& model);

// What a prepared model's forward runs inside (Accelerate's wrapped forward): the strategy's
// pre-forward work (DDP's buffer broadcast), then autocast (and the fp8 GEMMs) per mixed_precision.
class ForwardScope {
 public:
  explicit ForwardScope(PreparedModel& model);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  at::RecordFunction range_{at::RecordScope::USER_SCOPE};  // acc::forward, first in and last out
  Strategy* strategy_ = nullptr;  // told when the forward is over (ZeRO-3 frees what evaluation gathered)
  std::optional<AutocastScope> autocast_;
  std::optional<Fp8Scope> fp8_;
};

// Accelerate's convert_to_fp32: reduced-precision floating outputs of an autocast forward as float32.
at::Tensor output_to_fp32(const at::Tensor& t);

struct PreparedOptimizer {
  std::shared_ptr<PreparedModel> model;  // null for a C++ caller's optimizer
  std::unique_ptr<Optimizer> opt;
  std::shared_ptr<Accelerator> owner;
  bool unscaled = false;  // fp16: grads already divided by the scale in this step
  bool found_inf = false;  // fp16: what that unscale found
  bool step_was_skipped = false;
  // Pipeline parallelism: the names of the parameters each group held before prepare cut the model (the order of
  // its checkpoints' state; empty: built after prepare).
  std::vector<std::vector<std::string>> pipeline_names;
  // AcceleratedOptimizer: a no-op on accumulation steps; under fp16 skipped on inf/nan gradients.
  // The model's strategy then sees the stepped parameters (a sharded one gathers them).
  void step();
  void zero_grad();
};

// A learning-rate schedule: libacc's (LambdaLR factors) or a C++ caller's torch::optim::LRScheduler.
struct PreparedScheduler {
  std::shared_ptr<PreparedOptimizer> opt;
  std::optional<Schedule> schedule;
  std::shared_ptr<torch::optim::LRScheduler> user;
  int64_t steps = 0;  // LambdaLR's last_epoch
  std::shared_ptr<Accelerator> owner;
  void apply() const {
    if (schedule) opt->opt->scale_lr(schedule->factor(steps));
  }
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

// Accelerate's set_seed without an accelerator: the CPU generator and, where the CUDA plugin is loaded,
// every CUDA one; it never asks ATen about CUDA first (that would pin its hooks to the CPU stub).
void set_seed(uint64_t seed, bool deterministic);

// find_executable_batch_size: runs `step` at starting_batch_size, then at 90% of the last size after
// each out-of-memory (`step` returns false), until one runs; returns it. std::bad_alloc at zero.
int64_t find_executable_batch_size(int64_t starting_batch_size, const std::function<bool(int64_t)>& step);

class Accelerator final : public std::enable_shared_from_this<Accelerator>, public LoaderObserver {
 public:
  // Resolves the config (defaults < ACCELERATE_* env < explicit JSON), reads the process state and,
  // with more than one process, joins the process group.
  static std::shared_ptr<Accelerator> create(const char* config_json);
  ~Accelerator() override;

  const ProcessState& state() const { return state_; }
  const config::Config& config() const { return config_; }
  const config::AcceleratorSettings& settings() const { return settings_; }  // config(), typed
  const std::string& config_json() const { return config_json_; }
  c10::Device device() const { return device_; }
  const std::string& device_name() const { return device_name_; }
  const std::string& distributed_type() const { return distributed_type_; }
  bool distributed() const { return comm_ != nullptr; }
  // The process mesh (dp_replicate, dp_shard, cp, tp; runtime/mesh.hpp) and its groups: mesh()->group("tp"),
  // mesh()->size("dp"), mesh()->rank("cp"). Null with one process (every size is then 1).
  const std::shared_ptr<ProcessMesh>& mesh() const { return mesh_; }

  // Each argument may be null. Throws std::logic_error on a call-order mistake.
  void prepare(const std::shared_ptr<PreparedModel>& model, const std::shared_ptr<PreparedOptimizer>& opt,
               const std::shared_ptr<PreparedScheduler>& sched, const std::shared_ptr<DataLoader>& loader);
  void backward(const at::Tensor& loss);
  // Accelerate's prepare_pippy: the model cut into one stage per process (rank 0's weights), its forward pipelined
  // inference (PreparedModel::pippy_forward); every process passes the same batch. One process: the model as it is.
  void prepare_pippy(const std::shared_ptr<PreparedModel>& model, const PippyOptions& options);

  // Gradient accumulation (Accelerate's accumulate(model) context, split in two calls).
  void accumulate_begin(const std::shared_ptr<PreparedModel>& model);
  void accumulate_end(const std::shared_ptr<PreparedModel>& model);
  const GradientState& gradient_state() const { return grad_; }
  bool split_batches() const;

  // Mixed precision.
  const std::string& mixed_precision() const { return mixed_precision_; }
  double gradient_clipping() const { return sharding_.gradient_clipping; }
  GradScaler* scaler() { return scaler_ ? scaler_.get() : nullptr; }
  void unscale_gradients(PreparedOptimizer& opt);
  void unscale_all_gradients();
  double clip_grad_norm(PreparedModel& model, double max_norm, double norm_type);
  void clip_grad_value(PreparedModel& model, double clip_value);

  at::Tensor gather(const at::Tensor& t);
  at::Tensor gather_for_metrics(const at::Tensor& t);
  at::Tensor reduce(const at::Tensor& t, ReduceOp op);
  void wait_for_everyone();
  // Accelerate's gather_object / broadcast_object_list over byte strings (the caller serializes);
  // with for_metrics only the real samples of a padded last batch are kept, as gather_for_metrics.
  std::vector<std::string> gather_object(const std::vector<std::string>& items, bool for_metrics);
  std::vector<std::string> broadcast_object(const std::vector<std::string>& items, int from_process);
  void broadcast_from_main(const std::vector<at::Tensor>& tensors);  // in place, from rank 0
  at::Tensor broadcast(const at::Tensor& t, int from_process);
  at::Tensor pad_across_processes(const at::Tensor& t, int64_t dim, double pad_index, bool pad_first);
  struct Split {
    int64_t start, count, padded_count;
  };
  Split split_between_processes(int64_t n, bool apply_padding) const;
  // This process's rows of `t` (dim 0); with apply_padding padded with copies of the last row.
  at::Tensor split_tensor_between_processes(const at::Tensor& t, bool apply_padding) const;
  // Accelerate's set_seed: every generator of this process (seed + rank when device_specific).
  void set_seed(uint64_t seed, bool device_specific, bool deterministic) const;
  void main_process_first(bool local, bool entering);
  void set_trigger() { trigger_ = true; }
  void print(const std::string& text) const;  // a line on stdout, on the local main process only
  bool check_trigger();

  // LoaderObserver: the stack of loaders being iterated (Accelerate's GradientState).
  void loader_begin(const void* loader) override;
  void loader_end(const void* loader) override;

  // What a checkpoint holds (checkpoint/state.hpp: save_state and load_state over an accelerator): the prepared
  // objects still alive, in preparation order, and the registered ones. Accelerate's register_for_checkpointing:
  // bytes saved and restored in order.
  struct Checkpointable {
    std::function<std::string()> save;
    std::function<void(const std::string&)> load;
  };
  void register_for_checkpointing(Checkpointable object);
  struct Prepared {
    std::vector<std::shared_ptr<PreparedModel>> models;
    std::vector<std::shared_ptr<PreparedOptimizer>> optimizers;
    std::vector<std::shared_ptr<PreparedScheduler>> schedulers;
    std::vector<std::shared_ptr<DataLoader>> loaders;
    std::vector<Checkpointable> objects;
  };
  Prepared live_objects();
  // project_config.iteration: the next automatic checkpoint's number.
  int64_t save_iteration() const { return save_iteration_; }
  void set_save_iteration(int64_t n) { save_iteration_ = n; }
  // A checkpoint's accumulation step, restored.
  void restore_step(int64_t step) { grad_.step = step; }

  // Experiment trackers (src/tracking). log_with is resolved at creation (an unknown tracker, or one that needs
  // a logging directory without one, fails there); init_trackers starts them on the main process only and
  // records `config` as hyperparameters; log writes to every tracker; end_training finishes them. On the
  // other processes all three only check their arguments. Local calls, not collectives.
  void init_trackers(const std::string& project_name, std::string_view config_json, std::string_view init_kwargs_json);
  void log(const tracking::Values& values, std::optional<int64_t> step);
  void end_training();
  const std::vector<std::string>& log_with() const { return log_with_; }
  const tracking::TrackerSet* trackers() const { return trackers_.get(); }

  // Accelerate's profile() (train/profiler.hpp), split in three calls made on one thread: profile_begin starts the
  // profiler with the config's profile_kwargs (checked at creation) or, given JSON, with those ProfileKwargs instead;
  // profile_step is torch.profiler's step(); profile_end stops it and, with output_trace_dir, writes
  // profile_<rank>.json there and waits for every process. Returns the file written, or "".
  void profile_begin(const char* profile_kwargs_json);
  void profile_step();
  std::string profile_end();
  void profile_cancel();  // stops a running profile without a file or a barrier (a scope left by an exception)

 private:
  Accelerator() = default;
  // The steps of create (train/accelerator_create.cpp): the settings, trackers, accumulation and process state; the
  // process group and mesh; the states loading code reads; the run record.
  void configure(const char* config_json, const std::map<std::string, std::string>& env);
  void join_mesh(int cuda_device, const config::ParallelDims& dims);
  void hold_loading_states();
  void write_run_record(const std::map<std::string, std::string>& env) const;
  void set_mixed_precision(const std::string& mode);
  // backward of a loss a pipelined forward returned: the gradient synchronisation alone.
  void pipeline_backward(PreparedModel& m);
  at::Tensor pipeline_grad_norm(const PreparedModel& model, double norm_type) const;
  // What parallelize applies to `model`, from the settings: tensor and context parallelism where the mesh has them,
  // then a single process, DDP, or sharding (FSDP / DeepSpeed ZeRO).
  ParallelPlan parallel_plan(const Model& model) const;
  // Pipeline parallelism: refusals before prepare changes anything, and an optimizer built before prepare moved onto
  // this rank's stages' parameters (`before`: the model's trainable tensors before the cut).
  void check_pipeline(const PreparedModel& model, const PreparedOptimizer* opt) const;
  void keep_pipeline_stages(PreparedOptimizer& opt, const std::vector<at::Tensor>& kept,
                            const std::map<const void*, std::string>& names_before);
  // Rebuilds the optimizer of a sharded model over its shards.
  void shard_optimizer(PreparedOptimizer& opt, const std::shared_ptr<PreparedModel>& model);
  // zero3_init_flag: an optimizer built before prepare holds the meta parameters that prepare replaced when it made
  // them (models/deferred.hpp); it is given their replacements (those of `model` and every prepared model).
  void adopt_made_parameters(PreparedOptimizer& opt, const std::shared_ptr<PreparedModel>& model);
  const DataLoader* active_loader() const;
  // Debug mode: every process compares what it sends before the collective (train/verify.hpp); else nothing.
  void verify(CollectiveOp op, int64_t arg, const at::Tensor* t);
  // The collectives without that check, for the composite ones (objects, pad, metrics) that verified already.
  // over_dp: over the mesh's data-parallel ranks only (gather_for_metrics), not every process.
  at::Tensor gather_tensor(const at::Tensor& t, bool over_dp = false);
  at::Tensor broadcast_tensor(const at::Tensor& t, int from_process);
  // gather_for_metrics' cut: on the active loader's last batch, only the real samples of the gathered data.
  at::Tensor drop_duplicates(at::Tensor data);

  config::Config config_;
  config::AcceleratorSettings settings_;  // config_'s values, read once
  std::string config_json_;
  ProcessState state_;
  std::shared_ptr<Comm> comm_;
  std::shared_ptr<ProcessMesh> mesh_;  // with comm_
  c10::Device device_{c10::kCPU};
  std::string device_name_ = "cpu", distributed_type_ = "NO";
  std::vector<std::weak_ptr<PreparedModel>> models_;
  std::vector<std::weak_ptr<PreparedOptimizer>> optimizers_;
  std::vector<std::weak_ptr<PreparedScheduler>> schedulers_;
  std::vector<std::weak_ptr<DataLoader>> loaders_;
  std::vector<Checkpointable> checkpointables_;
  int64_t save_iteration_ = 0;  // project_config.iteration: the next automatic checkpoint's number
  GradientState grad_;
  std::string mixed_precision_ = "no";
  pp::Options pipeline_options_;  // parallelism_config's pp_* (used where the mesh has pp > 1)
  std::vector<std::string> pipeline_split_points_;
  config::Sharding sharding_;  // what FSDP / DeepSpeed settings ask for (stage 0: none)
  bool holds_ram_efficient_loading_ = false;  // hold_ram_efficient_loading (runtime/process_state.hpp)
  bool holds_zero3_init_ = false;  // hold_zero3_init (runtime/process_state.hpp)
  std::unique_ptr<GradScaler> scaler_;
  std::vector<const void*> active_;  // loaders mid-epoch, innermost last
  bool trigger_ = false;
  std::vector<std::string> log_with_;  // resolved tracker names
  std::unique_ptr<tracking::TrackerSet> trackers_;  // main process, after init_trackers
  ProfileOptions profile_options_;  // the config's profile_kwargs
  std::unique_ptr<Profiler> profiler_;  // between profile_begin and profile_end
  std::mutex mu_;
};

}  // namespace acc::core
