#include "launch.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "acc/config.hpp"
#include "acc/files.hpp"
#include "agent.hpp"
#include "net.hpp"

namespace acc::launcher {
namespace {

constexpr const char* kMe = "acc launch";
constexpr int kDefaultPort = 29500;

[[noreturn]] void usage_error(const std::string& msg) { throw cli::UsageError(msg); }

// "mixed precision mode [mixed_precision; default "no"]": the help of a key, from the schema.
std::string key_help(const config::KeyInfo& k, const std::string& help) {
  std::string h = help.empty() ? k.help : help;
  std::string choices;
  if (!k.choices.empty() && help.empty()) {
    for (size_t i = 0; i < k.choices.size(); ++i) choices += (i ? "|" : "") + k.choices[i];
    h += " (" + choices + ")";
  }
  h += " [" + k.path;
  if (k.default_json != "null") h += "; default " + k.default_json;
  return h + "]";
}

struct Resolved {
  std::string path;
  int error = 0;
  std::string why;
};

Resolved resolve_program(const std::string& name, const std::string& path_env) {
  auto check = [](const std::string& p) -> Resolved {
    struct stat st{};
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

// What the numeric options accept; the parser (CLI11's validators) refuses anything else, naming the option.
const cli::Number kSeconds{0, 3600, false, true, "seconds"};
const cli::Number kRestarts{0, 1000000, true, false, ""};
const cli::Number kThreads{1, 100000, true, false, ""};
const cli::Number kTimeout{0, std::numeric_limits<double>::max(), false, true, "seconds"};  // --rdzv_conf's

// A numeric option's value (checked by the parser), or `def` when it is not given.
double number_option(const cli::Parsed& p, const std::string& name, double def) {
  auto it = p.options.find(name);
  return it == p.options.end() ? def : it->second.number;
}

// torchrun's --tee: "3" for every local rank, or "0:3,1:1" per local rank (0 none, 1 stdout, 2 stderr, 3 both).
std::vector<int> parse_tee(const std::string& spec, const std::string& typed, int nproc) {
  std::vector<int> out(static_cast<size_t>(nproc), 0);
  auto level = [&](const std::string& s) {
    if (s.size() != 1 || s[0] < '0' || s[0] > '3')
      usage_error(typed +
                  " takes 0 (nothing), 1 (stdout), 2 (stderr) or 3 (both), for every local rank or as "
                  "LOCAL_RANK:N,...; got '" +
                  spec + "'");
    return s[0] - '0';
  };
  if (spec.find(':') == std::string::npos) {
    std::fill(out.begin(), out.end(), level(spec));
    return out;
  }
  size_t start = 0;
  for (;;) {
    size_t c = spec.find(',', start);
    std::string item = spec.substr(start, c == std::string::npos ? std::string::npos : c - start);
    size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0) usage_error(typed + ": '" + item + "' is not LOCAL_RANK:N");
    const std::string rank_text = item.substr(0, colon);
    char* end = nullptr;
    long r = std::strtol(rank_text.c_str(), &end, 10);
    if (*end != '\0' || r < 0) usage_error(typed + ": '" + item + "' is not LOCAL_RANK:N");
    int lv = level(item.substr(colon + 1));
    if (r < nproc) out[static_cast<size_t>(r)] = lv;
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

// --rdzv_conf "join_timeout=60,heartbeat_timeout=10": what acc launch reads of torchrun's rendezvous settings
// (join_timeout; its `timeout` alias), and its own heartbeat_timeout. Other keys are accepted and ignored.
void parse_rdzv_conf(const std::string& conf, double* join_timeout, double* heartbeat_timeout) {
  size_t start = 0;
  while (start < conf.size()) {
    size_t c = conf.find(',', start);
    std::string item = conf.substr(start, c == std::string::npos ? std::string::npos : c - start);
    size_t eq = item.find('=');
    if (eq == std::string::npos) usage_error("--rdzv_conf: '" + item + "' is not KEY=VALUE");
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "join_timeout" || k == "timeout" || k == "heartbeat_timeout") {
      const auto t = cli::number(v, kTimeout);
      if (!t) usage_error("--rdzv_conf: " + k + " must be " + cli::describe(kTimeout) + "; got '" + v + "'");
      *(k == "heartbeat_timeout" ? heartbeat_timeout : join_timeout) = *t;
    }
    if (c == std::string::npos) break;
    start = c + 1;
  }
}

// Physical cores (psutil.cpu_count(logical=False)), as Accelerate uses for CPU training.
int physical_cores() {
  std::ifstream f("/proc/cpuinfo");
  std::set<std::string> cores;
  std::string line, phys = "0";
  while (std::getline(f, line)) {
    if (line.rfind("physical id", 0) == 0) phys = line.substr(line.find(':') + 1);
    if (line.rfind("core id", 0) == 0) cores.insert(phys + "/" + line.substr(line.find(':') + 1));
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string timestamp() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

const char* kDescription =
    "Starts PROGRAM in --num_processes processes (over --num_machines machines) with the torchrun/Accelerate\n"
    "environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ACCELERATE_*), and watches them: if one\n"
    "fails, the others are stopped, and acc prints which rank failed, how, and its last lines of output; with\n"
    "--max_restarts the whole group starts again. Values come from the defaults, then the config file, then a job\n"
    "scheduler's variables (srun, mpirun), then these flags; `acc config explain` shows where each one came from.\n"
    "Options may be spelled with '_' or '-'. A PROGRAM ending in .py runs under python3.";

// launch_options' list, in the order the options are added; a config key's help comes from the schema.
class OptionList {
 public:
  OptionList() {
    for (auto& k : config::schema_keys(config::SchemaKind::Launch)) keys_[k.path] = k;
  }

  void flag(std::string name, std::string group, std::string help, std::string key = "", std::string value = "true",
            std::vector<std::string> shorts = {}) {
    cli::Option x;
    x.name = std::move(name);
    x.group = std::move(group);
    x.config_key = std::move(key);
    x.help = x.config_key.empty() || value != "true" ? std::move(help) : key_help(keys_.at(x.config_key), help);
    x.flag_value = std::move(value);
    x.shorts = std::move(shorts);
    o_.push_back(std::move(x));
  }

  void opt(std::string name, std::string metavar, std::string group, std::string help, std::string key = "",
           std::vector<std::string> shorts = {}) {
    cli::Option x;
    x.name = std::move(name);
    x.takes_value = true;
    x.metavar = std::move(metavar);
    x.group = std::move(group);
    x.config_key = std::move(key);
    x.help = x.config_key.empty() ? std::move(help) : key_help(keys_.at(x.config_key), help);
    x.shorts = std::move(shorts);
    o_.push_back(std::move(x));
  }

  cli::Option& back() { return o_.back(); }
  std::vector<cli::Option> take() { return std::move(o_); }

 private:
  std::map<std::string, config::KeyInfo> keys_;
  std::vector<cli::Option> o_;
};

const std::string kGeneral = "General", kHardware = "Hardware", kResources = "Resources", kDistributed = "Distributed",
                  kSupervision = "Supervision, restarts and logs";

void add_general_hardware_resources(OptionList& o) {
  const std::string &gen = kGeneral, &hw = kHardware, &res = kResources;
  o.flag("--help", gen, "show this help and exit", "", "true", {"-h"});
  o.opt("--config_file", "FILE", gen, "launch config (YAML or JSON); default: see `acc config explain`");
  o.flag("--quiet", gen, "print only errors and the failure report", "", "true", {"-q"});
  o.flag("--debug", gen, "", "debug");
  o.flag("--module", gen, "run the program as `python3 -m PROGRAM`", "", "true", {"-m"});
  o.flag("--no_python", gen, "run a .py program directly instead of through python3");
  o.flag("--cpu", hw, "train on the CPU", "use_cpu");
  o.flag("--multi_gpu", hw, "distributed_type MULTI_GPU [distributed_type]", "distributed_type", "MULTI_GPU");
  o.flag("--tpu", hw, "TPU training (not supported by acc launch)");
  o.opt("--mixed_precision", "{no,fp16,bf16,fp8}", res, "", "mixed_precision");
  o.opt("--num_processes", "N", res, "processes in total, over all machines", "num_processes");
  o.opt("--num_machines", "N", res, "", "num_machines");
  o.opt("--num_cpu_threads_per_process", "N", res,
        "OMP_NUM_THREADS of every process (default: kept if set; else physical cores / processes with --cpu; else 1 "
        "with several processes)");
  o.back().number = kThreads;
  o.flag("--enable_cpu_affinity", res, "", "enable_cpu_affinity");
  o.opt("--dynamo_backend", "BACKEND", res, "", "dynamo_config.dynamo_backend");
  o.opt("--dynamo_mode", "MODE", res, "", "dynamo_config.dynamo_mode");
  o.flag("--dynamo_use_fullgraph", res, "", "dynamo_config.dynamo_use_fullgraph");
  o.flag("--dynamo_use_dynamic", res, "", "dynamo_config.dynamo_use_dynamic");
  o.flag("--dynamo_use_regional_compilation", res, "", "dynamo_config.dynamo_use_regional_compilation");
}

void add_distributed_supervision(OptionList& o) {
  const std::string &gen = kGeneral, &dist = kDistributed, &sup = kSupervision;
  o.opt("--gpu_ids", "IDS", dist, "", "gpu_ids");
  o.flag("--same_network", dist, "", "same_network");
  o.opt("--machine_rank", "R", dist, "", "machine_rank");
  o.opt("--main_process_ip", "IP", dist, "address of machine 0: MASTER_ADDR; default 127.0.0.1", "main_process_ip");
  o.opt("--main_process_port", "PORT", dist,
        "one machine: MASTER_PORT (default 29500; 0: a free port); several: machine 0's rendezvous port, the processes "
        "meet on PORT + 1",
        "main_process_port");
  o.opt("--rdzv_backend", "{static,c10d,etcd,etcd-v2}", dist, "accepted for compatibility; acc's rendezvous is its own",
        "rdzv_backend");
  o.opt("--rdzv_conf", "K=V,...", dist,
        "several machines: join_timeout=SECONDS (wait for the others; default 600), heartbeat_timeout=SECONDS (a "
        "silent machine is lost; default 30)");
  o.opt("--scheduler", "{auto,none,slurm,mpi}", dist,
        "read ranks from srun / mpirun variables (auto: when they are set; none: ignore them)");
  o.flag("--downcast_bf16", dist, "", "downcast_bf16");
  o.opt("--max_restarts", "N", sup, "restart the whole group up to N times after a failure (default 0), as torchrun");
  o.back().number = kRestarts;
  o.opt("--monitor_interval", "SECONDS", sup, "how often the processes are checked (default 0.1)");
  o.back().number = kSeconds;
  o.opt("--term_timeout", "SECONDS", sup, "grace between SIGTERM and SIGKILL when stopping processes (default 5)");
  o.back().number = kSeconds;
  o.opt("--tee", "{0,1,2,3}|R:N,...", sup,
        "also write stdout (1), stderr (2) or both (3) of every (or the listed) local rank to log files, and prefix "
        "those lines with [ROLE<local_rank>]:",
        "", {"-t"});
  o.opt("--log_dir", "DIR", sup,
        "per-rank log files: DIR/<run>/attempt_<k>/<local_rank>/{stdout,stderr}.log (both streams unless --tee says)");
  o.opt("--role", "NAME", sup, "name in the prefix of teed lines (default: default)");
  o.opt("--mpirun_hostfile", "FILE", dist,
        "MULTI_CPU: run the processes with mpirun over this hostfile (each reads its rank from mpirun)",
        "mpirun_config.mpirun_hostfile");
  o.opt("--aws_access_key_id", "ID", gen, "SageMaker (not supported by acc launch)");
  o.opt("--aws_secret_access_key", "KEY", gen, "SageMaker (not supported by acc launch)");
}

// Accelerate's paradigm flags, and one flag per key of the paradigm sections of the config, named as
// `accelerate launch` names them (the key's name, `fp8_` + name in fp8_config).
void add_paradigms(OptionList& o) {
  const std::string par = "Paradigm (one of --cpu, --multi_gpu, --use_deepspeed, --use_fsdp, --use_megatron_lm)";
  o.flag("--use_deepspeed", par, "distributed_type DEEPSPEED (ACCELERATE_USE_DEEPSPEED)", "distributed_type",
         "DEEPSPEED");
  o.flag("--use_fsdp", par, "distributed_type FSDP (ACCELERATE_USE_FSDP)", "distributed_type", "FSDP");
  o.flag("--use_megatron_lm", par, "distributed_type MEGATRON_LM", "distributed_type", "MEGATRON_LM");
  o.flag("--use_parallelism_config", par, "use parallelism_config (needs --use_fsdp --fsdp_version 2)");
  const std::pair<const char*, const char*> sections[] = {{"deepspeed_config", "DeepSpeed (with --use_deepspeed)"},
                                                          {"fsdp_config", "FSDP (with --use_fsdp)"},
                                                          {"fp8_config", "FP8 (with --mixed_precision fp8)"},
                                                          {"megatron_lm_config",
                                                           "Megatron-LM (with --use_megatron_lm)"},
                                                          {"parallelism_config", "ParallelismConfig"}};
  for (const auto& k : config::schema_keys(config::SchemaKind::Launch)) {
    for (auto [section, group] : sections) {
      const std::string prefix = std::string(section) + ".";
      if (k.path.rfind(prefix, 0) != 0) continue;
      std::string name = k.path.substr(prefix.size());
      if (std::string(section) == "fp8_config" && name.rfind("fp8_", 0) != 0) name = "fp8_" + name;
      if (name == "fp8_use_autocast_during_eval") {  // a store-true flag in accelerate launch
        o.flag("--" + name, group, "", k.path);
        continue;
      }
      std::string metavar = !k.choices.empty()                ? "NAME"
                            : k.type.rfind("bool[3]", 0) == 0 ? "B,B,B"
                            : k.type.rfind("bool", 0) == 0    ? "BOOL"
                            : k.type.rfind("int", 0) == 0     ? "N"
                            : k.type.rfind("number", 0) == 0  ? "X"
                                                              : "VALUE";
      o.opt("--" + name, metavar, group, "", k.path);
    }
  }
}

}  // namespace

std::vector<cli::Option> launch_options() {
  OptionList o;
  add_general_hardware_resources(o);
  add_distributed_supervision(o);
  add_paradigms(o);
  return o.take();
}

// The process counts a scheduler's variables give (Slurm, MPI): one task per machine, or one per process.
void add_scheduler_flags(Resolution& r, std::vector<config::Flag>& flags) {
  if (!r.sched) return;
  const SchedulerInfo& s = *r.sched;
  const auto E = config::Origin::Env;
  if (s.one_per_machine()) {
    int machines = s.nodes > 0 && s.nodes == s.size ? s.nodes : s.size;
    int machine_rank = s.nodes > 0 && s.nodes == s.size ? s.node_rank : s.rank;
    const std::string& mv = s.nodes > 0 && s.nodes == s.size ? s.nodes_var : s.size_var;
    const std::string& rv = s.nodes > 0 && s.nodes == s.size ? s.node_rank_var : s.rank_var;
    flags.push_back({"num_machines", std::to_string(machines), mv, E});
    flags.push_back({"machine_rank", std::to_string(machine_rank), rv, E});
    if (!s.first_node.empty()) flags.push_back({"main_process_ip", s.first_node, "SLURM_JOB_NODELIST", E});
  } else {
    r.per_task = true;
    flags.push_back({"num_processes", std::to_string(s.size), s.size_var, E});
    int machines = s.nodes > 0 ? s.nodes : std::max(1, s.size / std::max(1, s.local_size));
    int machine_rank = s.nodes > 0 ? s.node_rank : s.rank / std::max(1, s.local_size);
    flags.push_back({"num_machines", std::to_string(machines), s.nodes > 0 ? s.nodes_var : s.local_size_var, E});
    flags.push_back({"machine_rank", std::to_string(machine_rank), s.nodes > 0 ? s.node_rank_var : s.rank_var, E});
    if (!s.first_node.empty()) flags.push_back({"main_process_ip", s.first_node, "SLURM_JOB_NODELIST", E});
  }
}

Resolution resolve(const cli::Parsed& p, const std::vector<cli::Option>& opts,
                   const std::map<std::string, std::string>& env, bool check) {
  Resolution r;
  std::vector<std::string> paradigms;
  for (const char* f : {"--cpu", "--multi_gpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm"})
    if (p.options.count(f)) paradigms.push_back(f);
  if (paradigms.size() > 1)
    throw config::Error("contradictory settings: only one of --cpu, --multi_gpu, --use_deepspeed, --use_fsdp, "
                        "--use_megatron_lm may be given; got " +
                        paradigms[0] + " and " + paradigms[1]);
  if (p.options.count("--tpu")) throw config::Error("--tpu: TPUs are not supported by acc launch");
  for (const char* aws : {"--aws_access_key_id", "--aws_secret_access_key"})
    if (p.options.count(aws))
      throw config::Error(std::string(aws) + ": SageMaker jobs are not supported by acc launch");

  if (auto it = p.options.find("--config_file"); it != p.options.end()) {
    r.file = it->second.value;
    r.file_reason = it->second.as_typed;
  } else {
    r.file = config::find_default_config_file(env, &r.searched);
    if (r.file) {
      auto e = env.find("ACC_CONFIG_FILE");
      if (e != env.end() && !e->second.empty()) r.file_reason = "$ACC_CONFIG_FILE";
      else if (r.file->ends_with("/acc/default_config.yaml")) r.file_reason = "libacc's default location";
      else r.file_reason = "Accelerate's default location";
    }
  }

  std::vector<config::Flag> flags;
  // Scheduler values come before the flags, so that a flag still wins.
  std::string mode = "auto";
  if (auto it = p.options.find("--scheduler"); it != p.options.end()) {
    mode = it->second.value;
    if (mode != "auto" && mode != "none" && mode != "slurm" && mode != "mpi")
      usage_error("--scheduler takes auto, none, slurm or mpi; got '" + mode + "'");
  }
  try {
    r.sched = detect_scheduler(env, mode);
  } catch (const std::runtime_error& e) {
    throw config::Error(e.what());
  }
  add_scheduler_flags(r, flags);
  for (const auto& o : opts) {
    auto it = p.options.find(o.name);
    if (it == p.options.end() || o.config_key.empty()) continue;
    flags.push_back({o.config_key, o.takes_value ? it->second.value : o.flag_value, it->second.as_typed});
  }
  // With one task per machine and no process count given, each machine runs one process.
  using Key = config::LaunchSettings::Key;
  auto settle = [&](bool checked) {
    r.cfg = config::resolve_launch(r.file, flags, checked);
    r.settings = config::launch_settings(r.cfg);
  };
  settle(false);
  const config::LaunchSettings& s = r.settings;
  if (r.sched && r.sched->one_per_machine() && s.num_processes == 1 &&
      r.cfg.provenance(Key::num_processes).origin == config::Origin::Default && s.num_machines > 1) {
    flags.insert(flags.begin(), {Key::num_processes, std::to_string(s.num_machines),
                                 r.sched->name + ": one process per machine", config::Origin::Env});
    settle(false);
  }
  if (r.per_task && s.num_processes != r.sched->size)
    throw config::Error("'num_processes' is " + std::to_string(s.num_processes) + " (" +
                        r.cfg.provenance(Key::num_processes).where + "), but " + r.sched->name + " started " +
                        std::to_string(r.sched->size) + " tasks (" + r.sched->size_var +
                        "), each of which runs one process; drop --num_processes or make them equal");
  if (check) {
    settle(true);
    if (s.compute_environment != "LOCAL_MACHINE")
      throw config::Error("compute_environment " + s.compute_environment + " (" +
                          r.cfg.provenance(Key::compute_environment).where +
                          ") is not supported by acc launch; it runs LOCAL_MACHINE jobs only");
    if (s.tpu_use_cluster)
      throw config::Error("tpu_use_cluster (" + r.cfg.provenance(Key::tpu_use_cluster).where +
                          ") is not supported by acc launch");
    if (p.options.count("--use_parallelism_config") &&
        !(s.distributed_type == "FSDP" && s.fsdp_config.fsdp_version == 2))
      throw config::Error("contradictory settings: --use_parallelism_config needs --use_fsdp and --fsdp_version 2");
  }
  return r;
}

namespace {

// The rendezvous port: the config's (29500 by default); on one machine (or one task per process) 0 takes a free
// port, and a port in use is replaced by a free one.
void plan_port(Plan& plan) {
  int port = static_cast<int>(plan.r.settings.main_process_port.value_or(kDefaultPort));
  if (plan.machines == 1 || plan.r.per_task) {
    if (port == 0) {
      port = free_port();
    } else if (!plan.r.per_task && port_in_use(port)) {
      int other = free_port();
      if (!plan.quiet)
        std::fprintf(stderr, "%s: port %d is in use; using free port %d instead (pass --main_process_port to choose)\n",
                     kMe, port, other);
      port = other;
    }
  }
  plan.master_port = port;
}

// Threads per process: --num_cpu_threads_per_process, else (OMP_NUM_THREADS unset) physical cores / processes for
// CPU training, or 1 with several processes.
void plan_threads(Plan& plan, const cli::Parsed& p) {
  const int nproc = plan.nproc;
  if (auto it = p.options.find("--num_cpu_threads_per_process"); it != p.options.end()) {
    plan.threads = static_cast<int>(number_option(p, "--num_cpu_threads_per_process", 1));
  } else if (!plan.env.count("OMP_NUM_THREADS")) {
    const int local = plan.r.sched ? std::max(1, plan.r.sched->local_size) : nproc;
    const int per = plan.r.settings.use_cpu ? physical_cores() / local : 1;
    if (per > 1) {
      plan.threads = per;
      plan.threads_note = "setting OMP_NUM_THREADS=" + std::to_string(per) +
                          " (physical cores / processes) for CPU "
                          "training; set OMP_NUM_THREADS or --num_cpu_threads_per_process to tune it";
    } else if (local > 1) {
      plan.threads = 1;
      plan.threads_note = "setting OMP_NUM_THREADS=1 for each process so that " + std::to_string(local) +
                          " processes do not overload the CPU; set OMP_NUM_THREADS or --num_cpu_threads_per_process "
                          "to tune it";
    }
  }
}

// Output: tee and log files (this run's directory under --log_dir, or under a new temporary directory).
void plan_logs(Plan& plan, const cli::Parsed& p) {
  const int nproc = plan.nproc;
  auto tee_it = p.options.find("--tee");
  auto dir_it = p.options.find("--log_dir");
  if (tee_it != p.options.end()) plan.tee = parse_tee(tee_it->second.value, tee_it->second.as_typed, nproc);
  else if (dir_it != p.options.end()) plan.tee.assign(static_cast<size_t>(nproc), 3);
  bool any_tee = std::any_of(plan.tee.begin(), plan.tee.end(), [](int t) { return t != 0; });
  if (!any_tee) return;
  std::string base;
  if (dir_it != p.options.end()) {
    base = dir_it->second.value;
    config::make_directories(base);
  } else {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/acc_logs_XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      throw config::Error("cannot create a log directory: " + std::string(std::strerror(errno)));
    base = buf.data();
  }
  plan.log_root = base + "/" + timestamp() + "_" + config::host_name() + "_" + std::to_string(getpid());
  config::make_directories(plan.log_root);
}

// The command: PROGRAM (under python3 for .py, or python3 -m with --module) and the executable it resolves to.
void plan_command(Plan& plan, const cli::Parsed& p, const std::vector<std::string>& program) {
  if (program.empty()) usage_error("missing the PROGRAM to launch");
  if (p.options.count("--module") && p.options.count("--no_python"))
    usage_error("--module and --no_python cannot be used together");
  const std::string& prog = program.front();
  if (p.options.count("--module")) plan.cmd = {"python3", "-m"};
  else if (!p.options.count("--no_python") && prog.ends_with(".py")) plan.cmd = {"python3"};
  plan.cmd.insert(plan.cmd.end(), program.begin(), program.end());
  const std::string path_env = plan.env.count("PATH") ? plan.env["PATH"] : "/usr/local/bin:/usr/bin:/bin";
  Resolved exe = resolve_program(plan.cmd.front(), path_env);
  if (exe.error)
    throw PlanError("cannot execute '" + plan.cmd.front() + "': " + exe.why, exe.error == ENOENT ? 127 : 126);
  plan.exe = exe.path;
}

// The environment every process shares: acc's, the config's exports, torchrun's variables, the job's shm name.
void plan_base_env(Plan& plan) {
  plan.base_env = plan.env;
  for (auto& [k, v] : config::launch_environment(plan.r.cfg)) plan.base_env[k] = v;
  plan.base_env["MASTER_ADDR"] = plan.master_addr;
  if (plan.threads > 0) plan.base_env["OMP_NUM_THREADS"] = std::to_string(plan.threads);
  plan.base_env["WORLD_SIZE"] = std::to_string(plan.world);
  plan.base_env["LOCAL_WORLD_SIZE"] =
      std::to_string(plan.r.per_task ? std::max(1, plan.r.sched->local_size) : plan.nproc);
  plan.base_env["GROUP_RANK"] = std::to_string(plan.machine_rank);
  plan.base_env["GROUP_WORLD_SIZE"] = std::to_string(plan.machines);
  plan.base_env["ROLE_NAME"] = plan.role;
  plan.base_env["ROLE_WORLD_SIZE"] = std::to_string(plan.world);
  plan.base_env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(plan.max_restarts);
  // A name of this job's own in its processes' shared-memory segments (src/runtime/shm_backend.cpp), so that what a
  // process killed while its group was making one leaves in /dev/shm is removed once the processes are gone.
  std::random_device rd;
  char job[24];
  std::snprintf(job, sizeof job, "%08x%08x", rd(), rd());
  plan.shm_job = job;
  plan.base_env["ACC_SHM_JOB"] = plan.shm_job;
}

}  // namespace

Plan make_plan(const cli::Parsed& p, const std::vector<cli::Option>& opts, const std::vector<std::string>& program) {
  Plan plan;
  plan.env = config::current_environment();
  plan.quiet = p.options.count("--quiet") > 0;
  plan.r = resolve(p, opts, plan.env, true);
  const config::LaunchSettings& cfg = plan.r.settings;
  plan.world = static_cast<int>(cfg.num_processes);
  plan.machines = static_cast<int>(cfg.num_machines);
  plan.machine_rank = static_cast<int>(cfg.machine_rank);
  plan.nproc = plan.world / plan.machines;
  plan.first_rank = plan.machine_rank * plan.nproc;
  plan.master_addr = cfg.main_process_ip.value_or("127.0.0.1");
  plan.term_timeout = number_option(p, "--term_timeout", 5.0);
  plan.monitor_interval = number_option(p, "--monitor_interval", 0.1);
  plan.max_restarts = static_cast<int>(number_option(p, "--max_restarts", 0));
  if (auto it = p.options.find("--rdzv_conf"); it != p.options.end())
    parse_rdzv_conf(it->second.value, &plan.join_timeout, &plan.heartbeat_timeout);
  if (auto it = p.options.find("--role"); it != p.options.end()) plan.role = it->second.value;

  if (plan.r.per_task) {
    // One process per acc: its rank is the scheduler's.
    const SchedulerInfo& s = *plan.r.sched;
    plan.nproc = 1;
    plan.first_rank = s.rank;
    if (plan.max_restarts > 0)
      throw config::Error("--max_restarts: restarts need one acc launch per machine; under " + s.name +
                          " with one task per process, let the scheduler restart the job");
  }
  plan_port(plan);
  plan_threads(plan, p);
  plan_logs(plan, p);
  plan_command(plan, p, program);
  plan_base_env(plan);
  return plan;
}

namespace {

std::vector<Worker> make_workers(const Plan& plan, int attempt, int master_port) {
  std::vector<Worker> workers;
  for (int local = 0; local < plan.nproc; ++local) {
    const int rank = plan.first_rank + local;
    const int local_rank = plan.r.per_task ? plan.r.sched->local_rank : local;
    std::map<std::string, std::string> e = plan.base_env;
    e["MASTER_PORT"] = std::to_string(master_port);
    e["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    e["RANK"] = std::to_string(rank);
    e["LOCAL_RANK"] = std::to_string(local_rank);
    e["ROLE_RANK"] = std::to_string(rank);
    Worker w;
    w.rank = rank;
    w.local_rank = local_rank;
    w.path = plan.exe;
    w.argv = plan.cmd;
    for (auto& [k, v] : e) w.env.push_back(k + "=" + v);
    workers.push_back(std::move(w));
  }
  return workers;
}

std::string label(const Plan& plan) {
  std::string s;
  for (const auto& a : plan.cmd) s += (s.empty() ? "" : " ") + a;
  return s;
}

// The failure report: one block that says which rank failed, how, and what it printed last.
void print_report(const Plan& plan, const Group& g, const std::string& attempt_dir, int attempt, bool restarting) {
  const auto& f = *g.first_failure();
  const std::string rule(72, '=');
  std::string title = "FAILED";
  if (restarting)
    title = "FAILED, restarting the group (restart " + std::to_string(attempt + 1) + " of " +
            std::to_string(plan.max_restarts) + ")";
  std::fprintf(stderr, "%s\n%s: %s  %s\n", rule.c_str(), kMe, title.c_str(), label(plan).c_str());
  std::string where = "local_rank " + std::to_string(f.local_rank);
  if (f.pid > 0) where += ", pid " + std::to_string(f.pid);
  if (plan.machines > 1)
    where += ", machine " + std::to_string(plan.machine_rank) + " of " + std::to_string(plan.machines) + ", " +
             config::host_name();
  std::fprintf(stderr, "  failed rank : %d (%s)\n", f.rank, where.c_str());
  if (!f.start_error.empty()) std::fprintf(stderr, "  status      : %s\n", f.start_error.c_str());
  else std::fprintf(stderr, "  status      : %s\n", describe_status(f.status).c_str());
  if (f.start_error.empty()) {
    std::string after = std::to_string(f.after);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f s", f.after);
    after = buf;
    if (plan.max_restarts > 0)
      after += " (attempt " + std::to_string(attempt + 1) + " of " + std::to_string(plan.max_restarts + 1) + ")";
    std::fprintf(stderr, "  after       : %s\n", after.c_str());
  }
  for (const auto& [sig, ranks] : g.stopped_ranks()) {
    std::string list;
    for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    if (sig == "SIGKILL")
      std::fprintf(stderr, "  killed      : rank %s (SIGKILL after %.1f s)\n", list.c_str(), plan.term_timeout);
    else std::fprintf(stderr, "  stopped     : rank %s (%s)\n", list.c_str(), sig.c_str());
  }
  if (!attempt_dir.empty() && f.local_rank >= 0 && static_cast<size_t>(f.local_rank) < plan.tee.size() &&
      plan.tee[static_cast<size_t>(f.local_rank)])
    std::fprintf(stderr, "  logs        : %s/%d/\n", attempt_dir.c_str(), f.local_rank);
  auto lines = g.tail(f.local_rank);
  if (f.start_error.empty()) {
    if (lines.empty()) {
      std::fprintf(stderr, "  last output : (rank %d printed nothing)\n", f.rank);
    } else {
      std::fprintf(stderr, "  last output : (rank %d, stdout and stderr, last %zu lines)\n", f.rank, lines.size());
      for (const auto& l : lines) std::fprintf(stderr, "    | %s\n", l.c_str());
    }
  }
  std::fprintf(stderr, "%s\n", rule.c_str());
}

int exit_code_of(const Exit& f) {
  if (!f.start_error.empty()) return f.pid <= 0 ? 1 : f.start_errno == ENOENT ? 127 : 126;  // pipe/fork or exec
  if (WIFEXITED(f.status)) return WEXITSTATUS(f.status);
  if (WIFSIGNALED(f.status)) return 128 + WTERMSIG(f.status);
  return 1;
}

// Runs `mpirun` (Open MPI, or MPICH / Intel MPI / MVAPICH spellings) over a hostfile, as Accelerate's
// prepare_simple_launcher_cmd_env does, with `acc launch --scheduler mpi` as the program of every rank.
int exec_mpirun(const Plan& plan, const std::string& hostfile, const std::vector<std::string>& acc_args,
                const std::vector<std::string>& program) {
  const std::string path_env = plan.env.count("PATH") ? plan.env.at("PATH") : "/usr/local/bin:/usr/bin:/bin";
  std::string app;
  for (const char* name : {"mpirun", "mpiexec"}) {
    Resolved r = resolve_program(name, path_env);
    if (!r.error) {
      app = r.path;
      break;
    }
  }
  if (app.empty())
    throw std::runtime_error("mpirun_hostfile is set, but mpirun or mpiexec were not found; install Open MPI, Intel "
                             "MPI or MVAPICH, or remove mpirun_config.mpirun_hostfile");
  // Which MPI it is decides the option spellings. Its output is read even when --version fails; a version that
  // cannot be read at all means MPICH-style options.
  CaptureOptions merged;
  merged.merge_stderr = true;
  const Captured probe = run_capture({app, "--version"}, merged);
  if (!probe.ok() && !plan.quiet) std::fprintf(stderr, "%s: warning: %s\n", kMe, probe.error.c_str());
  const std::string& version = probe.out;
  const bool open_mpi = version.find("Open MPI") != std::string::npos || version.find("OpenRTE") != std::string::npos;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw std::runtime_error("cannot find the acc binary (/proc/self/exe)");
  self[n] = '\0';
  std::vector<std::string> cmd = {
      app,  open_mpi ? "--hostfile" : "-f", hostfile, open_mpi ? "--npernode" : "-ppn", std::to_string(plan.nproc),
      "-n", std::to_string(plan.world)};
  if (open_mpi) cmd.insert(cmd.end(), {"--bind-to", "socket"});
  cmd.insert(cmd.end(), {self, "launch", "--scheduler", "mpi"});
  cmd.insert(cmd.end(), acc_args.begin(), acc_args.end());
  cmd.insert(cmd.end(), program.begin(), program.end());
  if (!plan.quiet) {
    std::string line;
    for (const auto& a : cmd) line += (line.empty() ? "" : " ") + a;
    std::fprintf(stderr, "%s: %s\n", kMe, line.c_str());
  }
  std::fflush(stderr);
  std::vector<char*> argv;
  for (auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(app.c_str(), argv.data());
  throw std::runtime_error("cannot execute '" + app + "': " + std::strerror(errno));
}

}  // namespace

namespace {

// While acc launch runs workers, signals come through a signalfd: nothing runs in a handler while acc forks or
// reaps. The signal mask and the two dispositions changed are restored when this goes, whichever way.
class SignalScope {
 public:
  SignalScope() {
    sigemptyset(&watched_);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&watched_, s);
    sigprocmask(SIG_BLOCK, &watched_, &original_mask_);
    // An inherited SIGCHLD = SIG_IGN would make the kernel reap the workers itself and hide their status; writing to
    // an output that went away must not kill acc (the workers get SIG_DFL back).
    struct sigaction dfl{}, ign{};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGCHLD, &dfl, &original_chld_);
    sigaction(SIGPIPE, &ign, &original_pipe_);
    fd_ = signalfd(-1, &watched_, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) {
      const int err = errno;
      restore();
      throw std::runtime_error(std::string("signalfd: ") + std::strerror(err));
    }
  }
  ~SignalScope() { restore(); }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  int fd() const { return fd_; }

 private:
  void restore() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    sigaction(SIGCHLD, &original_chld_, nullptr);
    sigaction(SIGPIPE, &original_pipe_, nullptr);
    sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
  }
  sigset_t watched_{}, original_mask_{};
  struct sigaction original_chld_{}, original_pipe_{};
  int fd_ = -1;
};

// Several machines: this machine's agent, after the rendezvous (which gives the workers' MASTER_PORT).
std::unique_ptr<Agent> join_machines(const Plan& plan, int sigfd, int& port) {
  AgentOptions ao;
  ao.num_machines = plan.machines;
  ao.machine_rank = plan.machine_rank;
  ao.num_processes = plan.world;
  ao.main_ip = plan.master_addr;
  ao.main_port = plan.master_port;
  ao.join_timeout = plan.join_timeout;
  ao.result_timeout = plan.term_timeout + 60;
  ao.heartbeat_timeout = plan.heartbeat_timeout;
  ao.quiet = plan.quiet;
  auto agent = std::make_unique<Agent>(ao);
  port = agent->rendezvous(sigfd);
  return agent;
}

// Removes what this job's processes left in /dev/shm: the shared-memory segments ("acc-shm-JOB-PID-RANDOM",
// src/runtime/shm_backend.cpp) of groups that a killed or interrupted process never let finish. Only once every
// process is gone, so no segment of theirs is still being made.
int remove_job_segments(const std::string& job) {
  if (job.empty()) return 0;
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  const std::string prefix = "acc-shm-" + job + "-";
  int removed = 0;
  while (const dirent* e = readdir(dir))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0 &&
        unlink((std::string("/dev/shm/") + e->d_name).c_str()) == 0)
      ++removed;
  closedir(dir);
  return removed;
}

std::string failure_of(const Exit& f) {
  return "rank " + std::to_string(f.rank) + " " + (f.start_error.empty() ? describe_status(f.status) : f.start_error);
}

// Forwards the signals that came to the workers: the first as it is, a second one as SIGKILL. Returns the first.
int forward_signals(const Plan& plan, int sigfd, Group& g, Agent* agent, int interrupted) {
  signalfd_siginfo si{};
  while (read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) continue;
    if (!interrupted) {
      interrupted = sig;
      if (!plan.quiet)
        std::fprintf(stderr, "%s: received %s; forwarding it to the processes\n", kMe, signal_name(sig).c_str());
      g.stop(sig);
      if (agent) agent->report_failure("acc launch was interrupted by " + signal_name(sig), 128 + sig, true);
    } else {
      if (!plan.quiet) std::fprintf(stderr, "%s: received %s again; sending SIGKILL\n", kMe, signal_name(sig).c_str());
      g.stop(SIGKILL);
    }
  }
  return interrupted;
}

// Runs one attempt's workers to their end, watching signals and the other machines; how it ended on this machine.
Outcome supervise(const Plan& plan, Group& g, int sigfd, Agent* agent) {
  g.start();
  int interrupted = 0;
  Outcome remote;  // a failure elsewhere that stopped this machine's workers
  bool reported = false;
  while (!g.done()) {
    std::vector<pollfd> fds{{sigfd, POLLIN, 0}};
    g.poll_fds(fds);
    const size_t agent_from = fds.size();
    if (agent) agent->poll_fds(fds);
    const double wait_s = std::max(0.001, std::min(plan.monitor_interval, g.next_deadline()));
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(wait_s * 1000)));
    if (rc < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) interrupted = forward_signals(plan, sigfd, g, agent, interrupted);
    std::vector<pollfd> pipes(fds.begin() + 1, fds.begin() + static_cast<long>(agent_from));
    g.on_poll(pipes);
    g.reap();
    if (g.failed() && !reported) {
      reported = true;
      if (agent && !interrupted)
        agent->report_failure(failure_of(*g.first_failure()), exit_code_of(*g.first_failure()), false);
    }
    if (agent) {
      std::vector<pollfd> afds(fds.begin() + static_cast<long>(agent_from), fds.end());
      Agent::Event ev = agent->on_poll(afds);
      if (ev.kind == Agent::Event::None) ev = agent->heartbeat();
      if (ev.kind != Agent::Event::None && remote.message.empty() && !g.failed()) {
        remote.kind = ev.kind == Agent::Event::Lost ? Outcome::Lost : Outcome::Stopped;
        remote.message = ev.message;
        if (!plan.quiet)
          std::fprintf(stderr, "%s: %s; stopping the processes of this machine\n", kMe, ev.message.c_str());
        g.stop(SIGTERM);
      }
    }
    g.tick();
  }
  g.finish();
  if (const int n = remove_job_segments(plan.shm_job); n > 0 && !plan.quiet)
    std::fprintf(stderr, "%s: removed %d shared-memory segment(s) that stopped processes left in /dev/shm\n", kMe, n);

