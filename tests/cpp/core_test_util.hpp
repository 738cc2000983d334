// Helpers shared by the C++ unit tests split out of test_core.cpp (test_safetensors, test_c_abi, test_ddp,
// test_sharded_strategy): a per-process scratch folder and a one-process group.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/comm.hpp"

namespace acc::core {

inline std::filesystem::path temp_dir() {
  std::filesystem::path p = std::filesystem::temp_directory_path() / ("acc-core-" + std::to_string(::getpid()));
  std::filesystem::create_directories(p);
  return p;
}

// A one-process group (the TCPStore server picks a free port): enough to run a strategy's whole path, hooks included.
inline std::shared_ptr<Comm> solo_group() {
  ProcessState solo;
  solo.master_port = 0;
  return Comm::connect(solo, std::chrono::seconds(30));
}

}  // namespace acc::core
