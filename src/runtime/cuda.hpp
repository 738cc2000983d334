// Finding and loading the CUDA plugin (libacc_cuda.so, src/cuda/plugin.hpp) at run time.
#pragma once
#include <string>
#include <vector>

namespace at {
struct Generator;  // ATen/core/Generator.h; forward-declared so that build_info.cpp needs no LibTorch
}

namespace acc::cuda {

struct PluginV1;

// The CUDA plugin, loaded once per process on first call: libacc_cuda.so next to the library holding
// this code (or the file ACC_CUDA_PLUGIN names), dlopen'ed RTLD_NOW | RTLD_LOCAL. Null when this build
// has no plugin, the file is missing, or it cannot load (on CPU-only machines: libtorch_cuda's CUDA
// libraries are absent); *why then says which. Never throws.
const PluginV1* plugin(std::string* why);

// Whether this libacc has its CUDA plugin: built with it, and the file is there carrying the plugin marker (a
// CPU release bundle leaves it out). Whether the plugin loads is the machine's (CUDA libraries, a driver).
bool plugin_present();

// The default generator of every CUDA device (torch.cuda's default_generators); empty without the plugin or
// a device. Loads the plugin first: ATen's CUDA hooks asked before it would be pinned to the CPU stub for good.
std::vector<at::Generator> default_generators();

}  // namespace acc::cuda
