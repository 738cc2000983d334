// Who this process is in the job: read from the torchrun / Accelerate environment contract.
#pragma once
#include <map>
#include <string>

namespace acc::core {

struct ProcessState {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;

  bool distributed() const { return world_size > 1; }
  // RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; falls back to the MPI
  // (OMPI_COMM_WORLD_*) and SLURM (SLURM_PROCID, ...) variables. Throws std::invalid_argument naming
  // the variable when a value is malformed or inconsistent.
  static ProcessState from_environment(const std::map<std::string, std::string>& env);
};

}  // namespace acc::core
