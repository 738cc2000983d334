// enable_cpu_affinity (Accelerate's set_numa_affinity): each local process pinned to its share of the CPU cores.
#pragma once
#include <string>
#include <vector>

namespace acc::core {

// The cores local process `local_rank` of `local_world` gets out of `allowed` (the cores the process may use),
// grouped by NUMA node (`nodes`: each node's cores; empty: one node). With as many processes as nodes or more, the
// processes are spread over the nodes in order and each node's allowed cores split evenly, in order, among the
// processes on it; with fewer, each process takes whole nodes. Never empty while `allowed` is not: a process with
// no share of its own (more processes than cores) shares one core.
std::vector<int> cpu_share(const std::vector<int>& allowed, const std::vector<std::vector<int>>& nodes, int local_rank,
                           int local_world);

// Linux's cpulist format ("0-3,8,10-11") -> core numbers; throws std::invalid_argument naming `what` when malformed.
std::vector<int> parse_cpu_list(const std::string& text, const std::string& what);

// Pins the calling thread, and so the threads it starts from now on, to its share of the cores the process may use
// (sched_getaffinity), NUMA nodes read from /sys/devices/system/node. Returns the cores set. Threads that already
// exist keep theirs, as with Accelerate's os.sched_setaffinity(0, ...). Throws std::runtime_error when the kernel
// refuses.
std::vector<int> pin_to_cpu_share(int local_rank, int local_world);

}  // namespace acc::core
