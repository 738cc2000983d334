#include "train/profiler.hpp"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <sys/statvfs.h>

#include <acc/files.hpp>
#include <acc/json.hpp>

#include "train/accelerator.hpp"
#include "util/errors.hpp"
#include "util/options.hpp"

// Kineto's ConfigLoader, which LibTorch's installed headers leave out: the process-wide instance and stopThread(),
// the two functions libacc needs (profiler_exit_hook). Weak, so that a LibTorch without them (no Kineto) still loads
// libacc; the dynamic linker resolves them in libacc's own dependencies, also under RTLD_LOCAL (Python's ctypes).
namespace acc::core::kineto_abi {
void* config_loader_instance() __asm__("_ZN9libkineto12ConfigLoader8instanceEv") __attribute__((weak));
void config_loader_stop_thread(void* self) __asm__("_ZN9libkineto12ConfigLoader10stopThreadEv") __attribute__((weak));
}  // namespace acc::core::kineto_abi

namespace acc::core {

namespace kineto = torch::autograd::profiler;
namespace pimpl = torch::profiler::impl;
using Kwargs = config::AcceleratorSettings::ProfileKwargs;

namespace {

// Kineto's profiler is one per process: the running profile, if any (guarded by g_mutex).
std::mutex g_mutex;
Profiler* g_current = nullptr;

// Kineto's first prepare starts its ConfigLoader thread (polling /etc/libkineto.conf and the dynolog daemon every
// few seconds), which only ~ConfigLoader stops, in libtorch_cpu's __cxa_finalize. By then exit() has already
// destroyed function-local statics that thread uses (Config's factory registry, made by that same first prepare):
// a thread that runs after that (its first pass scheduled late on a busy machine, or a periodic wake) reads, and
// may increment, a reference count in freed memory, which glibc later reports as "malloc(): unsorted double linked
// list corrupted" (issue 36). Registered after that first prepare, this handler runs before those statics are
// destroyed and stops the thread while all it uses is alive. libacc's profiles are synchronous: they need nothing
// from it.
void profiler_exit_hook() {
  if (kineto_abi::config_loader_instance && kineto_abi::config_loader_stop_thread)
    kineto_abi::config_loader_stop_thread(kineto_abi::config_loader_instance());
}

void register_exit_hook() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(profiler_exit_hook); });
}

// A profile still running when the thread that began it ends (the thread returns, or the process exits on it)
// is stopped there by this thread_local's destructor, while LibTorch's thread-local profiler state still exists:
// made after enableProfiler touched that state, it is destroyed before it. Left to LibTorch's own destructors,
// the profile's state is released at exit after Kineto is gone (SIGSEGV in ~ProfilerStateBase).
struct ProfileThreadGuard {
  ~ProfileThreadGuard() {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_current && g_current->thread() == std::this_thread::get_id()) g_current->abandon();
  }
};

std::string origin(const config::Config& c, const char* key) { return " (" + c.provenance(key).where + ")"; }

ProfileSchedule read_schedule(const config::Config& c, const std::string& json) {
  const std::string what = std::string(Kwargs::Key::schedule_option) + origin(c, Kwargs::Key::schedule_option);
  // torch.profiler.schedule's keyword arguments: wait, warmup and active are required, as there.
  Options o(json.c_str(), what, {"wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait"});
  ProfileSchedule s;
  constexpr int64_t kMax = INT32_MAX;  // the cycle's length stays far from overflow
  auto get = [&](const char* key, std::optional<int64_t> fallback, int64_t min) {
    const int64_t v = o.get_int(key, fallback, min);
    if (v > kMax) throw OptionsError(what + ": '" + key + "' must be at most " + std::to_string(kMax));
    return v;
  };
  s.wait = get("wait", std::nullopt, 0);
  s.warmup = get("warmup", std::nullopt, 0);
  s.active = get("active", std::nullopt, 1);
  s.repeat = get("repeat", 0, 0);
  s.skip_first = get("skip_first", 0, 0);
  s.skip_first_wait = get("skip_first_wait", 0, 0);
  if (s.warmup == 0)  // torch.profiler.schedule's warning
    std::fprintf(stderr, "libacc: %s: Profiler won't be using warmup, this can skew profiler results\n", what.c_str());
  return s;
}

