/// @file acc/torch.hpp
/// libacc's C++ API: Accelerate for C++ programs with their own torch::nn::Modules, torch::optim
/// optimizers and LR schedulers. It is the front door of the same core the C ABI (acc/acc.h) calls, not a
/// second implementation.
///
/// Tied to the LibTorch it was built with: a program must compile and link against that same LibTorch
/// (version and C++ ABI; `pkg-config --cflags --libs acc-torch` gives its flags). The stable surface,
/// for other languages and for programs that must outlive a LibTorch upgrade, is the C ABI.
///
/// Errors are exceptions derived from std::exception (std::invalid_argument for bad arguments,
/// std::runtime_error for call order, I/O and distributed failures), with a message naming the culprit.
/// One object is used by one thread at a time.
///
/// @code
///   acc::Accelerator accelerator(R"({"gradient_accumulation_steps": 2, "seed": 1})");
///   auto net = std::make_shared<Net>();
///   auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-3));
///   auto model = accelerator.prepare(net);           // DDP across the processes of `acc launch`
///   auto optimizer = accelerator.prepare(opt);
///   auto loader = accelerator.prepare(acc::DataLoader(inputs, targets, R"({"batch_size": 8})"));
///   while (auto batch = loader.next()) {
///     auto scope = accelerator.accumulate(model);
///     auto loss = torch::mse_loss(model(batch->at("input")), batch->at("targets"));
///     accelerator.backward(loss);
///     optimizer.step();
///     optimizer.zero_grad();
///   }
/// @endcode
#ifndef ACC_TORCH_HPP
#define ACC_TORCH_HPP

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

/// Marks a class or function of the C++ API that libacc exports (default visibility).
#define ACC_CXX_API __attribute__((visibility("default")))

namespace acc {

namespace core {  // libacc's internals, which the handles below share with the C ABI
class Accelerator;
struct PreparedModel;
struct PreparedOptimizer;
struct PreparedScheduler;
class DataLoader;
class ForwardScope;
}  // namespace core
namespace text {
class Tokenizer;
}  // namespace text
namespace core {
namespace lora {
class Host;
}
}  // namespace core

/// A batch: tensors by name, in order (the dict Accelerate hands to a model).
class ACC_CXX_API Batch {
 public:
  /// An empty batch.
  Batch() = default;
  /// A batch of these (name, tensor) pairs, in this order.
  explicit Batch(std::vector<std::pair<std::string, torch::Tensor>> items) : items_(std::move(items)) {}
  /// The tensor of `name`; std::invalid_argument naming the key when missing.
  const torch::Tensor& at(const std::string& name) const;
  /// Whether the batch has a tensor named `name`.
  bool contains(const std::string& name) const;
  /// The (name, tensor) pairs, in order.
  const std::vector<std::pair<std::string, torch::Tensor>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, torch::Tensor>> items_;
};

/// A prepared torch::nn::Module. Call it like the module (prepared(x) runs module->forward(x)) so that
/// its forward runs as Accelerate's wrapped one: the strategy's pre-forward work (DDP broadcasts
/// buffers), autocast under mixed precision, and float32 outputs.
class ACC_CXX_API Model {
 public:
  /// The prepared torch::nn::Module.
  torch::nn::Module& module() const;
  /// Runs `fn` (your module's forward, or any code) inside the prepared forward's context.
  template <class F>
  auto forward(F&& fn) -> decltype(fn()) {
    ForwardGuard guard(*this);
    return to_fp32(fn());
  }
  /// Names of every parameter as the strategy sees them ("layers.0.weight", ...).
  std::vector<std::string> parameter_names() const;

  /// RAII: what a forward runs inside (see above).
  class ACC_CXX_API ForwardGuard {
   public:
    /// Enters `model`'s prepared forward context until destroyed.
    explicit ForwardGuard(Model& model);
    ~ForwardGuard();
    ForwardGuard(const ForwardGuard&) = delete;
    ForwardGuard& operator=(const ForwardGuard&) = delete;

   private:
    std::unique_ptr<core::ForwardScope> scope_;
  };

  std::shared_ptr<core::PreparedModel> slot;  ///< shared with the accelerator

