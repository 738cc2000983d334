// Profiling (acc.h: acc_profile_begin, acc_profile_step, acc_profile_end): train/profiler.hpp does the work.
#include "guard.hpp"
#include "handles.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;

extern "C" {

acc_status acc_profile_begin(acc_accelerator* acc, const char* profile_kwargs_json) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->profile_begin(profile_kwargs_json);
  });
}

acc_status acc_profile_step(acc_accelerator* acc) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->profile_step();
  });
}

acc_status acc_profile_end(acc_accelerator* acc) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->profile_end();
  });
}

}  // extern "C"
