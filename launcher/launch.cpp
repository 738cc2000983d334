#include "launch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include "acc/config.hpp"
#include "cli.hpp"
#include "net.hpp"
#include "supervisor.hpp"

namespace acc::launcher {
namespace {

constexpr const char* kMe = "acc launch";
constexpr int kDefaultPort = 29500;

std::vector<cli::Option> options() {
  using cli::Option;
  std::vector<Option> o;
  auto flag = [&](std::string name, std::string group, std::string help, std::string key = "",
                  std::string value = "true", std::vector<std::string> shorts = {}) {
    Option x;
    x.name = std::move(name);
    x.group = std::move(group);
    x.help = std::move(help);
    x.config_key = std::move(key);
    x.flag_value = std::move(value);
    x.shorts = std::move(shorts);
    o.push_back(std::move(x));
  };
  auto opt = [&](std::string name, std::string metavar, std::string group, std::string help, std::string key = "") {
    Option x;
    x.name = std::move(name);
    x.takes_value = true;
    x.metavar = std::move(metavar);
    x.group = std::move(group);
    x.help = std::move(help);
    x.config_key = std::move(key);
    o.push_back(std::move(x));
  };
  const std::string gen = "General", hw = "Hardware", res = "Resources", dist = "Distributed", sup = "Supervision";
  flag("--help", gen, "show this help and exit", "", "true", {"-h"});
  opt("--config_file", "FILE", gen, "launch config (YAML or JSON); default: see docs/configuration.md");
  flag("--quiet", gen, "print only errors and the failure report", "", "true", {"-q"});
  flag("--debug", gen, "check collective shapes across ranks (ACCELERATE_DEBUG_MODE)", "debug");
  flag("--module", gen, "run the program as `python3 -m PROGRAM`", "", "true", {"-m"});
  flag("--no_python", gen, "run a .py program directly instead of through python3");
  flag("--cpu", hw, "train on the CPU (ACCELERATE_USE_CPU)", "use_cpu");
  flag("--multi_gpu", hw, "distributed_type MULTI_GPU", "distributed_type", "MULTI_GPU");
  opt("--mixed_precision", "{no,fp16,bf16,fp8}", res, "mixed precision mode", "mixed_precision");
  opt("--num_processes", "N", res, "processes in total (default 1)", "num_processes");
  opt("--num_machines", "N", res, "machines in total (default 1)", "num_machines");
  opt("--num_cpu_threads_per_process", "N", res, "OMP_NUM_THREADS of every process");
  flag("--enable_cpu_affinity", res, "pin processes to CPU cores (ACCELERATE_CPU_AFFINITY)", "enable_cpu_affinity");
  opt("--dynamo_backend", "BACKEND", res, "torch.compile backend (ACCELERATE_DYNAMO_BACKEND)",
      "dynamo_config.dynamo_backend");
  opt("--dynamo_mode", "MODE", res, "torch.compile mode", "dynamo_config.dynamo_mode");
  flag("--dynamo_use_fullgraph", res, "compile whole graphs", "dynamo_config.dynamo_use_fullgraph");
  flag("--dynamo_use_dynamic", res, "trace with dynamic shapes", "dynamo_config.dynamo_use_dynamic");
  flag("--dynamo_use_regional_compilation", res, "compile repeated blocks once",
       "dynamo_config.dynamo_use_regional_compilation");
  opt("--gpu_ids", "IDS", dist, "comma-separated device ids, or all (CUDA_VISIBLE_DEVICES)", "gpu_ids");
  flag("--same_network", dist, "all machines are on one local network", "same_network");
  opt("--machine_rank", "R", dist, "rank of this machine (default 0)", "machine_rank");
  opt("--main_process_ip", "IP", dist, "address of machine 0 (MASTER_ADDR; default 127.0.0.1)", "main_process_ip");
  opt("--main_process_port", "PORT", dist, "rendezvous port (MASTER_PORT; default 29500; 0: a free port)",
      "main_process_port");
  opt("--rdzv_backend", "{static,c10d,etcd,etcd-v2}", dist, "rendezvous method (acc launch uses static)",
      "rdzv_backend");
  flag("--downcast_bf16", dist, "XLA: with bf16, also downcast float64 tensors", "downcast_bf16");
  opt("--term_timeout", "SECONDS", sup, "grace between SIGTERM and SIGKILL when stopping processes (default 5)");
  opt("--monitor_interval", "SECONDS", sup, "how often the processes are checked (default 0.1)");

  // Accelerate's paradigm flags, and one flag per key of the paradigm sections of the config, named as
  // `accelerate launch` names them (the key's name, `fp8_` + name in fp8_config).
  const std::string par = "Paradigm (one of --cpu, --multi_gpu, --use_deepspeed, --use_fsdp, --use_megatron_lm)";
  flag("--use_deepspeed", par, "distributed_type DEEPSPEED (ACCELERATE_USE_DEEPSPEED)", "distributed_type", "DEEPSPEED");
  flag("--use_fsdp", par, "distributed_type FSDP (ACCELERATE_USE_FSDP)", "distributed_type", "FSDP");
  flag("--use_megatron_lm", par, "distributed_type MEGATRON_LM", "distributed_type", "MEGATRON_LM");
  const std::pair<const char*, const char*> sections[] = {{"deepspeed_config", "DeepSpeed (with --use_deepspeed)"},
                                                          {"fsdp_config", "FSDP (with --use_fsdp)"},
                                                          {"fp8_config", "FP8 (with --mixed_precision fp8)"},
                                                          {"megatron_lm_config", "Megatron-LM (with --use_megatron_lm)"},
                                                          {"parallelism_config", "ParallelismConfig"}};
  for (const auto& k : config::schema_keys(config::SchemaKind::Launch)) {
    for (auto [section, group] : sections) {
      const std::string prefix = std::string(section) + ".";
      if (k.path.rfind(prefix, 0) != 0) continue;
      std::string name = k.path.substr(prefix.size());
      if (std::string(section) == "fp8_config" && name.rfind("fp8_", 0) != 0) name = "fp8_" + name;
      std::string help = k.help;
      if (!k.choices.empty()) {
        help += " (";
        for (size_t i = 0; i < k.choices.size(); ++i) help += (i ? "|" : "") + k.choices[i];
        help += ")";
      }
      if (name == "fp8_use_autocast_during_eval") {  // a store-true flag in accelerate launch
        flag("--" + name, group, help, k.path);
        continue;
      }
      std::string metavar = !k.choices.empty()                 ? "NAME"
                            : k.type.rfind("bool[3]", 0) == 0    ? "B,B,B"
                            : k.type.rfind("bool", 0) == 0       ? "BOOL"
                            : k.type.rfind("int", 0) == 0        ? "N"
                            : k.type.rfind("number", 0) == 0     ? "X"
                                                                 : "VALUE";
      opt("--" + name, metavar, group, help, k.path);
    }
  }
  return o;
}

const char* kDescription =
    "Starts PROGRAM in --num_processes local processes with the torchrun/Accelerate environment (RANK,\n"
    "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ACCELERATE_*), and watches them: if one fails, the others\n"
    "are stopped and acc exits with its status. Values come from the defaults, then the config file, then these\n"
    "flags. Options may be spelled with '_' or '-'. A PROGRAM ending in .py runs under python3.";

[[noreturn]] void usage_error(const std::string& msg) { throw cli::UsageError(msg); }

struct Resolved {
  std::string path;
  int error = 0;  // errno when not executable
  std::string why;
};

Resolved resolve_program(const std::string& name, const std::string& path_env) {
  auto check = [](const std::string& p) -> Resolved {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) return {p, errno, std::strerror(errno)};
    if (S_ISDIR(st.st_mode)) return {p, EISDIR, "is a directory"};
    if (access(p.c_str(), X_OK) != 0) return {p, EACCES, "permission denied (not executable)"};
    return {p, 0, ""};
  };
  if (name.find('/') != std::string::npos) return check(name);
  Resolved last{name, ENOENT, "not found in PATH"};
  size_t start = 0;
  for (;;) {
    size_t colon = path_env.find(':', start);
    std::string dir = path_env.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    std::string candidate = dir.empty() ? std::string(".") : dir;  // an empty PATH entry is the current directory
    candidate += '/';
    candidate += name;
    Resolved r = check(candidate);
    if (r.error == 0) return r;
    if (r.error == EACCES) last = r;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return last;
}

double positive_number(const cli::Parsed& p, const std::string& name, double def) {
  auto it = p.options.find(name);
  if (it == p.options.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.value.c_str(), &end);
  if (it->second.value.empty() || *end != '\0' || !(v > 0) || v > 3600)
    usage_error(it->second.as_typed + " must be a number of seconds in (0, 3600]; got '" + it->second.value + "'");
  return v;
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

}  // namespace

int launch_main(const std::vector<std::string>& args) {
  const std::vector<cli::Option> opts = options();
  const std::string usage = "acc launch [options] PROGRAM [ARGS...]";
  cli::Parsed p;
  try {
    p = cli::parse(opts, args, true);
    if (p.options.count("--help")) {
      std::fputs(cli::help(usage, kDescription, opts).c_str(), stdout);
      return 0;
    }
    if (p.positionals.empty()) usage_error("missing the PROGRAM to launch");
    if (p.options.count("--module") && p.options.count("--no_python"))
      usage_error("--module and --no_python cannot be used together");
    std::vector<std::string> paradigms;
    for (const char* f : {"--cpu", "--multi_gpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm"})
      if (p.options.count(f)) paradigms.push_back(f);
    if (paradigms.size() > 1)
      usage_error("only one of --cpu, --multi_gpu, --use_deepspeed, --use_fsdp, --use_megatron_lm may be given; got " +
                  paradigms[0] + " and " + paradigms[1]);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\nusage: %s\nRun 'acc launch --help' for the options.\n", kMe, e.what(),
                 usage.c_str());
    return 2;
  }
  const bool quiet = p.options.count("--quiet") > 0;
  auto env = config::current_environment();

