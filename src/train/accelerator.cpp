#include "train/accelerator.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ios>

#include <torch/optim/schedulers/lr_scheduler.h>

#include <set>

#include "cuda/plugin.hpp"
#include "models/deferred.hpp"
#include "parallel/parallelize.hpp"
#include "parallel/sharded.hpp"
#include "precision/fp8.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cuda.hpp"
#include "runtime/mesh.hpp"
#include "util/dtypes.hpp"
#include "util/errors.hpp"
#include "util/trace_phases.hpp"
#include <acc/json.hpp>

namespace acc::core {

namespace {

// A setting as config::unsupported_setting names it: key, value and where the value came from.
std::string shown_setting(const config::Config& c, const char* key) {
  const config::Provenance p = c.provenance(key);
  return "'" + std::string(key) + "' = " + c.get_json(key) + " (from " +
         (p.origin == config::Origin::Default ? std::string("the default")
                                              : std::string(config::origin_name(p.origin)) + " " + p.where) +
         ")";
}

}  // namespace

void set_seed(uint64_t seed, bool deterministic) {
  // Accelerate's set_seed: every generator this process draws from. libacc has only torch's.
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  }
  // Every CUDA generator, as torch.cuda.manual_seed_all does (none without CUDA).
  for (auto& g : cuda::default_generators()) {
    std::lock_guard<std::mutex> glock(g.mutex());
    g.set_current_seed(seed);
  }
  if (deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

void Accelerator::set_seed(uint64_t seed, bool device_specific, bool deterministic) const {
  core::set_seed(device_specific ? seed + static_cast<uint64_t>(state_.rank) : seed, deterministic);
}

int64_t find_executable_batch_size(int64_t starting_batch_size, const std::function<bool(int64_t)>& step) {
  if (starting_batch_size < 1) throw std::invalid_argument("starting_batch_size must be >= 1");
  for (int64_t bs = starting_batch_size; bs > 0; bs = static_cast<int64_t>(static_cast<double>(bs) * 0.9))
    if (step(bs)) return bs;
  throw std::bad_alloc();
}

Accelerator::~Accelerator() {
  profiler_.reset();  // a running profile ends without a file
  if (holds_ram_efficient_loading_) hold_ram_efficient_loading(false);
  if (holds_zero3_init_) core::hold_zero3_init(false);
  // Trackers still running are finished (files synced, the MLflow run marked finished).
  if (!trackers_) return;
  try {
    trackers_->finish();
  } catch (...) {
  }
}

void Accelerator::set_mixed_precision(const std::string& mode) {
  if (mode == "fp8") {
    // FP8 GEMMs need the tensor cores of compute capability 8.9 (Ada) or 9.0 (Hopper) and newer.
    int capability = 0;
    if (device_.is_cuda()) {
      std::string why;
      if (const cuda::PluginV1* plugin = cuda::plugin(&why)) capability = plugin->capability(device_.index());
    }
    if (capability < 89)
      throw UnsupportedError("mixed_precision \"fp8\" needs a CUDA GPU with compute capability 8.9 or newer "
                             "(Ada, Hopper); this process runs on " +
                             device_name_ +
                             (device_.is_cuda() ? " (compute capability " + std::to_string(capability / 10) + "." +
                                                      std::to_string(capability % 10) + ")"
                                                : std::string()));
  }
  if (mode == "fp16" && device_.is_cpu()) {
    // Accelerate refuses fp16 on CPU; LibTorch's CPU autocast has float16, so it works here. Probe it,
    // so a build without it fails now, clearly, rather than in the first forward.
    AutocastScope probe(c10::DeviceType::CPU, at::kHalf, true, false);
    at::Tensor r = at::mm(at::ones({2, 2}), at::ones({2, 2}));
    if (r.scalar_type() != at::kHalf)
      throw UnsupportedError("mixed_precision \"fp16\": this LibTorch's CPU autocast has no float16");
  }
  if (mode == "fp16") {
    GradScalerOptions o;
    const auto& k = settings_.grad_scaler_kwargs;
    o.init_scale = k.init_scale;
    o.growth_factor = k.growth_factor;
    o.backoff_factor = k.backoff_factor;
    o.growth_interval = k.growth_interval;
    o.enabled = k.enabled;
    scaler_ = std::make_unique<GradScaler>(o);
  }
  mixed_precision_ = mode;
}

ForwardScope::ForwardScope(PreparedModel& m) {
  if (range_.isActive()) range_.before(std::string_view(kPhaseForward));
  if (!m.owner) return;
  if (!m.strategy) return;
  strategy_ = m.strategy.get();
  strategy_->before_forward();
  const std::string& mp = m.owner->mixed_precision();
  const auto& k = m.owner->settings().autocast_kwargs;
  if (mp == "no" || !k.enabled) return;
  const bool cache = k.cache_enabled.value_or(true);
  // fp8: linear layers run FP8 GEMMs (precision/fp8.hpp), everything else bf16 autocast.
  autocast_.emplace(m.owner->device().type(), mp == "fp16" ? at::kHalf : at::kBFloat16, true, cache);
  // fp8_recipe_kwargs.use_autocast_during_eval (TERecipeKwargs): FP8 GEMMs in evaluation only when asked.
  if (mp == "fp8" && (m.model->is_training() || m.owner->settings().fp8_recipe_kwargs.use_autocast_during_eval))
    fp8_.emplace();
}

ForwardScope::~ForwardScope() {
  if (!strategy_) return;
  try {
    strategy_->after_forward();
  } catch (...) {  // never throws today (no collective); a destructor must not
  }
}

at::Tensor output_to_fp32(const at::Tensor& t) {
  return t.defined() && at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t;
}

TensorDict PreparedModel::forward(const TensorDict& batch) {
  if (!owner) {
    model->check_made("forward");
    return model->forward(batch);
  }
  // As DDP does: inputs follow the model to its device (the accelerator's, or with device_placement false its own).
  const c10::Device dev = device;
  TensorDict on_device;
  for (const auto& [name, t] : batch.items()) on_device.set(name, !t.defined() || t.device() == dev ? t : t.to(dev));
  if (pipeline) return pipeline_forward(on_device);
  TensorDict out;
  {
    ForwardScope scope(*this);
    out = model->forward(on_device);
  }
  TensorDict converted;
  for (const auto& [name, t] : out.items()) converted.set(name, output_to_fp32(t));
  return converted;
}

TensorDict PreparedModel::pipeline_forward(const TensorDict& batch) {
  if (pippy) return pippy_forward(batch);
  if (!batch.contains(model->target_name()))
    throw std::invalid_argument("pipeline parallelism: the forward needs targets ('" + model->target_name() +
                                "'): the last stage computes the loss, which is all a pipelined forward returns");
  ForwardScope scope(*this);
  if (!model->is_training()) return {{"loss", at::scalar_tensor(pipeline->eval_step(batch), at::kFloat)}};
  // Forward and backward of every micro-batch now; DDP's hooks stay off until Accelerator::backward synchronises
  // the step's accumulated gradients.
  strategy->before_backward(/*sync=*/false);
  // What Accelerator::backward multiplies a loss by: 1 / gradient_accumulation_steps, and fp16's loss scale.
  const GradScaler* scaler = owner->scaler();
  const double scale = (scaler ? scaler->scale() : 1.0) / static_cast<double>(owner->gradient_state().num_steps);
  const double loss = pipeline->step(batch, scale);
  strategy->after_backward();
  // A leaf that asks for a gradient, so that it passes for a loss; Accelerator::backward recognises it.
  pipeline_loss = at::scalar_tensor(loss, at::kFloat).requires_grad_(true);
  return {{"loss", pipeline_loss}};
}

Model& PreparedModel::tensors(const char* what) const {
  model->check_made(what);
  if (strategy && !strategy->parameters_whole())
    throw StateError(std::string(what) + ": the model's parameters are sharded across processes (" + strategy->name() +
                     "); save_model (on every process) writes them whole");
  return *model;
}

int64_t PreparedModel::set_requires_grad(const std::string& pattern, bool on) {
  if (owner)
    throw StateError("requires_grad is set before acc_prepare / Accelerator::prepare: the strategies read it when "
                     "they wrap the model");
  return model->set_requires_grad(pattern, on);
}

void PreparedOptimizer::step() {
  RECORD_USER_SCOPE(kPhaseOptimizerStep);
  step_was_skipped = false;
  if (!owner) return opt->step();
  if (!owner->gradient_state().sync_gradients) return;
  GradScaler* scaler = owner->scaler();
  if (scaler) {
    owner->unscale_gradients(*this);
    step_was_skipped = found_inf;
  }
  if (!step_was_skipped) {
    // DeepSpeed's gradient_clipping: the engine clips before every step.
    if (const double clip = owner->gradient_clipping(); clip > 0 && model) owner->clip_grad_norm(*model, clip, 2.0);
    opt->step();
    if (model && model->strategy) model->strategy->after_optimizer_step();
  }
  if (scaler) {
    scaler->update(found_inf);
    unscaled = found_inf = false;
  }
}

void PreparedOptimizer::zero_grad() {
  if (owner && !owner->gradient_state().sync_gradients) return;
  opt->zero_grad();
}

void PreparedScheduler::step() {
  // Accelerate's AcceleratedScheduler: no step while accumulating or when the optimizer skipped its
  // step; otherwise, as each process saw 1/num_processes of the batches, num_processes steps per call
  // unless split_batches.
  // step_scheduler_with_optimizer false: no link to the optimizer, one step per call.
  int64_t n = 1;
  if (owner && owner->settings().step_scheduler_with_optimizer) {
    if (!owner->gradient_state().sync_gradients || opt->step_was_skipped) return;
    if (!owner->split_batches()) n = owner->state().world_size;
  }
  if (user) {
    for (int64_t i = 0; i < n; ++i) user->step();
    return;
  }
  steps += n;
  apply();
}

bool Accelerator::split_batches() const { return settings_.dataloader_config.split_batches; }

void Accelerator::prepare(const std::shared_ptr<PreparedModel>& model, const std::shared_ptr<PreparedOptimizer>& opt,
                          const std::shared_ptr<PreparedScheduler>& sched, const std::shared_ptr<DataLoader>& loader) {
  std::lock_guard<std::mutex> lock(mu_);
  // Check everything before changing anything: a refused prepare leaves all objects as they were.
  if (model && model->owner) throw StateError("the model is already prepared");
  if (opt && opt->owner) throw StateError("the optimizer is already prepared");
  if (sched && sched->owner) throw StateError("the scheduler is already prepared");
  if (loader && loader->prepared()) throw StateError("the data loader is already prepared");
  if (opt && opt->model && !opt->model->owner && opt->model != model)
    throw StateError("the optimizer's model is not prepared: prepare it in the same call or before");
  if (opt && opt->model && opt->model->owner && opt->model->owner.get() != this)
    throw StateError("the optimizer's model was prepared by another accelerator");
  if (sched && !sched->opt->owner && sched->opt != opt)
    throw StateError("the scheduler's optimizer is not prepared: prepare it in the same call or before");
  if (opt) adopt_made_parameters(*opt, model);
  // A sharded model's optimizer is rebuilt over the shards: one that cannot be is refused now.
  if (opt && comm_ && sharding_.stage > 0)
    if (const auto& target = opt->model ? opt->model : model)
      opt->opt->check_rebind(target->model->trainable_tensors());
  // Tensor parallelism makes new parameter tensors (this rank's slices): an optimizer with state for the whole ones
  // cannot follow them.
  const bool tensor_parallel = model && mesh_ && mesh_->size("tp") > 1;
  if (tensor_parallel && opt && !opt->opt->impl().state().empty())
    throw StateError("a tensor-parallel model's optimizer must be prepared before its first step (its state would not "
                     "match the model's slices)");
  if (model && mesh_ && mesh_->size("pp") > 1) check_pipeline(*model, opt.get());
  ShardSpec spec;
  // One shard of the data per data-parallel rank: tensor- and context-parallel peers read the same batches
  // (Accelerate's prepare_data_loader with a device mesh).
  spec.num_processes = mesh_ ? mesh_->size("dp") : 1;
  spec.process_index = mesh_ ? mesh_->rank("dp") : 0;
  spec.split_batches = split_batches();
  spec.even_batches = settings_.dataloader_config.even_batches;
  auto self = shared_from_this();
  // Validates split_batches divisibility first; the rest of dataloader_config picks how it shards.
  // device_placement false: batches stay where the dataset made them (Accelerate prepares the loader with no device).
  if (loader)
    loader->prepare(LoaderPrepare::from_config(settings_.dataloader_config, spec, comm_),
                    settings_.device_placement ? device_ : c10::Device(c10::kCPU), self);

  if (model) {
    // zero3_init_flag: parameters on the meta device that ZeRO-3's strategy makes shard by shard (models/deferred.hpp);
    // any other strategy gets them whole.
    const std::shared_ptr<DeferredParameters> deferred =
        model->model->deferred() && model->model->deferred()->pending() ? model->model->deferred() : nullptr;
    if (!deferred)
      for (const auto& [name, t] : model->model->state())
        if (t.is_meta())
          throw StateError("'" + name + "' is on the meta device: materialise the model (to_empty) before prepare");
    if (settings_.use_fsdp && settings_.fsdp_plugin.activation_checkpointing) {
      if (model->model->reported_units().empty())
        throw config::Error(
            "'fsdp_plugin.activation_checkpointing' = true: this model has no blocks that libacc can "
            "recompute (the built-in GPT and the Hugging Face families have them; an MLP, a TorchScript "
            "or a C++ module does not); set it to false");
      model->model->set_activation_checkpointing(true, settings_.fsdp_plugin.activation_checkpointing_offload);
    }
    // Tensor, then context, then data parallelism over the mesh (src/parallel/parallelize.hpp).
    const ParallelPlan plan = parallel_plan(*model->model);
    std::map<const void*, std::string> names_before;  // a pipeline's optimizer keeps them for its checkpoints
    if (opt && mesh_ && mesh_->size("pp") > 1)
      for (const auto& [name, p] : model->model->named_parameters())
        names_before.emplace(p.unsafeGetTensorImpl(), name);
    Parallelized parallel = parallelize(model->model, comm_ ? mesh_.get() : nullptr, plan);
    model->strategy = std::move(parallel.strategy);
    model->split_replaced = std::move(parallel.replaced);
    model->pipeline = std::move(parallel.pipeline);
    if (opt && model->pipeline && (!opt->model || opt->model == model))
      keep_pipeline_stages(*opt, parallel.pipeline_kept, names_before);
    model->device = plan.device;
    model->owner = self;
    models_.push_back(model);
  }
  if (opt) {
    shard_optimizer(*opt, model);
    opt->owner = self;
    optimizers_.push_back(opt);
  }
  if (sched) {
    sched->owner = self;
    sched->apply();
    schedulers_.push_back(sched);
  }
  if (loader) loaders_.push_back(loader);
}

namespace {

// ddp_kwargs.comm_state_option: PowerSGDState's keyword arguments (torch's defaults for those not given).
DdpOptions::PowerSgd power_sgd_options(const config::AcceleratorSettings& c) {
  const char* key = config::AcceleratorSettings::DdpKwargs::Key::comm_state_option;
  const json::Document doc = json::Document::object(c.ddp_kwargs.comm_state_option.json, key);
  DdpOptions::PowerSgd o;
  o.on = true;
  const json::Value v = doc.root();
  if (!v.is_object()) throw config::Error(std::string("'") + key + "' must be an object of PowerSGDState options");
  for (const std::string& k : v.keys()) {
    if (k == "matrix_approximation_rank") o.rank = v.get_int(k);
    else if (k == "start_powerSGD_iter") o.start_iter = v.get_int(k);
    else if (k == "min_compression_rate") o.min_compression_rate = v.get_double(k);
    else if (k == "use_error_feedback") o.error_feedback = v.get_bool(k);
    else if (k == "warm_start") o.warm_start = v.get_bool(k);
    else if (k == "orthogonalization_epsilon") o.epsilon = v.get_double(k);
    else if (k == "random_seed") o.seed = static_cast<uint64_t>(v.get_int(k));
    else if (k == "compression_stats_logging_frequency" || k == "batch_tensors_with_same_shape")
      continue;  // no effect here
    else
      throw config::Error(std::string("'") + key + "." + k +
                          "' is not a PowerSGDState option (matrix_approximation_rank, "
                          "start_powerSGD_iter, min_compression_rate, use_error_feedback, warm_start, "
                          "orthogonalization_epsilon, random_seed)");
  }
  if (o.rank < 1) throw config::Error(std::string("'") + key + ".matrix_approximation_rank' must be at least 1");
  if (o.start_iter < 0) throw config::Error(std::string("'") + key + ".start_powerSGD_iter' must be at least 0");
  return o;
}

}  // namespace

c10::Device placement_device(bool device_placement, c10::Device accelerator_device, const Model& model) {
  if (device_placement) return accelerator_device;
  for (const auto& [name, t] : model.state())
    if (!t.is_meta()) return t.device();
  // zero3_init_flag's model, still on the meta device: where from_config and from_pretrained make models.
  if (model.deferred() && model.deferred()->pending()) return c10::kCPU;
  return accelerator_device;
}

ParallelPlan Accelerator::parallel_plan(const Model& model) const {
  ParallelPlan plan;
  // device_placement false: the model stays where the caller put it, as Accelerate's prepare_model leaves it.
  plan.device = placement_device(settings_.device_placement, device_, model);
  plan.tensor_key = shown_setting(config_, "parallelism_config.tp_size");
  plan.context_key = shown_setting(config_, "parallelism_config.cp_size");
  plan.sequence_key = shown_setting(config_, "parallelism_config.sp_size");
  plan.pipeline_key = shown_setting(config_, "parallelism_config.pp_size");
  plan.sharding_key = shown_setting(config_, settings_.use_deepspeed ? "use_deepspeed" : "use_fsdp");
  plan.pipeline = pipeline_options_;
  plan.pipeline_split_points = pipeline_split_points_;
  plan.split_points_key = shown_setting(config_, "parallelism_config.pp_split_points");
  if (!settings_.parallelism_config.sp_seq_length_is_variable)  // (checked: a length is given then)
    plan.sequence.fixed_length = settings_.parallelism_config.sp_seq_length;
  const config::Sharding& sh = sharding_;
  if (!comm_) return plan;
  if (mesh_->size("cp") > 1)
    plan.context.exchange =
        cp::parse_exchange(settings_.parallelism_config.cp_comm_strategy, "parallelism_config.cp_comm_strategy");
  if (sh.stage == 0) {
    plan.data = ParallelPlan::Data::Ddp;
    DdpOptions& d = plan.ddp;
    const auto& k = settings_.ddp_kwargs;
    d.bucket_cap_mb = k.bucket_cap_mb;
    d.broadcast_buffers = k.broadcast_buffers;
    d.find_unused_parameters = k.find_unused_parameters;
    d.gradient_as_bucket_view = k.gradient_as_bucket_view;
    d.static_graph = k.static_graph;
    const std::string& hook = k.comm_hook;
    if (hook == "fp16") d.compress = at::kHalf;  // the config stores the schema's spelling
    if (hook == "bf16") d.compress = at::kBFloat16;
    if (hook == "power_sgd" || hook == "batched_power_sgd") {
      d.power_sgd = power_sgd_options(settings_);
      d.power_sgd.batched = hook == "batched_power_sgd";
    }
    // As Accelerate's register_comm_hook: a wrapper wraps the hook, and without a hook there is nothing to wrap.
    const std::string& wrapper = k.comm_wrapper;
    if (hook != "no" && wrapper == "fp16") d.wrapper = at::kHalf;
    if (hook != "no" && wrapper == "bf16") d.wrapper = at::kBFloat16;
    return plan;
  }
  plan.data = ParallelPlan::Data::Sharded;
  ShardingOptions& o = plan.sharding;
  o.stage = sh.stage;
  const auto dtype = [](const std::string& d) { return float_dtype_named(d).value_or(at::ScalarType::Undefined); };
  o.param_dtype = dtype(sh.param_dtype);
  o.reduce_dtype = dtype(sh.reduce_dtype);
  o.bucket_cap_mb = settings_.ddp_kwargs.bucket_cap_mb;
  o.offload = sh.offload;
  o.reshard_after_forward = sh.reshard_after_forward;
  o.forward_prefetch = sh.forward_prefetch;
  o.backward_prefetch = sh.backward_prefetch;
  o.label = sh.label;
  plan.wrap = {sh.wrap_policy, sh.wrap_classes, sh.wrap_classes_set, sh.min_num_params,
               settings_.use_deepspeed && sh.stage == 3};
  return plan;
}

void Accelerator::adopt_made_parameters(PreparedOptimizer& opt, const std::shared_ptr<PreparedModel>& model) {
  std::vector<std::shared_ptr<PreparedModel>> candidates{opt.model, model};
  for (auto& w : models_)
    if (auto m = w.lock()) candidates.push_back(m);
  for (const auto& m : candidates) {
    if (const DeferredParameters* d = m ? m->model->deferred().get() : nullptr; d && !d->pending())
      opt.opt->replace_parameters([d](const at::Tensor& p) { return d->replacement(p); });
    if (m && !m->split_replaced.empty())
      opt.opt->replace_parameters([&m](const at::Tensor& p) {
        for (const auto& [old, slice] : m->split_replaced)
          if (old._unsafe_get_target() == p.unsafeGetTensorImpl()) return slice;
        return at::Tensor();
      });
  }
}

// Before prepare changes anything: what a pipelined model cannot take here.
void Accelerator::check_pipeline(const PreparedModel& model, const PreparedOptimizer* opt) const {
  if (opt && (!opt->model || opt->model.get() == &model)) opt->opt->check_rebind(model.model->trainable_tensors());
}

// An optimizer built before prepare holds every stage's parameters: it keeps this rank's stages' alone (the others'
// are freed), before tensor parallelism's slices and a sharded strategy's pieces replace them (shard_optimizer); one
// built after prepare holds those already.
void Accelerator::keep_pipeline_stages(PreparedOptimizer& opt, const std::vector<at::Tensor>& kept,
                                       const std::map<const void*, std::string>& names_before) {
  opt.pipeline_names.clear();
  for (const auto& g : opt.opt->whole_groups()) {
    std::vector<std::string> names;
    for (const at::Tensor& p : g) names.push_back(names_before.at(p.unsafeGetTensorImpl()));
    opt.pipeline_names.push_back(std::move(names));
  }
  opt.opt->keep_only(kept);
}

void Accelerator::shard_optimizer(PreparedOptimizer& opt, const std::shared_ptr<PreparedModel>& model) {
  adopt_made_parameters(opt, model);
  // A sharded model's optimizer steps its shards: it is rebuilt over them (it must not have stepped yet).
  // A C++ caller's optimizer names no model: the prepared model that holds its parameters is its model.
  std::shared_ptr<PreparedModel> owner_model = opt.model;
  if (!owner_model) {
    std::set<const void*> mine;
    for (const auto& p : opt.opt->params()) mine.insert(p.unsafeGetTensorImpl());
    std::vector<std::shared_ptr<PreparedModel>> candidates;
    if (model) candidates.push_back(model);
    for (auto& w : models_)
      if (auto m = w.lock()) candidates.push_back(m);
    for (auto& m : candidates)
      for (const auto& [n, p] : m->model->named_parameters())
        if (mine.count(p.unsafeGetTensorImpl()) && m->strategy && m->strategy->sharded()) owner_model = m;
  }
  if (!owner_model || !owner_model->strategy || !owner_model->strategy->sharded()) return;
  const Strategy& strategy = *owner_model->strategy;
  opt.opt->rebind(owner_model->model->trainable_tensors(), [&](const at::Tensor& p) { return strategy.pieces_of(p); });
  opt.model = owner_model;
}

void Accelerator::register_for_checkpointing(Checkpointable object) {
  if (!object.save || !object.load)
    throw std::invalid_argument("register_for_checkpointing needs a save and a load function");
  std::lock_guard<std::mutex> lock(mu_);
  checkpointables_.push_back(std::move(object));
}

namespace {

template <class T>
std::vector<std::shared_ptr<T>> alive(const std::vector<std::weak_ptr<T>>& list) {
  std::vector<std::shared_ptr<T>> v;
  for (const auto& w : list)
    if (auto p = w.lock()) v.push_back(std::move(p));
  return v;
}

}  // namespace

Accelerator::Prepared Accelerator::live_objects() {
  std::lock_guard<std::mutex> lock(mu_);
  return {alive(models_), alive(optimizers_), alive(schedulers_), alive(loaders_), checkpointables_};
}

void Accelerator::backward(const at::Tensor& loss) {
  std::vector<std::shared_ptr<PreparedModel>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : models_)
      if (auto m = w.lock()) live.push_back(m);
  }
  for (auto& m : live)
    if (m->pipeline && m->pipeline_loss.defined() && m->pipeline_loss.is_same(loss)) return pipeline_backward(*m);
  if (!loss.defined() || !loss.requires_grad()) {
    // The usual cause once parameters can be frozen: nothing in the model trains.
    for (auto& m : live)
      if (m->model->trainable_parameters().empty())
        throw std::invalid_argument("the loss has no autograd graph: every parameter of the prepared model is frozen "
                                    "(requires_grad false); unfreeze some before training");
    throw std::invalid_argument("the loss has no autograd graph: pass the loss acc_model_forward returned");
  }
  if (loss.numel() != 1)
    throw std::invalid_argument("the loss must have one element; got shape " + c10::str(loss.sizes()));
  at::Tensor scaled = loss / static_cast<double>(grad_.num_steps);
  if (scaler_) scaled = scaler_->scale_loss(scaled);
  {
    RECORD_USER_SCOPE(kPhaseBackward);
    for (auto& m : live) m->strategy->before_backward(/*sync=*/!m->skip_sync);
    scaled.backward();
  }
  if (!distributed()) {
    for (auto& m : live) m->strategy->after_backward();
    return;
  }
  RECORD_USER_SCOPE(kPhaseGradientSync);
  for (auto& m : live) m->strategy->after_backward();
}