 protected:
  /// A forward's output as the prepared forward returns it (float32 under mixed precision).
  static torch::Tensor to_fp32(const torch::Tensor& t);
  /// Outputs other than a tensor pass unchanged.
  template <class T>
  static T to_fp32(T other) {
    return other;
  }
};

/// A prepared module that keeps its type: prepared(args...) calls M::forward, prepared-> reaches M.
template <class M>
class PreparedModule : public Model {
 public:
  /// Accelerator::prepare makes it: `base` prepared, `m` the same module with its type.
  PreparedModule(Model base, std::shared_ptr<M> m) : Model(std::move(base)), m_(std::move(m)) {}
  /// Calls M::forward(args...) inside the prepared forward (see Model).
  template <class... Args>
  auto operator()(Args&&... args) {
    return forward([&] { return m_->forward(std::forward<Args>(args)...); });
  }
  /// The module, with its type.
  M* operator->() const { return m_.get(); }
  /// The module's shared pointer.
  const std::shared_ptr<M>& ptr() const { return m_; }

 private:
  std::shared_ptr<M> m_;
};

/// A Hugging Face model (docs/hf-models.md): one of transformers' architectures with transformers' parameter
/// names, loaded from (or saved to) a model directory. It runs on this process until Accelerator::prepare(model)
/// gives it its strategy; from then on a call runs as a prepared forward (DDP, autocast) and save_pretrained is
/// collective.
class ACC_CXX_API HfModel {
 public:
  ///@{
  /// transformers' from_pretrained / from_config, as acc_model_from_pretrained / acc_model_from_config:
  /// options_json {"dtype": "auto" | "float32" | "bfloat16" | "float16"}.
  static HfModel from_pretrained(const std::string& dir, const std::string& options_json = "");
  static HfModel from_config(const std::string& config_json, const std::string& options_json = "");
  ///@}
  /// The torch::nn::Module tree: parameters() for an optimizer, train() / eval().
  torch::nn::Module& module() const;
  /// model(**batch): "input_ids" with "attention_mask", "labels", ... in; "logits" and, with labels, "loss" out.
  Batch operator()(const Batch& batch) const;
  /// transformers' generate, as acc_generate: the whole sequences [B, P + n]. on_tokens gets each step's B new
  /// tokens; returning false stops there.
  torch::Tensor generate(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                         const std::string& options_json = "",
                         const std::function<bool(const torch::Tensor&)>& on_tokens = {}) const;
  /// transformers' save_pretrained, as acc_model_save_pretrained.
  void save_pretrained(const std::string& dir, const std::string& max_shard_size = "10GB") const;
  ///@{
  /// Accelerate's compute_module_sizes and device-map planning, as acc_model_module_sizes and
  /// acc_infer_auto_device_map: JSON texts (docs/big-models.md). from_config with {"device": "meta"} gives an
  /// empty model to plan for; from_pretrained with {"device_map": ...} loads onto the plan.
  std::string module_sizes(const std::string& dtype = "") const;
  std::string infer_auto_device_map(const std::string& options_json = "") const;
  ///@}
  /// Text in, text out, as acc_generate_text: the prompt encoded with `tokenizer`, generate, the new ids decoded
  /// (options_json: generate's, "stop_strings", "skip_special_tokens", "add_special_tokens"). on_text gets the
  /// text in pieces as transformers' TextStreamer prints them; returning false stops there.
  std::string generate_text(const class Tokenizer& tokenizer, const std::string& prompt,
                            const std::string& options_json = "",
                            const std::function<bool(std::string_view)>& on_text = {}) const;