  Outcome local;
  if (interrupted) {
    local.kind = Outcome::Interrupted;
    local.code = 128 + interrupted;
    local.message = "interrupted by " + signal_name(interrupted);
  } else if (g.failed()) {
    local.kind = Outcome::Failed;
    local.code = exit_code_of(*g.first_failure());
    local.message = failure_of(*g.first_failure());
  } else if (!remote.message.empty()) {  // workers that stopped by themselves after a remote failure: still failed
    local = remote;
    local.code = 1;
  }
  return local;
}

}  // namespace

int run_plan(Plan& plan) {
  std::optional<SignalScope> signals;
  try {
    signals.emplace();
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 1;
  }
  // Orphans of the workers become acc's children, so acc reaps what it kills at the end.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (!plan.threads_note.empty() && !plan.quiet) std::fprintf(stderr, "%s: %s\n", kMe, plan.threads_note.c_str());
  if (!plan.quiet)
    for (const auto& w : config::launch_warnings(plan.r.cfg)) std::fprintf(stderr, "%s: warning: %s\n", kMe, w.c_str());
  if (!plan.log_root.empty() && !plan.quiet) std::fprintf(stderr, "%s: logs in %s\n", kMe, plan.log_root.c_str());

  std::unique_ptr<Agent> agent;
  int port = plan.master_port;
  if (plan.machines > 1 && !plan.r.per_task) {
    try {
      agent = join_machines(plan, signals->fd(), port);
    } catch (const AgentError& e) {
      std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
      return e.code;
    }
  }

  for (int attempt = 0;; ++attempt) {
    OutputOptions out;
    out.tee = plan.tee;
    out.prefix = true;
    out.role = plan.role;
    const std::string attempt_dir = plan.log_root.empty() ? "" : plan.log_root + "/attempt_" + std::to_string(attempt);
    out.log_dir = attempt_dir;
    Group g(make_workers(plan, attempt, port), out, plan.term_timeout, plan.quiet);
    const Outcome local = supervise(plan, g, signals->fd(), agent.get());
    const bool ran_and_failed = local.kind == Outcome::Failed && g.first_failure()->start_error.empty();

    if (agent) {  // machine 0 decides for every machine
      const Decision d = agent->finish_round(local, attempt, plan.max_restarts, signals->fd());
      if (ran_and_failed) print_report(plan, g, attempt_dir, attempt, d.restart);
      if (d.restart) {
        port = d.port;
        if (!plan.quiet && local.kind != Outcome::Failed)
          std::fprintf(stderr, "%s: restarting the group (restart %d of %d) after a failure elsewhere\n", kMe,
                       attempt + 1, plan.max_restarts);
        continue;
      }
      if (d.interrupted) return d.code;
      if (local.kind != Outcome::Failed && local.kind != Outcome::Interrupted && d.code != 0) {
        const std::string rule(72, '=');
        std::fprintf(stderr, "%s\n%s: STOPPED  %s\n  because     : %s\n%s\n", rule.c_str(), kMe, label(plan).c_str(),
                     d.message.c_str(), rule.c_str());
      }
      return local.kind == Outcome::Failed || local.kind == Outcome::Interrupted ? local.code : d.code;
    }
    if (local.kind != Outcome::Failed) return local.kind == Outcome::Interrupted ? local.code : 0;
    // A failure that reported itself already (nothing ran) is not restarted.
    const bool restart = attempt < plan.max_restarts && ran_and_failed;
    if (ran_and_failed) print_report(plan, g, attempt_dir, attempt, restart);
    if (!restart) return local.code;
  }
}