// The pipeline's step ran forward and backward already (scaled by 1 / gradient_accumulation_steps): what remains is
// the strategy's synchronisation. DDP's gradient hooks fire once a parameter's gradient is complete; a backward of
// zero through every trainable parameter fires them on the step's accumulated gradients (adding nothing).
void Accelerator::pipeline_backward(PreparedModel& m) {
  m.pipeline_loss = at::Tensor();  // one backward per step
  RECORD_USER_SCOPE(kPhaseGradientSync);
  m.strategy->before_backward(/*sync=*/!m.skip_sync);
  // Without data parallelism (dp_cp of 1: no DDP or FSDP wraps the stages) there are no hooks to fire.
  if (!m.skip_sync && mesh_->size("dp_cp") > 1) {
    at::Tensor zero;
    for (const at::Tensor& p : m.model->trainable_tensors()) {
      const at::Tensor z = p.sum() * 0;
      zero = zero.defined() ? zero + z : z;
    }
    if (zero.defined()) zero.backward();
  }
  m.strategy->after_backward();
}

void Accelerator::accumulate_begin(const std::shared_ptr<PreparedModel>& model) {
  if (!model->owner) throw StateError("accumulate needs a prepared model");
  if (model->in_accumulate) throw StateError("the model is already inside an accumulate scope");
  // Accelerate's _do_sync: the last batch of the active loader always syncs (and restarts the count).
  bool end_of_loader = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const DataLoader* l = active_loader();
    end_of_loader = l && l->end_of_dataloader();
  }
  if (grad_.sync_with_dataloader && end_of_loader) {
    grad_.step = 0;
    grad_.sync_gradients = true;
  } else {
    ++grad_.step;
    grad_.sync_gradients = grad_.step % grad_.num_steps == 0;
  }
  model->in_accumulate = true;
  model->skip_sync = !(grad_.sync_gradients || (distributed() && grad_.sync_each_batch));
}

