#include "train/accelerator.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "cuda/plugin.hpp"
#include "runtime/cuda.hpp"
#include "util/errors.hpp"

namespace acc {

namespace {

void seed_everything(uint64_t seed, bool cuda) {
  // Accelerate's set_seed: every generator this process draws from. libacc has only torch's.
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
  if (!cuda) return;  // asking ATen about CUDA before the plugin loaded would disable CUDA for good
  for (int i = 0; i < at::detail::getCUDAHooks().deviceCount(); ++i) {
    auto g = at::detail::getCUDAHooks().getDefaultGenerator(static_cast<c10::DeviceIndex>(i));
    std::lock_guard<std::mutex> glock(g.mutex());
    g.set_current_seed(seed);
  }
}

// Accelerate's device choice: CUDA when it is usable and `cpu` is false, device cuda:<local rank>;
// otherwise the CPU. Returns the CUDA device index, or -1 for the CPU. The CUDA plugin is loaded here,
// first thing, before anything asks ATen about CUDA. Where it cannot load (no CUDA libraries) or sees
// no device, the process trains on the CPU without a word, as Accelerate does, unless the environment
// sets ACC_REQUIRE_CUDA=1: then that is an error that says why.
int pick_cuda_device(const config::Config& c, const ProcessState& state,
                     const std::map<std::string, std::string>& env) {
  if (c.get_bool("cpu")) return -1;
  auto req = env.find("ACC_REQUIRE_CUDA");
  const bool required = req != env.end() && !req->second.empty() && req->second != "0";
  std::string why;
  const cuda::PluginV1* plugin = cuda::plugin(&why);
  const int n = plugin ? plugin->device_count(&why) : 0;
  if (n == 0) {
    if (required) throw UnsupportedError("ACC_REQUIRE_CUDA is set, but CUDA is not usable: " + why);
    return -1;
  }
  if (state.local_rank >= n)
    throw UnsupportedError("LOCAL_RANK " + std::to_string(state.local_rank) + " trains on cuda:" +
                           std::to_string(state.local_rank) + ", but only " + std::to_string(n) +
                           " CUDA device(s) are visible; start at most that many processes per machine, or "
                           "set cpu = true (ACCELERATE_USE_CPU=true) to train on the CPU");
  plugin->set_device(state.local_rank);  // torch.cuda.set_device, as Accelerate does
  return state.local_rank;
}

}  // namespace

std::shared_ptr<Accelerator> Accelerator::create(const char* config_json) {
  auto env = config::current_environment();
  std::shared_ptr<Accelerator> a(new Accelerator());
  a->config_ = config::resolve_accelerator(config_json ? config_json : "", env);
  const config::Config& c = a->config_;
  if (c.get_string("mixed_precision") != "no")
    throw UnsupportedError("mixed_precision \"" + c.get_string("mixed_precision") +
                           "\" is not supported yet by this libacc build; use \"no\"");
  if (c.get_int("gradient_accumulation_steps") != 1)
    throw UnsupportedError("gradient_accumulation_steps > 1 is not supported yet by this libacc build");
  a->state_ = ProcessState::from_environment(env);
  const int cuda_device = pick_cuda_device(c, a->state_, env);
  if (c.is_set("seed")) seed_everything(static_cast<uint64_t>(c.get_int("seed")), cuda_device >= 0);
  a->device_ = cuda_device >= 0 ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device))
                                : c10::Device(c10::kCPU);
  a->device_name_ = a->device_.str();  // "cpu" or "cuda:<index>"
  if (a->state_.distributed()) {
    a->distributed_type_ = cuda_device >= 0 ? "MULTI_GPU" : "MULTI_CPU";
    // torch.distributed's default process-group timeout, unless init_process_group_kwargs sets one.
    const char* key = "init_process_group_kwargs.timeout";
    auto timeout = std::chrono::seconds(c.is_set(key) ? c.get_int(key) : 1800);
    try {
      a->comm_ = Comm::connect(a->state_, timeout, cuda_device);
    } catch (const std::exception& e) {
      throw DistributedError(e.what());
    }
  }
  a->config_json_ = c.to_json(/*with_provenance=*/true);
  return a;
}

Accelerator::~Accelerator() = default;

ForwardResult ModelSlot::forward(const at::Tensor& input, const at::Tensor& targets) {
  if (!owner) return model->forward(input, targets);
  // As DDP does: inputs follow the model to its device, buffers follow rank 0.
  const c10::Device dev = owner->device();
  if (owner->distributed() && model->training() &&
      owner->config().get_bool("ddp_kwargs.broadcast_buffers")) {
    std::vector<at::Tensor> buffers;
    for (auto& [name, b] : model->named_buffers()) buffers.push_back(b);
    owner->broadcast_from_main(buffers);
  }
  return model->forward(input.device() == dev ? input : input.to(dev),
                        !targets.defined() || targets.device() == dev ? targets : targets.to(dev));
}