  std::shared_ptr<core::PreparedModel> slot;  ///< shared with the accelerator once prepared
};

/// A Hugging Face tokenizer as transformers' AutoTokenizer loads it (docs/text.md): the `tokenizers` crate
/// itself, with the chat templates of its folder. Thread-safe: share one between threads (set_special_token
/// excepted). The options are acc.h's (acc_tokenizer_encode, acc_tokenizer_apply_chat_template,
/// acc_tokenizer_train_bpe); errors throw std::invalid_argument (a bad option: std::runtime_error naming it).
class ACC_CXX_API Tokenizer {
 public:
  /// AutoTokenizer.from_pretrained(dir), as acc_tokenizer_from_pretrained.
  static Tokenizer from_pretrained(const std::string& dir);
  /// A byte-level BPE trained on texts (tokenizers' BpeTrainer), as acc_tokenizer_train_bpe.
  static Tokenizer train_bpe(const std::vector<std::string>& texts, const std::string& options_json = "");
  /// transformers' tok(texts, ...): "input_ids", "attention_mask", "token_type_ids" as int64 tensors [rows, T].
  /// Rows of different lengths (no "padding") are refused; encode_ids gives them as lists.
  Batch encode(const std::vector<std::string>& texts, const std::string& options_json = "") const;
  /// The input_ids of each row, rows of any length.
  std::vector<std::vector<int64_t>> encode_ids(const std::vector<std::string>& texts,
                                               const std::string& options_json = "") const;
  /// transformers' decode, as acc_tokenizer_decode.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;
  /// apply_chat_template(tokenize=False): the rendered text.
  std::string apply_chat_template(const std::string& messages_json, const std::string& options_json = "") const;
  /// apply_chat_template(tokenize=True, return_dict=True, return_assistant_tokens_mask=True): "input_ids",
  /// "attention_mask" and "assistant_masks" as int64 tensors [1, T].
  Batch encode_chat(const std::string& messages_json, const std::string& options_json = "") const;
  /// A token's id (added tokens included); nullopt outside the vocabulary.
  std::optional<int64_t> token_to_id(const std::string& token) const;
  /// An id's token; nullopt outside the vocabulary.
  std::optional<std::string> id_to_token(int64_t id) const;
  /// The vocabulary sizes, model type, special tokens and chat template names, as JSON.
  std::string info() const;
  /// `tok.pad_token = ...`, as acc_tokenizer_set_special_token; not while other threads use the tokenizer.
  void set_special_token(const std::string& name, const std::optional<std::string>& token);
  /// tokenizer.json, tokenizer_config.json and chat_template.jinja into dir, as acc_tokenizer_save_pretrained.
  void save_pretrained(const std::string& dir) const;

  std::shared_ptr<text::Tokenizer> impl;  ///< libacc's tokenizer
};

/// A prepared optimizer (Accelerate's AcceleratedOptimizer): step and zero_grad do nothing on
/// accumulation steps; under fp16 the gradients are unscaled first and the step is skipped on inf/nan.
class ACC_CXX_API Optimizer {
 public:
  /// The optimizer's step (none on accumulation steps, nor on inf/nan gradients under fp16).
  void step();
  /// Zeroes the gradients (not on accumulation steps).
  void zero_grad();
  /// Whether the last step was skipped (fp16 gradients with inf/nan).
  bool step_was_skipped() const;
  /// The learning rate of the first parameter group.
  double lr() const;
  std::shared_ptr<core::PreparedOptimizer> slot;  ///< shared with the accelerator
};

/// A prepared LR scheduler (AcceleratedScheduler): no step on accumulation or skipped steps; otherwise
/// num_processes steps per call (one with split_batches).
class ACC_CXX_API Scheduler {
 public:
  /// The scheduler's step, as said above.
  void step();
  std::shared_ptr<core::PreparedScheduler> slot;  ///< shared with the accelerator
};

/// A data loader over samples (rows of tensors, or a function of the index), batched, shuffled and, once
/// prepared, sharded across processes exactly as Accelerate's prepare_data_loader does. Batches hold the
/// samples' names ("input_ids", "attention_mask", "labels", ...); samples given as (input, target) are
/// named "input" and "targets". options_json: {"batch_size", "shuffle", "seed", "drop_last"}, as
/// acc_dataloader_create.
class ACC_CXX_API DataLoader {
 public:
  /// Sample i is {name: columns[name][i]} (torch's TensorDataset, named); the tensors are copied.
  explicit DataLoader(const Batch& columns, const std::string& options_json = "");
  /// Sample i is {"input": inputs[i], "targets": targets[i]}; the tensors are copied.
  DataLoader(torch::Tensor inputs, torch::Tensor targets, const std::string& options_json = "");
  /// get(i) returns sample i; every sample names the same tensors in the same order.
  DataLoader(int64_t size, std::function<Batch(int64_t)> get, const std::string& options_json = "");
  /// get(i) returns sample i's input and target (an undefined target for none).
  DataLoader(int64_t size, std::function<std::pair<torch::Tensor, torch::Tensor>(int64_t)> get,
             const std::string& options_json = "");
  /// A dataset from files, as acc_dataset_from_files: `path` (a file or a folder; "" when dataset_options_json gives
  /// "files") read, tokenized, grouped or prepared as TRL's SFTTrainer does (dataset_options_json: acc.h's keys), each
  /// batch the chosen collator's padded batch (input_ids, attention_mask, labels, position_ids, ...). A bad option
  /// throws naming it.
  static DataLoader from_files(const std::string& path, const Tokenizer& tokenizer,
                               const std::string& dataset_options_json = "", const std::string& options_json = "");
  /// from_files with the accelerator's resolved data.* settings (acc_dataset_from_config).
  static DataLoader from_config(const class Accelerator& accelerator, const Tokenizer& tokenizer,
                                const std::string& options_json = "");
  /// The next batch of this process; std::nullopt at the end of an epoch (the next call starts the next).
  std::optional<Batch> next();
  int64_t length() const;  ///< batches per epoch on this process
  /// Ends the current pass; the next one runs `epoch` (as acc_dataloader_set_epoch).
  void set_epoch(int64_t epoch);
  /// True while the last batch of the epoch is current (Accelerate's end_of_dataloader).
  bool end_of_epoch() const;
  std::shared_ptr<core::DataLoader> impl;  ///< libacc's loader, shared once prepared

