// The checkpoint writers' collective step: each process runs a phase, then all agree on its success.
#pragma once
#include <functional>

namespace acc::core {

class Accelerator;

// Runs `phase` here, then agrees with the other processes of `acc` (none when null or not distributed): if any
// failed, every process throws (this one its own error, the others a DistributedError naming `what`), so one
// failure fails all of them and none waits forever.
void agreed(Accelerator* acc, const char* what, const std::function<void()>& phase);

}  // namespace acc::core
