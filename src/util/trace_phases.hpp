// The names of libacc's phases in a profiler trace (train/profiler.hpp, docs/configuration.md "Profiling"): each
// phase runs inside a RecordFunction user scope of its name, which costs one check of the thread's callbacks when
// nothing profiles (RECORD_USER_SCOPE).
#pragma once
#include <ATen/record_function.h>

namespace acc::core {

inline constexpr const char* kPhaseData = "acc::data";                      // a loader's next batch
inline constexpr const char* kPhaseForward = "acc::forward";                // a prepared model's forward
inline constexpr const char* kPhaseBackward = "acc::backward";              // backward (DDP's buckets start inside)
inline constexpr const char* kPhaseGradientSync = "acc::gradient_sync";     // the strategy's end of backward
inline constexpr const char* kPhaseOptimizerStep = "acc::optimizer_step";   // a prepared optimizer's step

}  // namespace acc::core
