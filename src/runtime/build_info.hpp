// Build facts as JSON (libacc and LibTorch versions, C++ ABI, compiler, CUDA plugin, git revision):
// acc_build_info's text, and what the run record stores.
#pragma once
#include <string>

namespace acc::core {

const std::string& build_info();

}  // namespace acc::core
