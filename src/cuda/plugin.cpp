// libacc_cuda.so: the CUDA half of libacc, loaded by runtime/cuda.cpp with dlopen. See plugin.hpp.
// Compiled with USE_C10D_NCCL against the wheel's CUDA headers; linked against libtorch_cuda and
// libc10_cuda with --no-as-needed, so loading this library registers ATen's CUDA hooks and kernels.
#include "cuda/plugin.hpp"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
// nccl2 came with LibTorch 2.15; earlier releases (the 2.11 of GPU images, say) have only ProcessGroupNCCL.
#if __has_include(<torch/csrc/distributed/c10d/nccl2/ProcessGroupNCCL.hpp>)
#include <torch/csrc/distributed/c10d/nccl2/ProcessGroupNCCL.hpp>
#define ACC_HAS_NCCL2 1
#endif

#include <cstdlib>
#include <cstring>

namespace {

int device_count(std::string* why) {
  try {
    // libtorch_cuda registered ATen's CUDA hooks when it loaded, unless something asked ATen about
    // CUDA before that and fixed the hooks to the CPU stub: then CUDA tensors cannot be made here.
    if (!at::detail::getCUDAHooks().isBuilt()) {
      if (why) *why = "ATen's CUDA hooks were initialized before libacc_cuda.so was loaded";
      return 0;
    }
    int n = c10::cuda::device_count();  // 0, without throwing, when there is no driver or device
    if (n == 0 && why) *why = "no CUDA device is visible (driver missing, no GPU, or CUDA_VISIBLE_DEVICES)";
    return n;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
  } catch (...) {
    if (why) *why = "unknown error while counting CUDA devices";
  }
  return 0;
}

void set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  // As torch.distributed does in this release: "nccl" is the nccl2 implementation unless
  // TORCH_DIST_USE_NCCL2=0 asks for the legacy ProcessGroupNCCL. nccl2 creates its communicator
  // when the ProcessGroup binds it to a device (setBackend after setBoundDeviceId).
#ifdef ACC_HAS_NCCL2
  const char* use_nccl2 = std::getenv("TORCH_DIST_USE_NCCL2");
  if (!use_nccl2 || std::strcmp(use_nccl2, "0") != 0)
    return c10::make_intrusive<c10d::nccl2::ProcessGroupNCCL>(store, rank, size, opts);
#endif
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
}

std::string nccl_version() { return "NCCL " + c10d::getNcclVersion(); }

int capability(int index) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
  return prop->major * 10 + prop->minor;
}

const acc::cuda::PluginV1 kPlugin = {
    acc::cuda::kPluginAbi, sizeof(acc::cuda::PluginV1),
    TORCH_VERSION,         &device_count,
    &set_device,           &make_nccl,
    &nccl_version,         &capability,
};

}  // namespace

// What runtime/cuda.cpp looks for in the file before loading it (plugin.hpp). Kept, though nothing refers to it.
extern "C" __attribute__((used)) const char acc_cuda_plugin_marker[] = ACC_CUDA_PLUGIN_MARKER "1;";
static_assert(acc::cuda::kPluginAbi == 1, "update the marker's ABI number");

extern "C" __attribute__((visibility("default"))) const acc::cuda::PluginV1* acc_cuda_plugin_v1() { return &kPlugin; }