 private:
  explicit DataLoader(std::shared_ptr<core::DataLoader> loader) : impl(std::move(loader)) {}
};

/// Accelerate's Accelerator: the context of one training process (the C ABI's acc_accelerator). It prepares
/// modules, optimizers, schedulers and data loaders for the processes of the job, runs backward and the
/// collectives, and saves and loads checkpoints.
class ACC_CXX_API Accelerator {
 public:
  /// Accelerate's constructor arguments as JSON (see acc_accelerator_create); "" for the defaults. Under
  /// `acc launch` (or torchrun's environment) this joins the process group.
  explicit Accelerator(const std::string& config_json = "");

  int process_index() const;  ///< this process's rank in the job (RANK)
  int local_process_index() const;  ///< this process's rank on its machine (LOCAL_RANK)
  int num_processes() const;  ///< the number of processes of the job (WORLD_SIZE)
  bool is_main_process() const;  ///< true on the process of rank 0
  bool is_local_main_process() const;  ///< true on the first process of its machine (local rank 0)
  bool is_last_process() const;  ///< true on the process of the highest rank
  torch::Device device() const;  ///< the device of this process
  std::string distributed_type() const;  ///< "NO", "MULTI_CPU", "MULTI_GPU"
  std::string config_json() const;  ///< the resolved configuration, with provenance

  ///@{
  /// prepare: the module moves to the device and gets its strategy (DDP with several processes).
  Model prepare(std::shared_ptr<torch::nn::Module> module);
  template <class M>
    requires std::is_base_of_v<torch::nn::Module, M>
  PreparedModule<M> prepare(std::shared_ptr<M> module) {
    return PreparedModule<M>(prepare(std::static_pointer_cast<torch::nn::Module>(module)), module);
  }
  template <class M>
  PreparedModule<M> prepare(torch::nn::ModuleHolder<M>& holder) {
    return prepare(holder.ptr());
  }
  ///@}
  /// A Hugging Face model, prepared in place: `model` and the returned handle share it.
  Model prepare(const HfModel& model);
  ///@{
  /// An optimizer over a prepared model's parameters, prepared (Accelerate's AcceleratedOptimizer).
  Optimizer prepare(std::shared_ptr<torch::optim::Optimizer> optimizer);
  template <class O>
    requires std::is_base_of_v<torch::optim::Optimizer, O>
  Optimizer prepare(std::shared_ptr<O> optimizer) {
    return prepare(std::static_pointer_cast<torch::optim::Optimizer>(std::move(optimizer)));
  }
  ///@}
  ///@{
  /// An LR scheduler of a prepared optimizer, prepared (Accelerate's AcceleratedScheduler).
  Scheduler prepare(std::shared_ptr<torch::optim::LRScheduler> scheduler, const Optimizer& optimizer);
  template <class S>
    requires std::is_base_of_v<torch::optim::LRScheduler, S>
  Scheduler prepare(std::shared_ptr<S> scheduler, const Optimizer& optimizer) {
    return prepare(std::static_pointer_cast<torch::optim::LRScheduler>(std::move(scheduler)), optimizer);
  }
  ///@}
  /// A data loader sharded across the processes as Accelerate's prepare_data_loader does.
  DataLoader prepare(DataLoader loader);

