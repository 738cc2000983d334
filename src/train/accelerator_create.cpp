// The Accelerator's creation: the settings, the device, the rendezvous and the process mesh, the states that
// loading code reads (ram-efficient loading, ZeRO-3 init), and the run record.
#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ios>
#include <map>
#include <mutex>

#include "cuda/plugin.hpp"
#include "runtime/affinity.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cuda.hpp"
#include "runtime/mesh.hpp"
#include "train/accelerator.hpp"
#include "util/errors.hpp"

namespace acc::core {

// Named, not anonymous: the core is compiled in unity units beside accelerator.cpp.
namespace creation {

// Accelerate's device choice: CUDA when it is usable and `cpu` is false, device cuda:<local rank>;
// otherwise the CPU. Returns the CUDA device index, or -1 for the CPU. The CUDA plugin is loaded here,
// first thing, before anything asks ATen about CUDA. Where it cannot load (no CUDA libraries) or sees
// no device, the process trains on the CPU without a word, as Accelerate does, unless the environment
// sets ACC_REQUIRE_CUDA=1: then that is an error that says why.
int pick_cuda_device(const config::AcceleratorSettings& c, const ProcessState& state,
                     const std::map<std::string, std::string>& env) {
  if (c.cpu) return -1;
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
    throw UnsupportedError("LOCAL_RANK " + std::to_string(state.local_rank) +
                           " trains on cuda:" + std::to_string(state.local_rank) + ", but only " + std::to_string(n) +
                           " CUDA device(s) are visible; start at most that many processes per machine, or "
                           "set cpu = true (ACCELERATE_USE_CPU=true) to train on the CPU");
  plugin->set_device(state.local_rank);  // torch.cuda.set_device, as Accelerate does
  return state.local_rank;
}

// One process group per process, as Accelerate's PartialState is shared: a second accelerator joins
// the live group instead of rendezvousing again on the same port.
std::shared_ptr<Comm> process_group(const ProcessState& state, std::chrono::milliseconds timeout, int cuda_device) {
  static std::mutex mu;
  static std::weak_ptr<Comm> live;
  static int live_device = -1;
  std::lock_guard<std::mutex> lock(mu);
  if (auto comm = live.lock()) {
    if (cuda_device != live_device)
      throw StateError("this process already has a process group for " +
                       (live_device >= 0 ? "cuda:" + std::to_string(live_device) : std::string("the CPU")) +
                       "; a second accelerator must use the same device");
    return comm;
  }
  try {
    auto comm = Comm::connect(state, timeout, cuda_device);
    live = comm;
    live_device = cuda_device;
    return comm;
  } catch (const std::exception& e) {
    throw DistributedError(e.what());
  }
}

// Settings the device rules out. init_process_group_kwargs.backend: the process group sends CPU tensors through Gloo
// and CUDA tensors through NCCL; "gloo" for a CUDA device (torch would run CUDA collectives through Gloo) and "nccl"
// without one (torch fails) are what that routing cannot be. rng_types "cuda": Accelerate's synchronize_rng_state reads
// torch.cuda.get_rng_state(), which fails without CUDA.
void check_device_settings(const config::Config& c, const config::AcceleratorSettings& s, int cuda_device) {
  if (s.init_process_group_kwargs.backend) {
    std::string b = *s.init_process_group_kwargs.backend;
    std::transform(b.begin(), b.end(), b.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    const char* key = config::AcceleratorSettings::InitProcessGroupKwargs::Key::backend;
    if ((b == "gloo" && cuda_device >= 0) || (b == "nccl" && cuda_device < 0))
      throw config::Error(std::string("'") + key + "' = \"" + b + "\" (from " + c.provenance(key).where +
                          "): this process runs on " +
                          (cuda_device >= 0 ? "a CUDA device, whose tensors libacc "
                                              "reduces through NCCL"
                                            : "the CPU, and NCCL needs CUDA") +
                          "; use " + (cuda_device >= 0 ? "\"nccl\"" : "\"gloo\"") + " or null");
  }
  const std::vector<std::string> rngs = s.rng_types.value_or(std::vector<std::string>{});
  if (std::find(rngs.begin(), rngs.end(), "cuda") != rngs.end() && cuda::default_generators().empty())
    throw config::Error("'rng_types' = " + c.get_json("rng_types") + " (from " + c.provenance("rng_types").where +
                        "): \"cuda\" synchronises the CUDA generator, and this process has no CUDA device; use "
                        "\"torch\" or \"generator\"");
}

}  // namespace creation

using creation::check_device_settings;
using creation::pick_cuda_device;
using creation::process_group;

std::shared_ptr<Accelerator> Accelerator::create(const char* config_json) {
  const auto env = config::current_environment();
  std::shared_ptr<Accelerator> a(new Accelerator());
  a->configure(config_json, env);
  const config::AcceleratorSettings& s = a->settings_;
  // The process mesh's sizes, checked as Accelerate checks a ParallelismConfig, before any rendezvous.
  const config::ParallelDims dims = config::parallel_dims(a->config_, a->state_.world_size, a->state_.local_world_size);
  // Settings that do nothing, as Accelerate / torch warn about them: once, on the main process.
  if (a->state_.rank == 0)
    for (const auto& w : config::setting_warnings(a->config_)) std::fprintf(stderr, "libacc: warning: %s\n", w.c_str());
  // enable_cpu_affinity (Accelerate's set_numa_affinity at AcceleratorState): this process onto its share of the cores.
  if (s.enable_cpu_affinity) {
    const std::vector<int> cores = pin_to_cpu_share(a->state_.local_rank, a->state_.local_world_size);
    if (s.debug) {
      std::string list;
      for (int core : cores) list += (list.empty() ? "" : ",") + std::to_string(core);
      std::fprintf(stderr, "libacc: assigning %zu CPU cores to process %d: %s\n", cores.size(), a->state_.local_rank,
                   list.c_str());
    }
  }
  const int cuda_device = pick_cuda_device(s, a->state_, env);
  if (s.seed) core::set_seed(static_cast<uint64_t>(*s.seed), false);
  check_device_settings(a->config_, s, cuda_device);
  a->device_ = cuda_device >= 0 ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device))
                                : c10::Device(c10::kCPU);
  a->device_name_ = a->device_.str();  // "cpu" or "cuda:<index>"
  a->profile_options_ = profile_options(a->config_, s.profile_kwargs, a->device_.is_cuda());
  if (a->state_.distributed()) a->join_mesh(cuda_device, dims);
  a->config_json_ = a->config_.to_json(/*with_provenance=*/true);
  a->set_mixed_precision(s.mixed_precision);
  a->sharding_ = config::sharding(a->config_);
  a->hold_loading_states();
  a->save_iteration_ = s.project_config.iteration;
  a->write_run_record(env);
  return a;
}