  config::Config cfg;
  SuperviseOptions sopt;
  int threads = 0;
  try {
    std::optional<std::string> file;
    if (auto it = p.options.find("--config_file"); it != p.options.end()) file = it->second.value;
    else file = config::find_default_config_file(env);
    std::vector<config::Flag> flags;
    for (const auto& o : opts) {
      auto it = p.options.find(o.name);
      if (it == p.options.end() || o.config_key.empty()) continue;
      flags.push_back({o.config_key, o.takes_value ? it->second.value : o.flag_value, it->second.as_typed});
    }
    cfg = config::resolve_launch(file, flags);
    if (cfg.get_string("compute_environment") != "LOCAL_MACHINE")
      throw config::Error("compute_environment " + cfg.get_string("compute_environment") + " (" +
                          cfg.provenance("compute_environment").where +
                          ") is not supported by acc launch; it runs LOCAL_MACHINE jobs only");
    if (cfg.get_bool("tpu_use_cluster"))
      throw config::Error("tpu_use_cluster (" + cfg.provenance("tpu_use_cluster").where +
                          ") is not supported by acc launch");
    if (auto it = p.options.find("--num_cpu_threads_per_process"); it != p.options.end()) {
      char* end = nullptr;
      long v = std::strtol(it->second.value.c_str(), &end, 10);
      if (it->second.value.empty() || *end != '\0' || v < 1 || v > 100000)
        usage_error(it->second.as_typed + " must be an integer >= 1; got '" + it->second.value + "'");
      threads = static_cast<int>(v);
    }
    sopt.term_timeout = positive_number(p, "--term_timeout", 5.0);
    sopt.monitor_interval = positive_number(p, "--monitor_interval", 0.1);
  } catch (const config::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  }