pimpl::ProfilerConfig kineto_config(const ProfileOptions& o) {
  // torch.profiler.profile's config(): the Kineto state with the five flags. Without Python, with_stack and
  // with_modules describe TorchScript code only (its source stack and module hierarchy): docs/configuration.md.
  return pimpl::ProfilerConfig(pimpl::ProfilerState::KINETO, o.record_shapes, o.profile_memory, o.with_stack,
                               o.with_flops, o.with_modules);
}

std::set<pimpl::ActivityType> kineto_activities(const ProfileOptions& o) {
  std::set<pimpl::ActivityType> a;
  if (o.cpu) a.insert(pimpl::ActivityType::CPU);
  if (o.cuda) a.insert(pimpl::ActivityType::CUDA);
  return a;
}

}  // namespace

ProfileSchedule::Action ProfileSchedule::at(int64_t step) const {
  // torch.profiler.schedule's schedule_fn, line for line.
  if (step < skip_first) return Action::None;
  step -= skip_first;
  if (skip_first_wait != 0) step += wait;
  const int64_t num_steps = wait + warmup + active;
  if (repeat > 0 && step / num_steps >= repeat) return Action::None;
  const int64_t mod_step = step % num_steps;
  if (mod_step < wait) return Action::None;
  if (mod_step < wait + warmup) return Action::Warmup;
  return mod_step < num_steps - 1 ? Action::Record : Action::RecordAndSave;
}

ProfileOptions profile_options(const config::Config& c, const Kwargs& kw, bool cuda_device) {
  ProfileOptions o;
  if (kw.activities) {
    // Accelerate's _get_profiler_activity: cpu and cuda, and the others only where such a device exists.
    const std::string key = Kwargs::Key::activities + origin(c, Kwargs::Key::activities);
    if (kw.activities->empty())
      throw config::Error(key + " is empty: name cpu and/or cuda (torch.profiler needs an activity)");
    o.cpu = false;
    for (const std::string& a : *kw.activities) {
      if (a == "cpu") {
        o.cpu = true;
      } else if (a == "cuda" && cuda_device) {
        o.cuda = true;
      } else if (a == "cuda") {
        throw UnsupportedError(key + ": \"cuda\" needs a CUDA device, and this process runs on the CPU");
      } else {
        throw UnsupportedError(key + ": \"" + a + "\" is not a device libacc runs on; this process profiles cpu" +
                               (cuda_device ? " and cuda" : ""));
      }
    }
  } else {
    o.cuda = cuda_device;  // torch's supported_activities(): the CPU, and CUDA where it is usable
  }
  if (!kw.schedule_option.is_null()) o.schedule = read_schedule(c, kw.schedule_option.json);
  o.record_shapes = kw.record_shapes;
  o.profile_memory = kw.profile_memory;
  o.with_stack = kw.with_stack;
  o.with_flops = kw.with_flops;
  o.with_modules = kw.with_modules;
  o.output_trace_dir = kw.output_trace_dir;
  if (o.output_trace_dir && o.output_trace_dir->empty())
    throw config::Error(std::string(Kwargs::Key::output_trace_dir) + origin(c, Kwargs::Key::output_trace_dir) +
                        " is empty: give a directory, or null for no trace file");
  return o;
}

config::Config profile_config(std::string_view profile_kwargs_json) {
  const char* where = "acc_profile_begin";
  try {  // a clear message for text that is not an object, before it is nested into one
    json::Document::object(profile_kwargs_json, std::string(where) + "'s profile_kwargs", json::kConfigLimits);
  } catch (const json::Error& e) {
    throw config::Error(e.what());
  }
  const std::string nested = "{\"profile_kwargs\": " + std::string(profile_kwargs_json) + "}";
  return config::resolve_accelerator(nested, {}, where);
}

Profiler::Profiler(ProfileOptions options) : options_(std::move(options)), thread_(std::this_thread::get_id()) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_current) throw StateError("a profile is already running in this process (acc_profile_end ends it)");
    g_current = this;
  }
  try {
    action_ = action_at(0);
    transit(Action::None, action_);  // torch's start()
    begin_step_range();
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mutex);
    abandon();
    throw;
  }
}

Profiler::~Profiler() {
  std::lock_guard<std::mutex> lock(g_mutex);
  abandon();
}

void Profiler::abandon() {
  if (!stopped_) {
    stopped_ = true;
    step_range_.reset();
    if (enabled_) {
      enabled_ = false;
      try {
        kineto::disableProfiler();
      } catch (...) {
      }
    }
  }
  if (g_current == this) g_current = nullptr;
}