void Accelerator::configure(const char* config_json, const std::map<std::string, std::string>& env) {
  config_ = config::resolve_accelerator(config_json ? config_json : "", env);
  settings_ = config::accelerator_settings(config_);
  const config::AcceleratorSettings& s = settings_;
  // Valid keys for what libacc cannot do yet (FSDP, DeepSpeed, torch.compile, ...) fail here, never silently.
  if (auto why = config::unsupported_setting(config_)) throw UnsupportedError(*why);
  // Trackers: resolved now, as Accelerate's filter_trackers does; started by init_trackers (train/trackers.cpp).
  if (s.log_with) {
    try {
      log_with_ = tracking::resolve_log_with(*s.log_with, s.project_config.logging_dir.value_or(""));
    } catch (const std::invalid_argument& e) {
      throw config::Error(e.what());
    }
  }
  // The config unifies gradient_accumulation_steps and gradient_accumulation_plugin.num_steps.
  grad_.num_steps = s.gradient_accumulation_steps;
  grad_.sync_with_dataloader = s.gradient_accumulation_plugin.sync_with_dataloader;
  grad_.sync_each_batch = s.gradient_accumulation_plugin.sync_each_batch;
  state_ = ProcessState::from_environment(env);
}

void Accelerator::join_mesh(int cuda_device, const config::ParallelDims& dims) {
  const config::AcceleratorSettings& s = settings_;
  distributed_type_ = cuda_device >= 0 ? "MULTI_GPU" : "MULTI_CPU";
  // torch.distributed's default process-group timeout (_get_default_timeout: 10 minutes for NCCL, the GPUs'
  // backend, 30 otherwise), unless init_process_group_kwargs sets one. In milliseconds, what c10d counts in (the
  // schema keeps the value between 1 ms and a year).
  const double default_seconds = cuda_device >= 0 ? 600.0 : 1800.0;
  const auto timeout =
      std::chrono::milliseconds(std::llround(s.init_process_group_kwargs.timeout.value_or(default_seconds) * 1000));
  comm_ = process_group(state_, timeout, cuda_device);
  MeshSizes sizes;
  sizes.dp_replicate = static_cast<int>(dims.dp_replicate);
  sizes.dp_shard = static_cast<int>(dims.dp_shard);
  sizes.cp = static_cast<int>(dims.cp);
  sizes.tp = static_cast<int>(dims.tp);
  sizes.sp = static_cast<int>(dims.sp);
  sizes.pp = static_cast<int>(dims.pp);
  // libacc's own pipeline keys (parallel_dims checked them; prepare finds the blocks the split points name).
  const auto& pc = s.parallelism_config;
  pipeline_options_.schedule = pc.pp_schedule;
  pipeline_options_.microbatches = static_cast<int>(pc.pp_microbatches);
  pipeline_options_.stages_per_rank = static_cast<int>(pc.pp_stages_per_rank);
  pipeline_split_points_ = pc.pp_split_points;
  mesh_ = std::make_shared<ProcessMesh>(comm_, sizes);
}