void SchedulerSlot::step() {
  // Accelerate's AcceleratedScheduler: each process saw only 1/num_processes of the batches, so
  // without split_batches the schedule advances num_processes steps per call.
  int64_t n = 1;
  if (owner && !owner->config().get_bool("dataloader_config.split_batches")) n = owner->state().world_size;
  steps += n;
  apply();
}

void Accelerator::prepare(const std::shared_ptr<ModelSlot>& model, const std::shared_ptr<OptimizerSlot>& opt,
                          const std::shared_ptr<SchedulerSlot>& sched,
                          const std::shared_ptr<DataLoader>& loader) {
  std::lock_guard<std::mutex> lock(mu_);
  // Check everything before changing anything: a refused prepare leaves all objects as they were.
  if (model && model->owner) throw StateError("the model is already prepared");
  if (opt && opt->owner) throw StateError("the optimizer is already prepared");
  if (sched && sched->owner) throw StateError("the scheduler is already prepared");
  if (loader && loader->prepared()) throw StateError("the data loader is already prepared");
  if (opt && !opt->model->owner && opt->model != model)
    throw StateError("the optimizer's model is not prepared: prepare it in the same call or before");
  if (opt && opt->model->owner && opt->model->owner.get() != this)
    throw StateError("the optimizer's model was prepared by another accelerator");
  if (sched && !sched->opt->owner && sched->opt != opt)
    throw StateError("the scheduler's optimizer is not prepared: prepare it in the same call or before");
  ShardSpec spec;
  spec.num_processes = state_.world_size;
  spec.process_index = state_.rank;
  spec.split_batches = config_.get_bool("dataloader_config.split_batches");
  spec.even_batches = config_.get_bool("dataloader_config.even_batches");
  auto self = shared_from_this();
  // Validates split_batches divisibility first; the rest of dataloader_config picks how it shards.
  if (loader) loader->prepare(LoaderPrepare::from_config(config_, spec, comm_), device_, self);

  if (model) {
    model->model->to(device_);
    if (comm_) {
      std::vector<std::string> names;
      std::vector<at::Tensor> params, state;
      for (auto& [n, p] : model->model->named_parameters()) {
        names.push_back(n);
        params.push_back(p);
      }
      for (auto& [n, t] : model->model->state()) state.push_back(t);
      broadcast_from_rank0(*comm_, state);
      DdpOptions d;
      d.bucket_cap_mb = config_.get_double("ddp_kwargs.bucket_cap_mb");
      d.broadcast_buffers = config_.get_bool("ddp_kwargs.broadcast_buffers");
      d.find_unused_parameters = config_.get_bool("ddp_kwargs.find_unused_parameters");
      model->reducer = std::make_unique<GradientReducer>(comm_, names, params, d);
    }
    model->owner = self;
    models_.push_back(model);
  }
  if (opt) opt->owner = self;
  if (sched) {
    sched->owner = self;
    sched->apply();
  }
  if (loader) loaders_.push_back(loader);
}

void Accelerator::backward(const at::Tensor& loss) {
  if (!loss.defined() || !loss.requires_grad())
    throw std::invalid_argument("the loss has no autograd graph: pass the loss acc_model_forward returned");
  if (loss.numel() != 1)
    throw std::invalid_argument("the loss must have one element; got shape " + c10::str(loss.sizes()));
  std::vector<std::shared_ptr<ModelSlot>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : models_)
      if (auto m = w.lock(); m && m->reducer) live.push_back(m);
  }
  for (auto& m : live) m->reducer->prepare_for_backward(/*sync=*/true);
  loss.backward();
  for (auto& m : live) m->reducer->finalize_backward();
}

at::Tensor Accelerator::gather(const at::Tensor& t) {
  if (!comm_) return t.dim() == 0 ? t.reshape({1}).clone() : t.clone();
  return comm_->all_gather_cat(t.detach());
}

const DataLoader* Accelerator::active_loader() const {
  // Only data loaders report, each with itself, and each leaves the list before it is destroyed (also
  // the loaders skip_first_batches makes, which prepare never sees).
  return active_.empty() ? nullptr : static_cast<const DataLoader*>(active_.back());
}

at::Tensor Accelerator::gather_for_metrics(const at::Tensor& t) {
  at::Tensor data = gather(t);
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
  std::lock_guard<std::mutex> lock(mu_);
  active_.push_back(loader);
}

void Accelerator::loader_end(const void* loader) {
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(std::remove(active_.begin(), active_.end(), loader), active_.end());
}

}  // namespace acc