void Accelerator::accumulate_end(const std::shared_ptr<PreparedModel>& model) {
  if (!model->in_accumulate) throw StateError("accumulate_end without accumulate_begin for this model");
  model->in_accumulate = false;
  model->skip_sync = false;
}

void Accelerator::unscale_gradients(PreparedOptimizer& opt) {
  if (!scaler_ || opt.unscaled) return;
  opt.found_inf = scaler_->unscale(opt.opt->params());
  // Each process unscaled only its shards (or its pipeline stages): skipping the step must be every process's decision.
  if (comm_ && opt.model && ((opt.model->strategy && opt.model->strategy->sharded()) || opt.model->pipeline)) {
    at::Tensor any = at::tensor({opt.found_inf ? 1.0f : 0.0f});
    comm_->all_reduce(any, ReduceOp::Max);
    opt.found_inf = any.item<float>() > 0;
  }
  opt.unscaled = true;
}

void Accelerator::unscale_all_gradients() {
  // Gradients must be unscaled before they are measured or clipped (Accelerate unscales every optimizer).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : optimizers_)
    if (auto o = w.lock()) unscale_gradients(*o);
}

double Accelerator::clip_grad_norm(PreparedModel& model, double max_norm, double norm_type) {
  if (!(max_norm > 0)) throw std::invalid_argument("max_norm must be > 0");
  if (!(norm_type > 0)) throw std::invalid_argument("norm_type must be > 0");
  if (!model.strategy) throw StateError("clip_grad_norm needs a prepared model");
  unscale_all_gradients();
  // The strategy knows the global norm (sharded gradients need a collective); every process then
  // scales its own gradients by max_norm / (total + 1e-6) when that is below one, as clip_grad_norm_.
  at::Tensor total = model.pipeline ? pipeline_grad_norm(model, norm_type) : model.strategy->grad_norm(norm_type);
  at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
  c10::NoGradGuard no_grad;
  for (auto& p : model.strategy->optimizer_parameters())
    if (p.grad().defined()) p.mutable_grad().mul_(coef.to(p.grad().device()).to(p.grad().scalar_type()));
  return total.item<double>();
}

