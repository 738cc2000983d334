// Accelerate's profile() with ProfileKwargs: torch.profiler's profile over LibTorch's Kineto profiler, with
// torch.profiler.schedule's state machine (torch/profiler/profiler.py: ProfilerAction and the action map) driven by
// step(). libacc's own phases are ranges (RecordFunction user scopes) that cost a check when nothing profiles.
#pragma once
#include <ATen/record_function.h>
#include <acc/config.hpp>
#include <acc/config_views.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace torch::autograd::profiler {
struct ProfilerResult;
}

namespace acc::core {

// torch.profiler.schedule(wait, warmup, active, repeat, skip_first, skip_first_wait).
struct ProfileSchedule {
  int64_t wait = 0, warmup = 0, active = 1, repeat = 0, skip_first = 0, skip_first_wait = 0;
  // torch's ProfilerAction (DEVICE_STOPPED is the Python profiler's own reaction to a CUPTI overflow: not here).
  enum class Action { None, Warmup, Record, RecordAndSave };
  Action at(int64_t step) const;  // torch's schedule_fn
};

// ProfileKwargs, checked: what a profile does.
struct ProfileOptions {
  bool cpu = true, cuda = false;            // activities
  std::optional<ProfileSchedule> schedule;  // none: record everything, no step markers
  bool record_shapes = false, profile_memory = false, with_stack = false, with_flops = false, with_modules = false;
  std::optional<std::string> output_trace_dir;
};

// A config's profile_kwargs (`kwargs`, read from `c`) as a profile's options; cuda_device: this process trains on a
// CUDA device. Throws config::Error for a bad schedule_option and UnsupportedError for an activity this machine
// lacks, each naming the key and where its value came from.
ProfileOptions profile_options(const config::Config& c, const config::AcceleratorSettings::ProfileKwargs& kwargs,
                               bool cuda_device);
// ProfileKwargs given as a JSON object (acc_profile_begin's) as a config of their own, read by the schema: keys, types
// and values are checked as in the accelerator's config, and keys left out take ProfileKwargs' defaults.
config::Config profile_config(std::string_view profile_kwargs_json);

// One running profile (torch.profiler.profile between start() and stop()). One per process: Kineto is.
class Profiler {
 public:
  // torch's profile.start(): the schedule's first action, and ProfilerStep#0 with a schedule. StateError while
  // another profile runs in this process.
  explicit Profiler(ProfileOptions options);
  ~Profiler();  // stops recording (nothing is kept) if stop() was not called
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // torch's profile.step().
  void step();
  // torch's profile.stop(): the last recorded cycle (null when the schedule recorded none).
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> stop();

  // Ends the profile without a result (what the destructor does); for the thread that ends with its profile still
  // running. The caller holds the profiler's process-wide lock (profiler.cpp).
  void abandon();

  const ProfileOptions& options() const { return options_; }
  int64_t step_num() const { return step_num_; }
  std::thread::id thread() const { return thread_; }  // Kineto profiles the thread that started it

 private:
  using Action = ProfileSchedule::Action;
  Action action_at(int64_t step) const;
  void transit(std::optional<Action> prev, std::optional<Action> current);  // torch's action_map
  void prepare_trace();
  void start_trace();
  void stop_trace();
  void begin_step_range();
  void end_step_range();

  ProfileOptions options_;
  std::thread::id thread_;
  int64_t step_num_ = 0;
  Action action_;
  bool enabled_ = false;  // between start_trace and stop_trace
  bool stopped_ = false;
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> last_;  // the last cycle stop_trace ended
  std::string step_name_;                       // ProfilerStep#N: the range keeps a view of it
  std::unique_ptr<at::RecordFunction> step_range_;
};

// Writes a profile's result as the Chrome trace `<dir>/profile_<rank>.json` (dir created), atomically. Returns the
// path.
std::string save_chrome_trace(torch::autograd::profiler::ProfilerResult& result, const std::string& dir, int rank);

}  // namespace acc::core