ProfileSchedule::Action Profiler::action_at(int64_t step) const {
  // Without a schedule torch records every step (_default_schedule_fn).
  return options_.schedule ? options_.schedule->at(step) : Action::Record;
}

void Profiler::begin_step_range() {
  // The step markers torch adds when it has a schedule (record_steps).
  if (!options_.schedule) return;
  step_name_ = "ProfilerStep#" + std::to_string(step_num_);
  step_range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (step_range_->isActive()) step_range_->before(std::string_view(step_name_));
}

void Profiler::end_step_range() { step_range_.reset(); }  // RecordFunction's destructor ends the range

void Profiler::step() {
  end_step_range();
  const Action prev = action_;
  ++step_num_;
  action_ = action_at(step_num_);
  transit(prev, action_);
  begin_step_range();
}

std::unique_ptr<kineto::ProfilerResult> Profiler::stop() {
  end_step_range();
  stopped_ = true;
  auto release = [this] {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_current == this) g_current = nullptr;
  };
  try {
    transit(action_, std::nullopt);  // torch's exit actions
  } catch (...) {
    release();
    throw;
  }
  release();
  return std::move(last_);
}

void Profiler::prepare_trace() {
  try {
    kineto::prepareProfiler(kineto_config(options_), kineto_activities(options_));
  } catch (...) {
    register_exit_hook();  // the thread may have started all the same
    throw;
  }
  register_exit_hook();
}

void Profiler::start_trace() {
  kineto::enableProfiler(kineto_config(options_), kineto_activities(options_));
  enabled_ = true;
  thread_local ProfileThreadGuard guard;  // first made here, after enableProfiler's thread-local state
  (void)guard;
}

void Profiler::stop_trace() {
  enabled_ = false;
  last_ = kineto::disableProfiler();  // the cycle that ended replaces the one before (acc_events false)
}

void Profiler::transit(std::optional<Action> prev, std::optional<Action> current) {
  // torch.profiler.profile's action_map; on_trace_ready (_trace_ready) is Accelerate's export at the end of the
  // profile here, so a cycle that ends only keeps its result. The transitions torch warns about cannot come from
  // torch.profiler.schedule, which is the only schedule there is here.
  using A = Action;
  const A p = prev.value_or(A::None);
  if (!current) {  // exit
    if (p == A::Warmup) start_trace(), stop_trace();
    if (p == A::Record || p == A::RecordAndSave) stop_trace();
    return;
  }
  const A c = *current;
  switch (p) {
    case A::None:
      if (c == A::Warmup) prepare_trace();
      if (c == A::Record || c == A::RecordAndSave) prepare_trace(), start_trace();
      break;
    case A::Warmup:
      if (c == A::None) start_trace(), stop_trace();
      if (c == A::Record || c == A::RecordAndSave) start_trace();
      break;
    case A::Record:
      if (c == A::None || c == A::Warmup) stop_trace();
      break;
    case A::RecordAndSave:
      stop_trace();
      if (c == A::Warmup) prepare_trace();
      if (c == A::Record || c == A::RecordAndSave) prepare_trace(), start_trace();
      break;
  }
}

namespace {

// Whether `bytes`, with Kineto's name for the file at `at` (`size` bytes, quotes included), ends as Kineto ends a
// trace it wrote whole: "traceName": <that name>, then the closing brace. Kineto writes through an ofstream and
// never checks it: a write that fails (a full disk) stops the file short of this ending, silently.
bool ends_as_written(const std::string& bytes, size_t at, size_t size) {
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  size_t i = at + size;
  while (i < bytes.size() && space(bytes[i])) ++i;
  if (i == bytes.size() || bytes[i] != '}') return false;
  for (++i; i < bytes.size(); ++i)
    if (!space(bytes[i])) return false;
  size_t j = at;
  while (j > 0 && space(bytes[j - 1])) --j;
  if (j == 0 || bytes[j - 1] != ':') return false;
  --j;
  while (j > 0 && space(bytes[j - 1])) --j;
  const std::string key = "\"traceName\"";
  return j >= key.size() && bytes.compare(j - key.size(), key.size(), key) == 0;
}

// The error for a trace Kineto left short: ENOSPC when the disk has no room left (the usual cause), EIO otherwise.
config::FileError cut_short(const std::string& path, const std::string& dir, size_t got) {
  struct statvfs fs{};
  const bool full = ::statvfs(dir.c_str(), &fs) == 0 && fs.f_bavail == 0;
  const int err = full ? ENOSPC : EIO;
  return config::FileError("cannot write", path,
                           "LibTorch's trace writer stopped after " + std::to_string(got) +
                               " bytes: " + std::strerror(err) + "; the previous trace, if any, is kept",
                           err);
}

}  // namespace

