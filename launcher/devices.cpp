#include "devices.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "supervisor.hpp"

namespace acc::launcher {
namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// CUDA_VISIBLE_DEVICES narrows what a process sees: "" hides everything, "0,2" shows two, "-1" none.
int visible(int found, const std::map<std::string, std::string>& env) {
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it == env.end()) return found;
  int n = 0;
  std::stringstream ss(it->second);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    if (item[0] == '-') break;  // an invalid id ends the list, as CUDA does
    ++n;
  }
  return std::min(n, found);
}

}  // namespace

std::string self_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

Devices detect_devices(const std::map<std::string, std::string>& env) {
  Devices d;
  d.cuda_source = "none";
  if (DIR* dir = opendir("/proc/driver/nvidia/gpus")) {
    std::set<std::string> entries;
    while (dirent* e = readdir(dir))
      if (e->d_name[0] != '.') entries.insert(e->d_name);
    closedir(dir);
    for (const auto& e : entries) {
      std::string info = read_text("/proc/driver/nvidia/gpus/" + e + "/information");
      std::string model = "NVIDIA GPU";
      std::stringstream ss(info);
      for (std::string line; std::getline(ss, line);)
        if (line.rfind("Model:", 0) == 0) model = trim(line.substr(6));
      d.gpus.push_back(model);
    }
    if (!d.gpus.empty()) d.cuda_source = "/proc/driver/nvidia/gpus";
    std::string version = read_text("/proc/driver/nvidia/version");
    size_t k = version.find("Kernel Module");
    if (k != std::string::npos) {
      std::stringstream vs(version.substr(k + 13));
      vs >> d.driver;
    }
  }
  if (d.gpus.empty()) {
    // Containers often have the devices without the /proc entries.
    // Whatever goes wrong with nvidia-smi (not installed, fails, hangs past the timeout) means no GPUs found here:
    // only the lines it printed are read, not its exit status.
    std::stringstream out(run_capture({"nvidia-smi", "-L"}).out);
    for (std::string line; std::getline(out, line);) {
      std::string l = trim(line);
      if (l.rfind("GPU ", 0) != 0) continue;
      size_t colon = l.find(": "), paren = l.find(" (UUID");
      d.gpus.push_back(colon == std::string::npos
                           ? l
                           : l.substr(colon + 2, paren == std::string::npos ? std::string::npos : paren - colon - 2));
    }
    if (!d.gpus.empty()) d.cuda_source = "nvidia-smi";
  }
  d.cuda = visible(static_cast<int>(d.gpus.size()), env);

  std::ifstream cpu("/proc/cpuinfo");
  std::set<std::string> cores;
  std::string phys = "0";
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0 && d.cpu_model.empty()) d.cpu_model = trim(line.substr(line.find(':') + 1));
    if (line.rfind("physical id", 0) == 0) phys = trim(line.substr(line.find(':') + 1));
    if (line.rfind("core id", 0) == 0) cores.insert(phys + "/" + trim(line.substr(line.find(':') + 1)));
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  d.logical_cpus = n > 0 ? static_cast<int>(n) : 1;
  d.physical_cores = cores.empty() ? d.logical_cpus : static_cast<int>(cores.size());
  std::ifstream mem("/proc/meminfo");
  for (std::string line; std::getline(mem, line);)
    if (line.rfind("MemTotal:", 0) == 0) d.memory_gib = std::stod(line.substr(9)) / (1024.0 * 1024.0);
  return d;
}

LibaccInfo probe_libacc() {
  LibaccInfo info;
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("ACC_LIBACC"); e && *e) candidates.push_back(e);
  const std::string dir = self_dir();
  // Build tree: <build>/launcher/acc and <build>/src/libacc.so; installed: <prefix>/bin/acc and <prefix>/lib*/.
  for (const char* rel :
       {"/../src/libacc.so.1", "/../lib/libacc.so.1", "/../lib64/libacc.so.1", "/../lib/x86_64-linux-gnu/libacc.so.1",
        "/../lib/aarch64-linux-gnu/libacc.so.1", "/libacc.so.1"})
    candidates.push_back(dir + rel);
  candidates.push_back("libacc.so.1");  // LD_LIBRARY_PATH and the system's paths
  std::string tried;
  for (const auto& c : candidates) {
    if (c.find('/') != std::string::npos && access(c.c_str(), R_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + c;
      continue;
    }
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      tried += (tried.empty() ? "" : ", ") + c + " (" + dlerror() + ")";
      continue;
    }
    using Fn = const char* (*)();
    auto version = reinterpret_cast<Fn>(dlsym(h, "acc_version"));
    auto build = reinterpret_cast<Fn>(dlsym(h, "acc_build_info"));
    if (!version || !build) {
      tried += (tried.empty() ? "" : ", ") + c + " (not libacc: no acc_version)";
      continue;  // keep it loaded: harmless
    }
    info.found = true;
    info.version = version();
    info.build = build();
    Dl_info di{};
    if (dladdr(reinterpret_cast<void*>(version), &di) && di.dli_fname) {
      char real[PATH_MAX];
      info.path = realpath(di.dli_fname, real) ? real : di.dli_fname;
    } else {
      info.path = c;
    }
    return info;  // left loaded: acc exits soon, and unloading LibTorch is not worth the risk
  }
  info.why = "libacc.so.1 not found (tried " + tried + "; set ACC_LIBACC to its path)";
  return info;
}

}  // namespace acc::launcher
