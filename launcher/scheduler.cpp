#include "scheduler.hpp"

#include <stdexcept>

namespace acc::launcher {
namespace {

std::optional<int> int_var(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  // SLURM_TASKS_PER_NODE may read "2(x3)": the leading number is what counts here.
  size_t end = 0;
  try {
    long v = std::stol(it->second, &end);
    if (end == 0 || v < 0) throw std::invalid_argument("");
    return static_cast<int>(v);
  } catch (const std::exception&) {
    throw std::runtime_error("environment variable " + name + "=" + it->second + " is not a number");
  }
}

struct Names {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

const Names kMpi[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"PMIx", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"},
};

std::optional<SchedulerInfo> slurm(const std::map<std::string, std::string>& env, bool forced) {
  // srun sets SLURM_STEP_ID (SLURM_STEPID in old versions) in every task; a batch script alone does not run tasks.
  bool in_step = env.count("SLURM_STEP_ID") || env.count("SLURM_STEPID");
  if (!env.count("SLURM_PROCID") || (!in_step && !forced)) {
    if (forced) throw std::runtime_error("--scheduler slurm: SLURM_PROCID is not set (run acc launch under srun)");
    return std::nullopt;
  }
  SchedulerInfo s;
  s.name = "SLURM";
  s.rank_var = "SLURM_PROCID";
  s.size_var = env.count("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  s.local_rank_var = "SLURM_LOCALID";
  s.node_rank_var = "SLURM_NODEID";
  s.nodes_var = env.count("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  s.rank = int_var(env, s.rank_var).value_or(0);
  s.size = int_var(env, s.size_var).value_or(1);
  s.local_rank = int_var(env, s.local_rank_var).value_or(0);
  s.node_rank = int_var(env, s.node_rank_var).value_or(0);
  s.nodes = int_var(env, s.nodes_var).value_or(1);
  s.local_size_var = env.count("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  s.local_size = int_var(env, s.local_size_var).value_or(s.nodes > 0 ? s.size / s.nodes : 1);
  for (const char* v : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
    if (auto it = env.find(v); it != env.end() && !it->second.empty()) {
      s.first_node = first_slurm_host(it->second);
      break;
    }
  return s;
}

std::optional<SchedulerInfo> mpi(const std::map<std::string, std::string>& env, bool forced) {
  for (const Names& n : kMpi) {
    if (!env.count(n.rank) || !env.count(n.size)) continue;
    SchedulerInfo s;
    s.name = n.name;
    s.rank_var = n.rank;
    s.size_var = n.size;
    s.local_rank_var = n.local_rank;
    s.local_size_var = n.local_size;
    s.rank = int_var(env, n.rank).value_or(0);
    s.size = int_var(env, n.size).value_or(1);
    auto lr = int_var(env, n.local_rank), ls = int_var(env, n.local_size);
    if (!lr || !ls)
      throw std::runtime_error(std::string("started by ") + n.name + " (" + n.rank + "), but " + n.local_rank + " / " +
                               n.local_size + " are not set: acc cannot tell the ranks of this machine");
    s.local_rank = *lr;
    s.local_size = *ls;
    return s;
  }
  if (forced) throw std::runtime_error("--scheduler mpi: no MPI rank variables (OMPI_COMM_WORLD_RANK, PMI_RANK, ...)");
  return std::nullopt;
}

}  // namespace

std::string first_slurm_host(const std::string& list) {
  // The first entry: up to a comma outside brackets.
  std::string entry;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    entry += c;
  }
  size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  std::string prefix = entry.substr(0, open);
  std::string range = entry.substr(open + 1);
  size_t stop = range.find_first_of(",-]");
  std::string suffix;
  size_t close = entry.find(']');
  if (close != std::string::npos) suffix = entry.substr(close + 1);
  return prefix + range.substr(0, stop) + suffix;
}

std::optional<SchedulerInfo> detect_scheduler(const std::map<std::string, std::string>& env, const std::string& mode) {
  if (mode == "none") return std::nullopt;
  if (mode == "slurm") return slurm(env, true);
  if (mode == "mpi") return mpi(env, true);
  if (auto s = slurm(env, false)) return s;
  return mpi(env, false);
}

}  // namespace acc::launcher
