// The internal interface between libacc.so and its CUDA plugin, libacc_cuda.so (src/cuda/plugin.cpp).
//
// libacc links only libtorch_cpu and libc10, so it loads and runs on machines without any CUDA library.
// The plugin links libtorch_cuda and libc10_cuda (whose load registers ATen's CUDA hooks, kernels and
// allocator) and compiles against ProcessGroupNCCL.hpp. libacc dlopens it next to itself, when the
// caller did not ask for the CPU (runtime/cuda.cpp); on a CPU-only machine the dlopen fails because
// libtorch_cuda's CUDA libraries are absent, and libacc stays on the CPU.
//
// This boundary is internal, not an ABI: both sides are built by one compiler, in one build, against
// the same LibTorch headers, so C++ objects (intrusive_ptr, std::string, exceptions) cross it. The
// loader still checks kPluginAbi, the struct size and the LibTorch version before it uses anything,
// so a stale plugin from another build is refused with a message instead of crashing. ACC_CUDA_PLUGIN can name
// another file (docs/security.md: whoever sets the environment is trusted, as with LD_PRELOAD), but only one that
// carries the plugin marker is loaded.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace acc::cuda {

inline constexpr uint32_t kPluginAbi = 1;
// The plugin carries the bytes kPluginMarker followed by its ABI and ';' ("...abi=1;"), and libacc looks for
// them in the file before dlopen: a library that is not a plugin never gets its constructors run.
#define ACC_CUDA_PLUGIN_MARKER "acc-cuda-plugin:abi="
inline constexpr char kPluginMarker[] = ACC_CUDA_PLUGIN_MARKER;

struct PluginV1 {
  uint32_t abi;               // kPluginAbi
  uint32_t size;              // sizeof(PluginV1)
  const char* torch_version;  // TORCH_VERSION the plugin was compiled against
  // Number of CUDA devices that can be used now; 0, with the reason in *why, when there is no driver,
  // no device, or ATen's CUDA hooks were fixed to the CPU stub before the plugin loaded. Never throws.
  int (*device_count)(std::string* why);
  // Makes `index` the current CUDA device of the calling thread (torch.cuda.set_device). Throws c10::Error.
  void (*set_device)(int index);
  // A ProcessGroupNCCL for CUDA tensors: communicators are created on the first collective, on the
  // device the tensors live on. Throws c10::Error.
  c10::intrusive_ptr<c10d::Backend> (*make_nccl)(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout);
  // "NCCL 2.30.7" style: the NCCL version libtorch_cuda was built with.
  std::string (*nccl_version)();
  // Compute capability of device `index` as major * 10 + minor (89 for Ada, 90 for Hopper). Throws.
  int (*capability)(int index);
};

// The plugin's one exported symbol (see plugin.map).
using EntryFn = const PluginV1* (*)();
inline constexpr const char* kEntrySymbol = "acc_cuda_plugin_v1";
inline constexpr const char* kPluginFile = "libacc_cuda.so";

}  // namespace acc::cuda