int launch_main(const std::vector<std::string>& args) {
  const std::vector<cli::Option> opts = launch_options();
  const std::string usage = "acc launch [options] PROGRAM [ARGS...]";
  cli::Parsed p;
  try {
    p = cli::parse(opts, args, true);
    if (p.options.count("--help")) {
      std::fputs(cli::help(usage, kDescription, opts).c_str(), stdout);
      return 0;
    }
    if (p.positionals.empty()) usage_error("missing the PROGRAM to launch");
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\nusage: %s\nRun 'acc launch --help' for the options.\n", kMe, e.what(),
                 usage.c_str());
    return 2;
  }
  Plan plan;
  try {
    plan = make_plan(p, opts, p.positionals);
  } catch (const PlanError& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return e.code;
  } catch (const config::Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
    return 1;
  }
  // Accelerate's MPI launch: with an mpirun hostfile (a MULTI_CPU job), mpirun starts one `acc launch` per process
  // on the hosts of the file, and each of them reads its rank from mpirun's variables.
  const config::LaunchSettings& cfg = plan.r.settings;
  if (!plan.r.sched && cfg.mpirun_config.mpirun_hostfile && (cfg.distributed_type == "MULTI_CPU" || cfg.use_cpu)) {
    const size_t program_at = args.size() - p.positionals.size();
    std::vector<std::string> rest;
    for (size_t i = 0; i < program_at; ++i) {
      std::string a = args[i];
      std::string n = a;
      for (size_t k = 2; k < n.size() && n.rfind("--", 0) == 0; ++k)
        if (n[k] == '-') n[k] = '_';
      if (n == "--mpirun_hostfile") {
        ++i;  // and its value
        continue;
      }
      if (n.rfind("--mpirun_hostfile=", 0) == 0) continue;
      rest.push_back(a);
    }
    try {
      return exec_mpirun(plan, *cfg.mpirun_config.mpirun_hostfile, rest,
                         std::vector<std::string>(args.begin() + static_cast<long>(program_at), args.end()));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: error: %s\n", kMe, e.what());
      return 1;
    }
  }
  return run_plan(plan);
}

}  // namespace acc::launcher
