// `acc launch`: resolve the launch configuration (defaults < config file < flags), build the torchrun/Accelerate
// environment of every local process, and supervise them.
#pragma once

#include <string>
#include <vector>

namespace acc::launcher {

// args: everything after `acc launch`. Returns the exit status of `acc`.
int launch_main(const std::vector<std::string>& args);

}  // namespace acc::launcher
