#include "runtime/cuda.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>

#include <ATen/detail/CUDAHooksInterface.h>

#include "acc/files.hpp"
#include "cuda/plugin.hpp"

namespace acc::cuda {

namespace {

struct Loaded {
  const PluginV1* plugin = nullptr;
  std::string why;
};

std::string plugin_path() {
  if (const char* p = std::getenv("ACC_CUDA_PLUGIN"); p && *p) return p;
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&plugin), &info) || !info.dli_fname) return kPluginFile;
  std::string self = info.dli_fname;
  auto slash = self.rfind('/');
  return slash == std::string::npos ? std::string(kPluginFile) : self.substr(0, slash + 1) + kPluginFile;
}

// Whether the file holds the plugin marker for this ABI (plugin.hpp). Read, never loaded: a foreign library's
// constructors would run on dlopen. The marker is assembled here, so that libacc itself does not carry it.
bool carries_marker(const std::string& path) {
  std::string bytes;
  try {
    bytes = config::read_file(path, size_t{256} << 20);
  } catch (const std::ios_base::failure&) {
    return false;
  }
  return bytes.find(std::string(kPluginMarker) + std::to_string(kPluginAbi) + ";") != std::string::npos;
}

// Why there is no plugin file to load at `path`; empty when there is one.
std::string why_absent(const std::string& path) {
#ifndef ACC_CUDA_PLUGIN_BUILT
  if (!std::getenv("ACC_CUDA_PLUGIN"))
    return "this libacc was built without its CUDA plugin (meson option cuda, or no CUDA headers)";
#endif
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return "no CUDA plugin at " + path;
  if (!carries_marker(path)) {
    return path + " is not a libacc CUDA plugin of ABI " + std::to_string(kPluginAbi) +
           " (it lacks the plugin marker); it was not loaded";
  }
  return {};
}

Loaded load() {
  Loaded r;
  const std::string path = plugin_path();
  r.why = why_absent(path);
  if (!r.why.empty()) return r;
  // Loading maps libtorch_cuda and its CUDA libraries; on a machine without them this fails cleanly
  // (nothing ran: constructors run only once every dependency is found).
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    r.why = "cannot load " + path + ": " + (e ? e : "unknown dlopen error");
    return r;
  }
  // From here on the plugin stays loaded even when refused: unloading LibTorch libraries is unsafe.
  auto entry = reinterpret_cast<EntryFn>(dlsym(h, kEntrySymbol));
  const PluginV1* p = entry ? entry() : nullptr;
  if (!p) {
    r.why = path + " has no " + kEntrySymbol;
  } else if (p->abi != kPluginAbi || p->size != sizeof(PluginV1)) {
    r.why = path + " is from another libacc build (plugin ABI " + std::to_string(p->abi) + ", want " +
            std::to_string(kPluginAbi) + ")";
  } else if (std::string(p->torch_version) != TORCH_VERSION) {
    r.why = path + " was built against LibTorch " + p->torch_version + ", libacc against " TORCH_VERSION;
  } else {
    r.plugin = p;
  }
  return r;
}

}  // namespace

const PluginV1* plugin(std::string* why) {
  static std::once_flag once;
  static Loaded loaded;
  try {
    std::call_once(once, [] { loaded = load(); });
  } catch (...) {
    if (why) *why = "loading the CUDA plugin failed";
    return nullptr;
  }
  if (!loaded.plugin && why) *why = loaded.why;
  return loaded.plugin;
}

bool plugin_present() {
  try {
    return why_absent(plugin_path()).empty();
  } catch (...) {
    return false;
  }
}

std::vector<at::Generator> default_generators() {
  std::vector<at::Generator> out;
  std::string why;
  if (!plugin(&why)) return out;
  auto& hooks = at::detail::getCUDAHooks();
  for (int i = 0; i < hooks.deviceCount(); ++i)
    out.push_back(hooks.getDefaultGenerator(static_cast<c10::DeviceIndex>(i)));
  return out;
}

}  // namespace acc::cuda