// The stages' norms combined over the pp group (each rank holds its stages' gradients). A head tied to the embedding
// counts once, as in the whole model (its copies on the first and the last stage hold the same summed gradient).
at::Tensor Accelerator::pipeline_grad_norm(const PreparedModel& model, double norm_type) const {
  const at::Tensor stage_norm = model.strategy->grad_norm(norm_type, model.pipeline->tied_copies());
  const auto group = mesh_->group("pp");
  at::Tensor t = stage_norm.to(at::kDouble).reshape({1}).clone();
  if (std::isinf(norm_type)) {
    group->all_reduce(t, ReduceOp::Max);
    return t.reshape({}).to(stage_norm.options());
  }
  t = t.pow(norm_type);
  group->all_reduce(t, ReduceOp::Sum);
  return t.pow(1.0 / norm_type).reshape({}).to(stage_norm.options());
}

void Accelerator::clip_grad_value(PreparedModel& model, double clip_value) {
  if (!(clip_value >= 0)) throw std::invalid_argument("clip_value must be >= 0");
  if (!model.strategy) throw StateError("clip_grad_value needs a prepared model");
  unscale_all_gradients();
  c10::NoGradGuard no_grad;
  for (auto& p : model.strategy->optimizer_parameters())
    if (p.grad().defined()) p.mutable_grad().clamp_(-clip_value, clip_value);
}