  const int64_t world = cfg.get_int("num_processes");
  const int64_t machines = cfg.get_int("num_machines");
  const int64_t machine_rank = cfg.get_int("machine_rank");
  const int64_t nproc = world / machines;
  std::string master_addr = cfg.is_set("main_process_ip") ? cfg.get_string("main_process_ip") : "127.0.0.1";
  if (machines > 1 && !cfg.is_set("main_process_ip")) {
    std::fprintf(stderr, "%s: error: num_machines is %lld: give the address of machine 0 (--main_process_ip)\n", kMe,
                 static_cast<long long>(machines));
    return 2;
  }
  int port = cfg.is_set("main_process_port") ? static_cast<int>(cfg.get_int("main_process_port")) : kDefaultPort;
  try {
    if (port == 0) {
      if (machines > 1) {
        std::fprintf(stderr, "%s: error: main_process_port 0 (a free port) works on one machine only; give every "
                             "machine the same fixed port\n", kMe);
        return 2;
      }
      port = free_port();
    } else if ((machines == 1 || machine_rank == 0) && port_in_use(port)) {
      if (machines > 1) {
        std::fprintf(stderr, "%s: error: port %d (%s) is in use on this machine; choose another main_process_port\n",
                     kMe, port, cfg.provenance("main_process_port").where.c_str());
        return 1;
      }
      int other = free_port();
      if (!quiet)
        std::fprintf(stderr, "%s: port %d is in use; using free port %d instead (pass --main_process_port to choose)\n",
                     kMe, port, other);
      port = other;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 1;
  }

  // The command.
  std::vector<std::string> cmd;
  const std::string& program = p.positionals.front();
  if (p.options.count("--module")) cmd = {"python3", "-m"};
  else if (!p.options.count("--no_python") && ends_with(program, ".py")) cmd = {"python3"};
  cmd.insert(cmd.end(), p.positionals.begin(), p.positionals.end());
  const std::string path_env = env.count("PATH") ? env["PATH"] : "/usr/local/bin:/usr/bin:/bin";
  Resolved exe = resolve_program(cmd.front(), path_env);
  if (exe.error) {
    std::fprintf(stderr, "%s: error: cannot execute '%s': %s\n", kMe, cmd.front().c_str(), exe.why.c_str());
    return exe.error == ENOENT ? 127 : 126;
  }

  // The environment every process shares.
  std::map<std::string, std::string> base = env;
  for (auto& [k, v] : config::launch_environment(cfg)) base[k] = v;
  base["MASTER_ADDR"] = master_addr;
  base["MASTER_PORT"] = std::to_string(port);
  if (threads > 0) {
    base["OMP_NUM_THREADS"] = std::to_string(threads);
  } else if (!base.count("OMP_NUM_THREADS") && nproc > 1) {
    base["OMP_NUM_THREADS"] = "1";
    if (!quiet)
      std::fprintf(stderr, "%s: setting OMP_NUM_THREADS=1 for each process so that %lld processes do not overload "
                           "the CPU; set OMP_NUM_THREADS or --num_cpu_threads_per_process to tune it\n",
                   kMe, static_cast<long long>(nproc));
  }
  base["WORLD_SIZE"] = std::to_string(world);
  base["LOCAL_WORLD_SIZE"] = std::to_string(nproc);
  base["GROUP_RANK"] = std::to_string(machine_rank);
  base["GROUP_WORLD_SIZE"] = std::to_string(machines);
  base["ROLE_NAME"] = "default";
  base["ROLE_WORLD_SIZE"] = std::to_string(world);
  base["TORCHELASTIC_RESTART_COUNT"] = "0";
  base["TORCHELASTIC_MAX_RESTARTS"] = "0";

  std::vector<Worker> workers;
  for (int64_t local = 0; local < nproc; ++local) {
    const int64_t rank = machine_rank * nproc + local;
    std::map<std::string, std::string> e = base;
    e["RANK"] = std::to_string(rank);
    e["LOCAL_RANK"] = std::to_string(local);
    e["ROLE_RANK"] = std::to_string(rank);
    Worker w;
    w.rank = static_cast<int>(rank);
    w.local_rank = static_cast<int>(local);
    w.path = exe.path;
    w.argv = cmd;
    for (auto& [k, v] : e) w.env.push_back(k + "=" + v);
    workers.push_back(std::move(w));
  }
  for (const auto& a : cmd) sopt.label += (sopt.label.empty() ? "" : " ") + a;
  sopt.quiet = quiet;
  return supervise(workers, sopt);
}

}  // namespace acc::launcher
