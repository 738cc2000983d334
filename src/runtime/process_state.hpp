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

// FSDP's cpu_ram_efficient_loading, as transformers applies it (is_fsdp_enabled() and not is_local_dist_rank_0()):
// while an Accelerator of a distributed job with use_fsdp and fsdp_plugin.cpu_ram_efficient_loading lives in this
// process and the process is not its machine's first (LOCAL_RANK != 0), from_pretrained reads no weights: the
// parameters are left uninitialised, and prepare gives every process rank 0's (the strategies broadcast them).
// Counted: set by each such Accelerator, cleared by its destruction.
void hold_ram_efficient_loading(bool on);
bool ram_efficient_loading();

// DeepSpeed's zero3_init_flag, as transformers applies it (is_deepspeed_zero3_enabled(): the accelerator's
// HfDeepSpeedConfig of stage 3 is alive): while an Accelerator of a distributed job with DeepSpeed ZeRO-3 and
// deepspeed_plugin.zero3_init_flag (null: on, Accelerate's default for stage 3) lives in this process, from_config and
// from_pretrained build the model on the meta device, and prepare makes its parameters one module at a time, keeping
// this process's shards (models/deferred.hpp). Counted: set by each such Accelerator, cleared by its destruction.
void hold_zero3_init(bool on);
bool zero3_init();

}  // namespace acc::core
