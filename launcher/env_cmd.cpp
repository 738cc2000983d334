// `acc env`: what a bug report needs, as `accelerate env` prints it: versions, build, platform, devices, and the
// default config resolved.
#include <sys/utsname.h>

#include <cstdio>

#include "acc/config.hpp"
#include "cli.hpp"
#include "commands.hpp"
#include "devices.hpp"

#ifndef ACC_VERSION
#define ACC_VERSION "unknown"
#endif

namespace acc::launcher {

int env_main(const std::vector<std::string>& args) {
  cli::Option help, file;
  help.name = "--help";
  help.shorts = {"-h"};
  help.help = "show this help and exit";
  help.group = "options";
  file.name = "--config_file";
  file.takes_value = true;
  file.metavar = "FILE";
  file.help = "the config file to show (default: the one acc launch reads)";
  file.group = "options";
  std::vector<cli::Option> opts = {help, file};
  cli::Parsed p;
  try {
    p = cli::parse(opts, args, false);
    if (!p.positionals.empty()) throw cli::UsageError("unexpected argument '" + p.positionals.front() + "'");
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "acc env: error: %s\n", e.what());
    return 2;
  }
  if (p.options.count("--help")) {
    std::fputs(cli::help("acc env [--config_file FILE]",
                         "Prints versions (acc, libacc, LibTorch), the build, the platform, CPUs, memory, GPUs, the\n"
                         "distributed environment variables set, and the default config, for bug reports. libacc is\n"
                         "found beside acc, in LD_LIBRARY_PATH, or at $ACC_LIBACC; acc env works without it.",
                         opts)
                   .c_str(),
               stdout);
    return 0;
  }
  auto env = config::current_environment();
  std::printf("\nCopy-and-paste the text below in your GitHub issue\n\n");
  std::printf("- `acc` version: %s\n", ACC_VERSION);
  std::printf("- `acc` location: %s/acc\n", self_dir().c_str());
  LibaccInfo lib = probe_libacc();
  if (lib.found) {
    std::printf("- libacc version: %s\n", lib.version.c_str());
    std::printf("- libacc location: %s\n", lib.path.c_str());
    std::printf("- libacc build: %s\n", lib.build.c_str());
  } else {
    std::printf("- libacc: not found (%s)\n", lib.why.c_str());
  }
  utsname u{};
  if (uname(&u) == 0) std::printf("- Platform: %s-%s-%s\n", u.sysname, u.release, u.machine);
  Devices d = detect_devices(env);
  std::printf("- CPU: %s (%d logical, %d physical cores)\n", d.cpu_model.empty() ? "unknown" : d.cpu_model.c_str(),
              d.logical_cpus, d.physical_cores);
  std::printf("- System RAM: %.2f GB\n", d.memory_gib);
  if (d.gpus.empty()) {
    std::printf("- GPUs: none found\n");
  } else {
    std::string names;
    for (size_t i = 0; i < d.gpus.size(); ++i) names += (i ? ", " : "") + d.gpus[i];
    std::printf("- GPUs: %zu (%s), %d visible; found with %s%s\n", d.gpus.size(), names.c_str(), d.cuda,
                d.cuda_source.c_str(), d.driver.empty() ? "" : (", driver " + d.driver).c_str());
  }
  bool any = false;
  for (const auto& [k, v] : env) {
    static const char* const kPrefixes[] = {
        "ACCELERATE_",     "ACC_",  "FSDP_",      "MASTER_",       "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS", "GLOO_", "NCCL_",      "TORCHELASTIC_", "HF_HOME",
        "WORLD_SIZE",      "RANK",  "LOCAL_RANK", "SLURM_PROCID",  "OMPI_COMM_WORLD_RANK"};
    bool keep = false;
    for (const char* pre : kPrefixes)
      if (k.rfind(pre, 0) == 0) keep = true;
    if (!keep) continue;
    if (!any) std::printf("- Environment:\n");
    any = true;
    std::printf("\t- %s=%s\n", k.c_str(), v.c_str());
  }
  std::optional<std::string> path;
  if (p.options.count("--config_file")) path = p.options["--config_file"].value;
  else path = config::find_default_config_file(env);
  std::printf(p.options.count("--config_file") ? "- `acc` config passed:" : "- `acc` default config:");
  if (!path) {
    std::printf("\n\tNot found\n");
    return 0;
  }
  std::printf(" %s\n", path->c_str());
  try {
    config::Config cfg = config::resolve_launch(path, {}, false);
    for (const auto& k : cfg.keys())
      if (cfg.provenance(k).origin != config::Origin::Default)
        std::printf("\t- %s: %s\n", k.c_str(), cfg.get_json(k).c_str());
  } catch (const config::Error& e) {
    std::printf("\tinvalid: %s\n", e.what());
  }
  return 0;
}

}  // namespace acc::launcher