void Accelerator::verify(CollectiveOp op, int64_t arg, const at::Tensor* t) {
  if (comm_ && settings_.debug) verify_collective(*comm_, op, arg, t);
}

at::Tensor Accelerator::gather(const at::Tensor& t) {
  verify(CollectiveOp::gather, 0, &t);
  return gather_tensor(t);
}

at::Tensor Accelerator::gather_tensor(const at::Tensor& t, bool over_dp) {
  if (!comm_) return t.dim() == 0 ? t.reshape({1}).clone() : t.clone();
  // For metrics, over the data-parallel ranks only: tensor- and context-parallel peers evaluated the same samples.
  if (over_dp && mesh_->size("dp") < state_.world_size) return mesh_->group("dp")->all_gather_cat(t.detach());
  return comm_->all_gather_cat(t.detach());
}

const DataLoader* Accelerator::active_loader() const {
  // Only data loaders report, each with itself, and each leaves the list before it is destroyed (also
  // the loaders skip_first_batches makes, which prepare never sees).
  return active_.empty() ? nullptr : static_cast<const DataLoader*>(active_.back());
}

at::Tensor Accelerator::gather_for_metrics(const at::Tensor& t) {
  verify(CollectiveOp::gather_for_metrics, 0, &t);
  return drop_duplicates(gather_tensor(t, /*over_dp=*/true));
}

