// `acc launch` started by a job scheduler, once per task: under SLURM's srun or an MPI launcher (mpirun/mpiexec of
// Open MPI, MPICH/Intel MPI (Hydra), MVAPICH). Their rank variables say where this task stands:
//   - one task per machine (srun --ntasks-per-node=1, mpirun --map-by ppr:1:node / -ppn 1): every task is one
//     machine of a multi-machine launch: num_machines = tasks, machine_rank = task rank (node id under SLURM);
//     main_process_ip defaults to the first node of SLURM_JOB_NODELIST under SLURM;
//   - several tasks per machine: every task is one process: acc starts exactly one worker with RANK = the task's
//     rank, WORLD_SIZE = the number of tasks, LOCAL_RANK = its rank on the machine.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace acc::launcher {

struct SchedulerInfo {
  std::string name;           // "SLURM", "Open MPI", "MPICH", "MVAPICH"
  int rank = 0, size = 1;     // task rank and count
  int local_rank = 0, local_size = 1;
  int node_rank = -1, nodes = -1;  // when the scheduler says (SLURM)
  std::string first_node;     // SLURM: the first host of the job's node list
  // Variable names, for provenance ("SLURM_PROCID").
  std::string rank_var, size_var, local_rank_var, local_size_var, node_rank_var, nodes_var;
  bool one_per_machine() const { return local_size == 1; }
};

// mode: "auto" (detect), "none", "slurm", "mpi". Throws std::runtime_error when the mode is forced but its variables
// are missing or malformed.
std::optional<SchedulerInfo> detect_scheduler(const std::map<std::string, std::string>& env, const std::string& mode);

// First host of a SLURM host list: "node[03-05,7],gpu1" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace acc::launcher
