#include "runtime/process_state.hpp"

#include <atomic>
#include <stdexcept>

namespace acc::core {
namespace {

const std::string* find_first(const std::map<std::string, std::string>& env, std::initializer_list<const char*> names,
                              std::string& which) {
  for (const char* n : names) {
    auto it = env.find(n);
    if (it != env.end() && !it->second.empty()) {
      which = n;
      return &it->second;
    }
  }
  return nullptr;
}

int parse_int(const std::string& name, const std::string& text, int min) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < min || v > 1 << 24)
    throw std::invalid_argument("environment variable " + name + "='" + text +
                                "' is not an integer >= " + std::to_string(min));
  return static_cast<int>(v);
}

int read_int(const std::map<std::string, std::string>& env, std::initializer_list<const char*> names, int fallback,
             int min) {
  std::string which;
  const std::string* v = find_first(env, names, which);
  return v ? parse_int(which, *v, min) : fallback;
}

}  // namespace

ProcessState ProcessState::from_environment(const std::map<std::string, std::string>& env) {
  ProcessState s;
  s.world_size = read_int(env, {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1, 1);
  s.rank = read_int(env, {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0, 0);
  s.local_rank =
      read_int(env, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, s.rank, 0);
  s.local_world_size =
      read_int(env, {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, s.world_size, 1);
  std::string which;
  if (const std::string* a = find_first(env, {"MASTER_ADDR"}, which)) s.master_addr = *a;
  s.master_port = read_int(env, {"MASTER_PORT"}, 29500, 1);
  if (s.master_port > 65535)
    throw std::invalid_argument("environment variable MASTER_PORT=" + std::to_string(s.master_port) +
                                " is not a TCP port (1-65535)");
  if (s.rank >= s.world_size)
    throw std::invalid_argument("RANK=" + std::to_string(s.rank) +
                                " is not below WORLD_SIZE=" + std::to_string(s.world_size));
  if (s.local_rank >= s.local_world_size)
    throw std::invalid_argument("LOCAL_RANK=" + std::to_string(s.local_rank) +
                                " is not below LOCAL_WORLD_SIZE=" + std::to_string(s.local_world_size));
  return s;
}

namespace {
std::atomic<int> ram_efficient_holders{0};
}

void hold_ram_efficient_loading(bool on) { ram_efficient_holders += on ? 1 : -1; }

bool ram_efficient_loading() { return ram_efficient_holders.load() > 0; }

namespace {
std::atomic<int> zero3_init_holders{0};
}

void hold_zero3_init(bool on) { zero3_init_holders += on ? 1 : -1; }

bool zero3_init() { return zero3_init_holders.load() > 0; }

}  // namespace acc::core
