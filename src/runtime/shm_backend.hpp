// Collectives among the processes of one machine through a shared-memory segment, as a c10d Backend for CPU
// tensors beside Gloo: the gradient all-reduce of a one-machine CPU job no longer goes through the kernel's TCP
// stack on the cores that compute. (PyTorch's wheel has no MPI, UCC or oneCCL backend: docs/launcher.md.)
//
// What it does itself, on contiguous or not CPU tensors of float32/64, float16, bfloat16 and the integer types:
// allreduce (SUM, AVG, MAX, MIN), reduce_scatter_single / _reduce_scatter_base (and their coalesced lists),
// all_gather_single / _allgather_base (and coalesced), allgather of one tensor into a list, broadcast, barrier.
// Everything else (other reduce ops or dtypes, several tensors per call, gather, scatter, all-to-all, send/recv)
// goes to the Gloo backend it was given. Sums are a left fold in rank order ((x0 + x1) + x2) + ..., rounded to the
// tensor's dtype after every addition as Gloo does: for 2 ranks Gloo's result bit for bit; for 3 or more Gloo's
// ring adds in another order per chunk (within (n-1) roundings of each other).
//
// The segment: rank 0 names it (a random name, after the launcher's ACC_SHM_JOB where set) and creates it, at most
// half of what /dev/shm has free and 64 MiB; every rank maps it, and the name is unlinked as soon as every rank has,
// so nothing is left in /dev/shm even if a process is killed later. A process killed before then: the surviving
// ranks, which all know the name, unlink it at once (a rank waiting for a dead one fails then, not at the timeout),
// and acc launch removes its job's names once its processes are gone (a Ctrl-C stops them all). Ranks meet through two atomic
// counters each, steps posted and steps read (a short spin, then a futex sleep, so a waiting rank does not take a
// core from computation). On the caller's thread a collective is split-phase: issuing it posts this rank's part and
// returns; the peers' parts are read when its work is waited for, so computation goes on meanwhile.
// A waiting rank gives up at the group's timeout, when a peer's process is gone, or when a peer gave up, naming it.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace acc::core {

// ACC_SHM_COLLECTIVES: unset, 1/true/on (the default): shared memory where every rank of a group is on this
// machine; 0/false/off: Gloo. Throws std::invalid_argument naming the variable for another value.
bool shm_collectives_enabled();

// Whether the shared memory carries `t` itself: a dense CPU tensor of float32/64, float16, bfloat16 or an integer
// type (every rank decides alike from the call alone); other tensors go to Gloo.
bool shm_carries(const at::Tensor& t);

// This process's machine as far as sharing a segment goes: host name | boot id | mount namespace (the same
// /dev/shm) | pid namespace (peers' processes visible, for the liveness checks) | ACC_SHM_MACHINE where set (a
// label that tells apart processes the kernel cannot: containers that share /dev/shm and process ids).
std::string machine_identity();

// Every rank's machine_identity() (or "off" where it set ACC_SHM_COLLECTIVES=0), in rank order. Collective over
// `store`.
std::vector<std::string> machine_identities(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout);

// Fails a shared-memory backend's collectives from outside, waking its peers with `why` (they fail at once instead
// of at the timeout); nothing for another backend.
void give_up_shm_backend(const c10::intrusive_ptr<c10d::Backend>& shm, const std::string& why);

// Whether the processes that reported `where` (their machine_identity(), or "off" where ACC_SHM_COLLECTIVES=0) can
// share a segment; if not, `why` names the first rank that cannot.
bool can_share_memory(const std::vector<std::string>& where, std::string* why);

// The bytes of each process's step buffer (it has two) in the segment rank 0 makes for a group of `size` processes
// where /dev/shm has `free_bytes` free, and the segment's bytes with such buffers. Throws std::invalid_argument naming
// ACC_SHM_SLOT_BYTES for a bad value of it.
size_t shm_slot_bytes(int size, uint64_t free_bytes);
size_t shm_segment_bytes(int size, size_t slot_bytes);

// The shared-memory backend of a group, or null where it cannot serve: the ranks are not all on one machine (or
// do not share /dev/shm and process ids), a rank set ACC_SHM_COLLECTIVES=0, or the segment could not be made
// (`why` says which). Collective over `store` (the group's): every rank gets the same answer. `gloo` does the rest.
c10::intrusive_ptr<c10d::Backend> make_shm_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   const c10::intrusive_ptr<c10d::Backend>& gloo,
                                                   std::chrono::milliseconds timeout, std::string* why);

}  // namespace acc::core
