// Experiment trackers: init_trackers, log, end_training (the work is in src/train/trackers.cpp and
// src/tracking/).
#include "guard.hpp"
#include "handles.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;

extern "C" {

acc_status acc_init_trackers(acc_accelerator* acc, const char* project_name, const char* config_json,
                             const char* init_kwargs_json) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->init_trackers(need(project_name, "project_name"), config_json ? config_json : "",
                             init_kwargs_json ? init_kwargs_json : "");
  });
}

acc_status acc_log(acc_accelerator* acc, const char* values_json, int64_t step) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    auto values = acc::tracking::parse_values(need(values_json, "values_json"));
    acc->impl->log(values, step < 0 ? std::nullopt : std::optional<int64_t>(step));
  });
}

acc_status acc_end_training(acc_accelerator* acc) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->end_training();
  });
}

}  // extern "C"