at::Tensor Accelerator::drop_duplicates(at::Tensor data) {
  // On the last batch, the gathered tensor ends with samples that even_batches repeated from the
  // start of the epoch; only the first `remainder` of that global batch are real.
  std::lock_guard<std::mutex> lock(mu_);
  const DataLoader* l = active_loader();
  if (l && l->end_of_dataloader()) {
    int64_t rem = l->remainder();
    if (rem > 0 && rem < data.size(0)) data = data.narrow(0, 0, rem);
  }
  return data;
}

at::Tensor Accelerator::reduce(const at::Tensor& t, ReduceOp op) {
  verify(CollectiveOp::reduce, static_cast<int64_t>(op), &t);
  at::Tensor r = t.detach().clone();
  if (comm_) comm_->all_reduce(r, op);
  return r;
}

void Accelerator::broadcast_from_main(const std::vector<at::Tensor>& tensors) {
  if (comm_) broadcast_from_rank0(*comm_, tensors);
}

void Accelerator::wait_for_everyone() {
  if (comm_) comm_->barrier();
}

void Accelerator::loader_begin(const void* loader) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_.push_back(loader);
  }
  // synchronize_rng_states at the start of every epoch of a prepared loader: "torch" ("cuda") makes every
  // process continue from rank 0's default CPU (CUDA) generator (the loader itself syncs "generator").
  if (!comm_) return;
  // null is Accelerate's default, ["generator"]: nothing to do here
  for (const auto& type : settings_.rng_types.value_or(std::vector<std::string>{})) {
    if (type != "torch" && type != "cuda") continue;
    // "cuda": torch.cuda.get_rng_state(), the generator of this process's CUDA device (device 0 on the CPU).
    at::Generator gen = type == "torch" ? at::detail::getDefaultCPUGenerator()
                                        : cuda::default_generators().at(device_.is_cuda() ? device_.index() : 0);
    at::Tensor state;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      state = gen.get_state().contiguous();
    }
    comm_->broadcast(state, 0);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
}