void Accelerator::hold_loading_states() {
  const config::AcceleratorSettings& s = settings_;
  if (comm_ && state_.local_rank != 0 && s.use_fsdp && s.fsdp_plugin.cpu_ram_efficient_loading.value_or(false)) {
    hold_ram_efficient_loading(true);
    holds_ram_efficient_loading_ = true;
  }
  // deepspeed_plugin.zero3_init_flag as DeepSpeedPlugin reads it: null (and ACCELERATE_DEEPSPEED_ZERO3_INIT unset) is on
  // for stage 3; on beside another stage it is turned off with Accelerate's warning, and without DeepSpeed it does
  // nothing (said once, too). Held, as transformers holds the HfDeepSpeedConfig, where ZeRO-3 shards: a distributed job.
  using DS = config::AcceleratorSettings::DeepspeedPlugin;
  const bool stage3 = s.use_deepspeed && sharding_.stage == 3;
  const std::optional<bool> flag = s.deepspeed_plugin.zero3_init_flag;
  if (flag.value_or(stage3) && !stage3 && state_.rank == 0)
    std::fprintf(stderr, "libacc: warning: '%s' = true (from %s) %s; it is ignored\n", DS::Key::zero3_init_flag,
                 config_.provenance(DS::Key::zero3_init_flag).where.c_str(),
                 s.use_deepspeed ? "is only applicable for DeepSpeed ZeRO stage 3" : "needs DeepSpeed ZeRO stage 3");
  if (flag.value_or(stage3) && stage3 && comm_) {
    hold_zero3_init(true);
    holds_zero3_init_ = true;
  }
}

void Accelerator::write_run_record(const std::map<std::string, std::string>& env) const {
  // The run record: resolved config, provenance and build, next to the run's outputs (main process only).
  const config::AcceleratorSettings& s = settings_;
  const bool writer = state_.rank == 0 || (s.project_config.save_on_each_node && state_.local_rank == 0);
  if (!writer || !s.project_config.project_dir) return;
  try {
    config::write_run_record(config_, *s.project_config.project_dir, build_info().c_str(), env);
  } catch (const config::Error& e) {
    throw std::ios_base::failure(std::string("cannot write the run record: ") + e.what());
  }
}

}  // namespace acc::core