  /// Back-propagates `loss` (as acc_backward; gradients synchronize on the steps that sync them).
  void backward(const torch::Tensor& loss);

  /// Accelerate's accumulate(model): the scope of one batch; gradients sync every
  /// gradient_accumulation_steps-th batch (and on the loader's last one).
  class ACC_CXX_API AccumulateScope {
   public:
    /// Begins the batch's scope for `model`; the destructor ends it.
    AccumulateScope(Accelerator& accelerator, Model& model);
    ~AccumulateScope();
    AccumulateScope(const AccumulateScope&) = delete;
    AccumulateScope& operator=(const AccumulateScope&) = delete;

   private:
    std::shared_ptr<core::Accelerator> acc_;
    std::shared_ptr<core::PreparedModel> model_;
  };
  /// Accelerate's accumulate(model): the AccumulateScope of one batch.
  AccumulateScope accumulate(Model& model) { return AccumulateScope(*this, model); }
  /// True when the current micro-step synchronizes gradients and steps the optimizer.
  bool sync_gradients() const;

  /// PyTorch's clip_grad_norm_ over the model's gradients (as acc_clip_grad_norm); returns the total norm
  /// before clipping.
  double clip_grad_norm(Model& model, double max_norm, double norm_type = 2.0);
  /// Clamps every gradient of the model to [-clip_value, clip_value] (as acc_clip_grad_value).
  void clip_grad_value(Model& model, double clip_value);

  /// Concatenates `t` from every process along dim 0, in rank order (as acc_gather). Collective.
  torch::Tensor gather(const torch::Tensor& t);
  /// gather, without the samples sharding duplicated in the last batch (as acc_gather_for_metrics).
  torch::Tensor gather_for_metrics(const torch::Tensor& t);
  /// Reductions of reduce.
  enum class Reduce {
    Sum,  ///< element-wise sum
    Mean,  ///< element-wise mean
    Max  ///< element-wise maximum
  };
  /// Element-wise reduction across processes; the result is on every process (as acc_reduce).
  torch::Tensor reduce(const torch::Tensor& t, Reduce op = Reduce::Sum);
  /// A copy of process `from_process`'s tensor on every process (as acc_broadcast).
  torch::Tensor broadcast(const torch::Tensor& t, int from_process = 0);
  /// Pads `t` along `dim` to the largest size any process has (as acc_pad_across_processes).
  torch::Tensor pad_across_processes(const torch::Tensor& t, int64_t dim = 0, double pad_index = 0,
                                     bool pad_first = false);
  /// This process's share of n items: {start, count}; with padding every share has the longest count.
  std::pair<int64_t, int64_t> split_between_processes(int64_t n) const;
  /// Rows of `t` (dim 0) for this process, split as above (as acc_split_tensor_between_processes).
  torch::Tensor split_between_processes(const torch::Tensor& t, bool apply_padding = false) const;
  /// A barrier; returns once every process has reached it.
  void wait_for_everyone();
  ///@{
  /// gather_object / broadcast_object_list over byte strings you serialize; gather_object_for_metrics
  /// keeps only the real samples of a padded last batch (one item per sample).
  std::vector<std::string> gather_object(const std::vector<std::string>& items);
  std::vector<std::string> gather_object_for_metrics(const std::vector<std::string>& items);
  std::vector<std::string> broadcast_object(const std::vector<std::string>& items, int from_process = 0);
  ///@}
  /// Runs `fn` on the main process (of the machine, when local) first, then on the others.
  void main_process_first(const std::function<void()>& fn, bool local = false);
  /// set_trigger on this process (as acc_set_trigger).
  void set_trigger();
  /// check_trigger: true on every process when any process set it since the last check, which resets it.
  bool check_trigger();
  void print(const std::string& text) const;  ///< on the local main process only
  /// Accelerate's set_seed (as acc_set_seed).
  void set_seed(uint64_t seed, bool device_specific = false, bool deterministic = false) const;