void Accelerator::loader_end(const void* loader) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(std::remove(active_.begin(), active_.end(), loader), active_.end());
}

at::Tensor Accelerator::broadcast(const at::Tensor& t, int from_process) {
  verify(CollectiveOp::broadcast, from_process, &t);
  return broadcast_tensor(t, from_process);
}

at::Tensor Accelerator::broadcast_tensor(const at::Tensor& t, int from_process) {
  if (from_process < 0 || from_process >= state_.world_size)
    throw std::invalid_argument("from_process " + std::to_string(from_process) + " outside 0.." +
                                std::to_string(state_.world_size - 1));
  at::Tensor r = t.detach().clone().contiguous();
  if (comm_) comm_->broadcast(r, from_process);
  return r;
}

at::Tensor Accelerator::pad_across_processes(const at::Tensor& t, int64_t dim, double pad_index, bool pad_first) {
  const int64_t nd = t.dim();
  // Debug mode checks even where this process has nothing to pad: another may, and would wait for it.
  verify(CollectiveOp::pad_across_processes, dim < 0 && dim >= -nd ? dim + nd : dim, &t);
  if (dim >= nd || dim < -nd) return t.detach().clone();  // as Accelerate: nothing to pad along
  if (dim < 0) dim += nd;
  at::Tensor sizes = gather_tensor(at::tensor({t.size(dim)}, at::kLong));
  const int64_t max_size = sizes.max().item<int64_t>();
  if (max_size == t.size(dim)) return t.detach().clone();
  auto shape = t.sizes().vec();
  shape[static_cast<size_t>(dim)] = max_size;
  at::Tensor out = at::full(shape, pad_index, t.options().requires_grad(false));
  out.narrow(dim, pad_first ? max_size - t.size(dim) : 0, t.size(dim)).copy_(t.detach());
  return out;
}

