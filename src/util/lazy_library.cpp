#include "util/lazy_library.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace acc::util {

namespace {

std::string library_path(const char* file, const char* env) {
  if (const char* p = std::getenv(env); p && *p) return p;
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&library_path), &info) || !info.dli_fname) return file;
  const std::string self = info.dli_fname;
  const auto slash = self.rfind('/');
  return slash == std::string::npos ? std::string(file) : self.substr(0, slash + 1) + file;
}

}  // namespace

std::string load_beside_libacc(const char* file, const char* env, const char* what, const char* const* names,
                               void** const* slots, size_t n) {
  const std::string path = library_path(file, env);
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return std::string("libacc's ") + what + " library could not be loaded (" + (e ? e : path) +
           "): it is built beside libacc.so as " + file + " (ninja -C build src/" + file +
           "; a release bundle ships it in lib/), or name it with " + env;
  }
  for (size_t i = 0; i < n; ++i) {
    *slots[i] = dlsym(h, names[i]);
    if (!*slots[i]) return path + " is not libacc's " + what + " library: it has no " + names[i];
  }
  return "";
}

}  // namespace acc::util