  /// Experiment trackers (Accelerate's init_trackers, log, end_training), as acc_init_trackers, acc_log and
  /// acc_end_training: the trackers log_with names write on the main process only. config_json: the
  /// hyperparameters, a JSON object ("" for none); init_kwargs_json: options per tracker ("" for none).
  void init_trackers(const std::string& project_name, const std::string& config_json = "",
                     const std::string& init_kwargs_json = "");
  /// Scalars by name, in order, at `step` (std::nullopt: none).
  void log(const std::vector<std::pair<std::string, double>>& values, std::optional<int64_t> step = std::nullopt);
  /// Any values acc_log takes (numbers, strings, objects of numbers), as a JSON object.
  void log_json(const std::string& values_json, std::optional<int64_t> step = std::nullopt);
  /// Finishes the trackers (as acc_end_training).
  void end_training();

  /// Accelerate's profile(), as acc_profile_begin / acc_profile_step / acc_profile_end: LibTorch's Kineto profiler
  /// over this thread's work while the scope lives, with the accelerator's profile_kwargs or, given a ProfileKwargs
  /// JSON object, with those instead. With output_trace_dir, ending writes profile_<rank>.json there and waits for
  /// every process. Make every call, and train, on the thread that made the scope.
  class ACC_CXX_API ProfileScope {
   public:
    /// Starts the profile ("" for the accelerator's profile_kwargs).
    explicit ProfileScope(Accelerator& accelerator, const std::string& profile_kwargs_json = "");
    /// Ends the profile as end() does unless end() was called; errors are dropped (call end() to see them). Left by
    /// an exception, it stops without writing or waiting, as Accelerate's `with accelerator.profile()` does.
    ~ProfileScope();
    ProfileScope(const ProfileScope&) = delete;
    ProfileScope& operator=(const ProfileScope&) = delete;
    /// torch.profiler's step(): ends the current step; the schedule starts or stops recording here.
    void step();
    /// Ends the profile; returns the trace file written ("" without output_trace_dir). Collective with
    /// output_trace_dir.
    std::string end();

   private:
    std::shared_ptr<core::Accelerator> acc_;
    bool ended_ = false;
    int exceptions_ = 0;  // std::uncaught_exceptions() when the scope began
  };
  /// Accelerate's profile(): the ProfileScope of a profile.
  ProfileScope profile(const std::string& profile_kwargs_json = "") { return ProfileScope(*this, profile_kwargs_json); }

  ///@{
  /// Checkpoints (docs/checkpoints.md), as acc_save_state and acc_load_state: everything prepared, the
  /// random states and the registered objects; collectives. A C++ caller's LR scheduler keeps its step count.
  void save_state(const std::string& dir);
  void load_state(const std::string& dir);
  ///@}
  /// register_for_checkpointing: `save` returns the object's bytes (main process), `load` takes them back.
  void register_for_checkpointing(std::function<std::string()> save, std::function<void(const std::string&)> load);
  /// Accelerate's save_model, as acc_save_model: the unwrapped model in Hugging Face format (model.safetensors, or
  /// shards and model.safetensors.index.json past max_shard_size: "10GB", "10GiB", "500MB", ...); every process
  /// calls it, the main process writes. docs/checkpoints.md, "save_model".
  void save_model(const Model& model, const std::string& dir, const std::string& max_shard_size = "10GB");

  /// libacc's accelerator behind this object.
  const std::shared_ptr<core::Accelerator>& impl() const { return impl_; }

 private:
  std::shared_ptr<core::Accelerator> impl_;
};

/// Writes a module's parameters and buffers to a safetensors file, atomically.
ACC_CXX_API void save_safetensors(const torch::nn::Module& module, const std::string& path);
/// The module (not prepared) in Hugging Face format, as Accelerator::save_model, by this process.
ACC_CXX_API void save_model(const torch::nn::Module& module, const std::string& dir,
                            const std::string& max_shard_size = "10GB");

/// @name Fine-tuning: frozen parameters and parameter groups
///@{
/// torch's requires_grad_ on every parameter whose whole dotted name the regular expression `pattern` matches, as
/// acc_model_set_requires_grad: returns how many matched; std::invalid_argument naming the pattern when none does.
/// Freeze before Accelerator::prepare (the strategies read requires_grad when they wrap the model).
ACC_CXX_API int64_t set_requires_grad(torch::nn::Module& module, const std::string& pattern, bool requires_grad);
ACC_CXX_API int64_t set_requires_grad(HfModel& model, const std::string& pattern, bool requires_grad);
/// An optimizer over the trainable parameters from acc_optimizer_create's options (docs/c-api.md, "Optimizer
/// options"): "type", "lr", ..., and "param_groups", groups selected by regular expressions over parameter names
/// with their own lr / weight_decay / betas, or "transformers" (the Trainer's split: no weight decay for biases and
/// norm weights). Prepare it as any torch optimizer. The module must be held by a std::shared_ptr.
ACC_CXX_API std::shared_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& module,
                                                                    const std::string& options_json);