std::string save_chrome_trace(kineto::ProfilerResult& result, const std::string& dir, int rank) {
  // Accelerate's PROFILE_PATTERN_NAME, "profile_{suffix}.json" with the process index.
  const char* what = "profile_kwargs.output_trace_dir";
  config::make_directories(dir);
  const std::string name = "profile_" + std::to_string(rank) + ".json";
  const std::string path = config::child_path(dir, name, what);
  // Kineto writes where it is told, reporting no failure, and on a failure may leave its own temporary file
  // ("<name>.tmp") behind. So it writes into a staging folder of libacc's beside the trace (on the same disk, locked
  // while in use, a dead writer's emptied: config::StagingFolder), which goes with all in it; the trace is checked
  // whole and only then replaces the file, atomically (write_file_atomic): on any failure the previous trace stays
  // and nothing new is left. Every error names the trace file.
  std::string bytes, written_as;
  try {
    config::StagingFolder staged(config::child_path(dir, "." + name + ".acc-staging", what));
    written_as = staged.path() + "/" + name;
    result.save(written_as);
    bytes = config::read_file(written_as);
  } catch (const config::FileError& e) {
    throw config::FileError("cannot write", path, e.what(), e.code().value());
  } catch (const std::exception& e) {
    throw config::FileError("cannot write", path, e.what(), EIO);
  }
  // The trace names the file it was written to ("traceName", as Kineto writes it: unescaped): the final name, quoted
  // as JSON, instead.
  const std::string kineto_name = "\"" + written_as + "\"";
  const size_t at = bytes.rfind(kineto_name);
  if (at == std::string::npos || !ends_as_written(bytes, at, kineto_name.size()))
    throw cut_short(path, dir, bytes.size());
  bytes.replace(at, kineto_name.size(), json::quote(path));
  config::write_file_atomic(path, bytes);  // FileError naming path; the previous file stays
  return path;
}

// The Accelerator's profile calls: Accelerate's `with accelerator.profile(handler) as prof:` ... prof.step() ... exit.
void Accelerator::profile_begin(const char* profile_kwargs_json) {
  if (profiler_) throw StateError("profile_begin: this accelerator's profile is running (profile_end ends it)");
  ProfileOptions options = profile_options_;
  if (profile_kwargs_json && *profile_kwargs_json) {
    const config::Config c = profile_config(profile_kwargs_json);
    options = profile_options(c, config::accelerator_settings(c).profile_kwargs, device_.is_cuda());
  }
  profiler_ = std::make_unique<Profiler>(std::move(options));
}

namespace {
void check_profiler(const std::unique_ptr<Profiler>& p, const char* call) {
  if (!p) throw StateError(std::string(call) + ": no profile is running (profile_begin starts one)");
  if (p->thread() != std::this_thread::get_id())
    throw StateError(std::string(call) + ": the profile runs on the thread that began it; call from that thread");
}
}  // namespace

void Accelerator::profile_step() {
  check_profiler(profiler_, "profile_step");
  profiler_->step();
}

void Accelerator::profile_cancel() { profiler_.reset(); }

std::string Accelerator::profile_end() {
  check_profiler(profiler_, "profile_end");
  std::unique_ptr<Profiler> p = std::move(profiler_);
  auto result = p->stop();
  const auto& dir = p->options().output_trace_dir;
  if (!dir) return "";
  std::string written;
  std::exception_ptr failed;
  try {
    if (result) written = save_chrome_trace(*result, *dir, state_.rank);
    else
      std::fprintf(stderr,
                   "libacc: rank %d: profile_end: the schedule recorded no step in %lld steps; no trace written to "
                   "%s\n",
                   state_.rank, static_cast<long long>(p->step_num() + 1), dir->c_str());
  } catch (...) {
    failed = std::current_exception();  // the others still get their barrier: an error here, not a hang there
  }
  wait_for_everyone();  // as Accelerate's profile() ends
  if (failed) std::rethrow_exception(failed);
  return written;
}

}  // namespace acc::core
