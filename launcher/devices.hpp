// What this machine has, found without LibTorch: CUDA GPUs (the NVIDIA driver's /proc entries, else nvidia-smi),
// CPU cores and memory. For `acc config default` and `acc env`.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace acc::launcher {

struct Devices {
  int cuda = 0;                    // usable CUDA devices (CUDA_VISIBLE_DEVICES applied)
  std::vector<std::string> gpus;   // their names
  std::string cuda_source;         // how they were found ("/proc/driver/nvidia", "nvidia-smi", "none")
  std::string driver;              // NVIDIA driver version, if known
  int logical_cpus = 0, physical_cores = 0;
  std::string cpu_model;
  double memory_gib = 0;
};

Devices detect_devices(const std::map<std::string, std::string>& env);

// libacc, when it can be found: dlopen'ed only to read acc_version() and acc_build_info(); nothing else runs.
struct LibaccInfo {
  bool found = false;
  std::string path;     // the library loaded
  std::string version;  // acc_version()
  std::string build;    // acc_build_info() JSON
  std::string why;      // when not found: where acc looked and what failed
};
LibaccInfo probe_libacc();

// The directory of the running acc binary (/proc/self/exe), for finding things installed beside it.
std::string self_dir();

}  // namespace acc::launcher
