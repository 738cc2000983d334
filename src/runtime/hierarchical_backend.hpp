// The CPU all-reduce of a group whose processes are on several machines, in two levels: the processes of each
// machine sum through its shared memory (runtime/shm_backend.hpp), the machines' first processes ("leaders") sum
// those partial results over Gloo among themselves, and each leader broadcasts the total through its machine's
// shared memory. Only the leaders' bytes cross the network, once per machine instead of once per process.
//
// As a c10d Backend in front of the group's Gloo: allreduce (SUM, AVG, MAX, MIN) of one dense CPU tensor of the
// shared-memory dtypes goes the two-level way, synchronously (done when the call returns); everything else goes to
// Gloo. Sums are added machine by machine (in rank order inside one, then Gloo's order between leaders), so they
// may differ from Gloo's flat ring by the rounding of n-1 additions per element.
//
// A failure fails within the group's timeout: a dead or stalled peer on this machine through the shared-memory
// checks (naming it), a leader's Gloo error through its machine's segment to the processes waiting on it.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace acc::core {

// Makes a Gloo backend of `size` ranks over `store` (the caller's devices and timeout).
using GlooFactory =
    std::function<c10::intrusive_ptr<c10d::Backend>(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)>;

// The two-level backend of a group, or null where it has nothing to do: `where` (every rank's machine_identity(),
// or "off") puts the ranks on one machine, one per machine, or some rank opted out; or a machine's segment could not
// be made (`why` says which; every rank gets the same answer). Collective over `store` (the group's). `shape` gets a
// line for people ("2 machines x 2 processes").
c10::intrusive_ptr<c10d::Backend> make_hierarchical_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                            int size, const std::vector<std::string>& where,
                                                            const c10::intrusive_ptr<c10d::Backend>& gloo,
                                                            const GlooFactory& make_gloo,
                                                            std::chrono::milliseconds timeout, std::string* why,
                                                            std::string* shape);

}  // namespace acc::core