Accelerator::Split Accelerator::split_between_processes(int64_t n, bool apply_padding) const {
  if (n < 0) throw std::invalid_argument("n must be >= 0; got " + std::to_string(n));
  const int64_t p = state_.world_size, i = state_.rank;
  const int64_t per = n / p, extras = n % p;
  Split s;
  s.start = i * per + std::min(i, extras);
  s.count = per + (i < extras ? 1 : 0);
  s.padded_count = apply_padding ? per + (extras > 0 ? 1 : 0) : s.count;
  return s;
}

void Accelerator::main_process_first(bool local, bool entering) {
  // Accelerate's _goes_first: the others wait at a barrier on entry, the main one at the exit.
  const bool is_main = local ? state_.local_rank == 0 : state_.rank == 0;
  if (entering != is_main) wait_for_everyone();
}

namespace {
// The byte strings of `sizes` (int64, one per item) laid end to end in `data` (uint8).
std::vector<std::string> split_bytes(const at::Tensor& sizes, const at::Tensor& data) {
  std::vector<std::string> out;
  const int64_t* n = sizes.data_ptr<int64_t>();
  const char* d = reinterpret_cast<const char*>(data.data_ptr<uint8_t>());
  for (int64_t i = 0; i < sizes.size(0); d += n[i], ++i) out.emplace_back(d, static_cast<size_t>(n[i]));
  return out;
}
}  // namespace

// Accelerate's gather_object over byte strings: every process's items in rank order. Zero-size tensors
// never enter a collective: the counts travel first. With for_metrics, the item sizes go through
// gather_for_metrics' cut (drop_duplicates) to the real samples of a padded last batch; the items follow.
std::vector<std::string> Accelerator::gather_object(const std::vector<std::string>& items, bool for_metrics) {
  verify(for_metrics ? CollectiveOp::gather_object_for_metrics : CollectiveOp::gather_object, 0, nullptr);
  const int64_t count = static_cast<int64_t>(items.size());
  int64_t bytes = 0;
  for (const std::string& s : items) bytes += static_cast<int64_t>(s.size());
  at::Tensor totals = gather_tensor(at::tensor({count, bytes}, at::kLong).reshape({1, 2}), for_metrics).sum(0);
  const int64_t all_count = totals[0].item<int64_t>(), all_bytes = totals[1].item<int64_t>();
  if (all_count == 0) return {};
  at::Tensor sizes = at::empty({count}, at::kLong), data = at::empty({bytes}, at::kByte);
  int64_t* ps = sizes.data_ptr<int64_t>();
  uint8_t* pd = data.data_ptr<uint8_t>();
  for (const std::string& s : items) {
    *ps++ = static_cast<int64_t>(s.size());
    std::memcpy(pd, s.data(), s.size());
    pd += s.size();
  }
  at::Tensor all_sizes = for_metrics ? drop_duplicates(gather_tensor(sizes, true)) : gather_tensor(sizes);
  at::Tensor all_data = all_bytes > 0 ? gather_tensor(data, for_metrics) : at::empty({0}, at::kByte);
  return split_bytes(all_sizes, all_data);
}

// broadcast_object_list over byte strings: the count, then the sizes, so every process can receive the
// bytes; then the bytes in one buffer.
std::vector<std::string> Accelerator::broadcast_object(const std::vector<std::string>& mine, int from_process) {
  verify(CollectiveOp::broadcast_object, from_process, nullptr);
  const bool sender = state().rank == from_process;
  at::Tensor count = broadcast_tensor(at::tensor({static_cast<int64_t>(mine.size())}, at::kLong), from_process);
  at::Tensor sizes = at::zeros({count.item<int64_t>()}, at::kLong);
  if (sender)
    for (size_t i = 0; i < mine.size(); ++i) sizes.data_ptr<int64_t>()[i] = static_cast<int64_t>(mine[i].size());
  sizes = broadcast_tensor(sizes, from_process);
  const int64_t bytes = sizes.sum().item<int64_t>();
  at::Tensor data = at::empty({bytes}, at::kByte);
  if (sender) {
    uint8_t* pd = data.data_ptr<uint8_t>();
    for (const std::string& s : mine) pd = std::copy(s.begin(), s.end(), pd);
  }
  if (bytes > 0) data = broadcast_tensor(data, from_process);
  return split_bytes(sizes, data);
}

at::Tensor Accelerator::split_tensor_between_processes(const at::Tensor& x, bool apply_padding) const {
  if (x.dim() == 0) throw std::invalid_argument("the tensor needs a dim 0 to split");
  auto s = split_between_processes(x.size(0), apply_padding);
  at::Tensor part = x.narrow(0, s.start, s.count).clone();
  if (s.padded_count > s.count && x.size(0) > 0) {
    // Accelerate pads with the input's last element.
    std::vector<int64_t> reps(static_cast<size_t>(x.dim()), 1);
    reps[0] = s.padded_count - s.count;
    part = at::cat({part, x.narrow(0, x.size(0) - 1, 1).repeat(reps)});
  }
  return part;
}

void Accelerator::print(const std::string& text) const {
  if (state_.local_rank != 0) return;
  std::fputs(text.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

bool Accelerator::check_trigger() {
  at::Tensor flag = at::full({1}, trigger_ ? 1.0 : 0.0, at::kFloat);
  if (comm_) comm_->all_reduce(flag, ReduceOp::Sum);
  if (flag.item<float>() >= 1) {
    trigger_ = false;
    return true;
  }
  return false;
}

}  // namespace acc::core