ACC_CXX_API std::shared_ptr<torch::optim::Optimizer> make_optimizer(const HfModel& model,
                                                                    const std::string& options_json);
///@}

/// @name LoRA adapters (Hugging Face peft)
/// As the C ABI's acc_model_add_lora, acc_model_load_adapter, acc_model_save_adapter and acc_model_merge_adapter
/// (docs/c-api.md, "Adapters"): peft's get_peft_model with a LoraConfig as JSON, PeftModel.from_pretrained,
/// save_pretrained of the adapter and merge_and_unload. The LoRA weights are parameters named as peft names them
/// without "base_model.model." ("layers.0.lora_A.weight"); everything else is frozen. Adapters are added, loaded and
/// merged before Accelerator::prepare; saving a prepared model's adapter is collective (the main process writes).
/// A module of your own takes adapters in its acc::Linear layers (a torch::nn::Linear cannot: targeting one is an
/// error naming it); it must be held by a std::shared_ptr, as torch modules are.
///@{
ACC_CXX_API void add_lora(torch::nn::Module& module, const std::string& lora_config_json);
ACC_CXX_API void add_lora(HfModel& model, const std::string& lora_config_json);
/// options_json: {"is_trainable": false} (peft's default: the adapter is frozen too).
ACC_CXX_API void load_adapter(torch::nn::Module& module, const std::string& dir, const std::string& options_json = "");
ACC_CXX_API void load_adapter(HfModel& model, const std::string& dir, const std::string& options_json = "");
/// A module that is not prepared: this process writes.
ACC_CXX_API void save_adapter(torch::nn::Module& module, const std::string& dir);
ACC_CXX_API void save_adapter(const HfModel& model, const std::string& dir);
/// A prepared model (collective: every process calls it).
ACC_CXX_API void save_adapter(const Model& model, const std::string& dir);
ACC_CXX_API void merge_adapter(torch::nn::Module& module);
ACC_CXX_API void merge_adapter(HfModel& model);
///@}

/// torch::nn::Linear that takes a LoRA adapter: y = x W^T + b with W [out, in], torch::nn::Linear's parameter names
/// ("weight", "bias") and initialisation (uniform in +-1/sqrt(in)). A drop-in for a model that is to be adapted:
/// torch::nn::LinearImpl's forward cannot be extended, so acc::add_lora targets acc::Linear layers only.
/// @code
///   struct Net : torch::nn::Module {
///     Net() : fc1(register_module("fc1", acc::Linear(16, 64))), fc2(register_module("fc2", acc::Linear(64, 4))) {}
///     torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
///     acc::Linear fc1, fc2;
///   };
///   auto net = std::make_shared<Net>();
///   acc::add_lora(*net, R"({"r": 8, "lora_alpha": 16, "target_modules": ["fc1", "fc2"]})");
/// @endcode
class ACC_CXX_API LinearImpl : public torch::nn::Module {
 public:
  /// W [out_features, in_features] and, with `bias`, b [out_features]; std::invalid_argument for a size <= 0.
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
  ~LinearImpl() override;
  /// Initialises weight and bias again as at construction.
  void reset_parameters();
  /// x W^T + b, plus the adapter's B(A(dropout(x))) * scaling when one is added.
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;  ///< [out_features, in_features]
  torch::Tensor bias;  ///< [out_features], or undefined without bias
  int64_t in_features;  ///< the input's last dimension
  int64_t out_features;  ///< the output's last dimension
  std::shared_ptr<core::lora::Host> lora;  ///< libacc's: the adapter this layer holds
};
/// The module holder of LinearImpl (as torch::nn::Linear is of torch::nn::LinearImpl).
TORCH_MODULE(Linear);

}  // namespace acc

#endif  // ACC_TORCH_HPP
