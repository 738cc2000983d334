// `acc launch`: resolve the launch configuration (defaults < config file < scheduler < flags), build the
// torchrun/Accelerate environment of every local process, and supervise them (restarts, logs, several machines).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "acc/config.hpp"
#include "acc/config_views.hpp"
#include "cli.hpp"
#include "scheduler.hpp"
#include "supervisor.hpp"

namespace acc::launcher {

// args: everything after `acc launch`. Returns the exit status of `acc`.
int launch_main(const std::vector<std::string>& args);

// Every option of `acc launch` (also accepted by `acc test` and `acc config explain`).
std::vector<cli::Option> launch_options();

// The launch config as `acc launch` would resolve it from the parsed options, and where it came from.
struct Resolution {
  config::Config cfg;
  config::LaunchSettings settings;     // cfg's values, typed
  std::optional<std::string> file;     // the config file read, if any
  std::string file_reason;  // "--config_file", "$ACC_CONFIG_FILE", "libacc's default", "Accelerate's default"
  std::vector<std::string> searched;  // default locations looked at
  std::optional<SchedulerInfo> sched;  // started by srun / mpirun
  bool per_task = false;  // the scheduler started one acc per process
};
// Throws config::Error or cli::UsageError.
Resolution resolve(const cli::Parsed& p, const std::vector<cli::Option>& opts,
                   const std::map<std::string, std::string>& env, bool check = true);

// A job ready to start: what resolve() gives, plus how to run and watch it.
struct Plan {
  Resolution r;
  std::map<std::string, std::string> env;  // acc's environment
  int world = 1, machines = 1, machine_rank = 0, nproc = 1, first_rank = 0;
  std::string master_addr;
  int master_port = 0;  // one machine: MASTER_PORT; several: the rendezvous port of machine 0
  int threads = 0;  // OMP_NUM_THREADS to set (0: leave)
  std::string threads_note;
  double term_timeout = 5, monitor_interval = 0.1, join_timeout = 600, heartbeat_timeout = 30;
  int max_restarts = 0;
  std::vector<int> tee;  // per local rank
  std::string log_root;  // this run's log directory (attempt_<k> below it); empty: no logs
  std::string role = "default";
  bool quiet = false;
  std::vector<std::string> cmd;  // argv of every worker
  std::string exe;  // resolved program
  std::map<std::string, std::string> base_env;  // shared by every worker, before per-attempt values
  std::string shm_job;  // ACC_SHM_JOB: in the names of the workers' shared-memory segments, removed at the end
};
// Throws config::Error, cli::UsageError, or PlanError (exit status 126/127 for a program that cannot run).
struct PlanError : std::runtime_error {
  PlanError(const std::string& m, int code) : std::runtime_error(m), code(code) {}
  int code;
};
Plan make_plan(const cli::Parsed& p, const std::vector<cli::Option>& opts, const std::vector<std::string>& program);

// Runs a plan: rendezvous (several machines), attempts and restarts, the failure report. Returns acc's exit status.
int run_plan(Plan& plan);

}  // namespace acc::launcher
