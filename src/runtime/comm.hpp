// Collectives over one c10d process group (TCPStore rendezvous): Gloo for CPU tensors (behind the shared-memory
// backend of runtime/shm_backend.hpp where every rank of the group is on this machine) and, when the job trains on
// CUDA, NCCL (from the CUDA plugin) for CUDA tensors; c10d routes each call by device.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "runtime/process_state.hpp"

namespace c10d {
class ProcessGroup;
}

namespace acc::core {

enum class ReduceOp { Sum, Mean, Max };

// An asynchronous collective in flight; wait() rethrows the backend's error.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  virtual void wait() = 0;
};

class Comm {
 public:
  // Joins the group: rank 0 hosts the TCPStore at master_addr:master_port, every rank connects.
  // cuda_device >= 0: this rank trains on that CUDA device, and CUDA tensors go through NCCL (the CUDA
  // plugin must be loaded). Every rank must make the same choice; a mixed job is refused on all ranks.
  static std::shared_ptr<Comm> connect(const ProcessState& state, std::chrono::milliseconds timeout,
                                       int cuda_device = -1);
  ~Comm();

  int rank() const;
  int size() const;
  // A group of some of this group's ranks (`ranks`, in their new order; this rank must be one of them), as
  // torch.distributed.new_group: every member calls it with the same ranks and `tag`, which names the group's
  // rendezvous keys (distinct for every group made in a job).
  std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks, const std::string& tag) const;
  // What carries this group's CPU collectives: "shared memory", or "gloo (why not shared memory)".
  const std::string& cpu_transport() const;
  void all_reduce(at::Tensor& t, ReduceOp op);
  std::unique_ptr<PendingWork> all_reduce_sum_async(at::Tensor& t);
  // Concatenation along dim 0 of every rank's tensor, in rank order; dim-0 sizes may differ.
  at::Tensor all_gather_cat(const at::Tensor& t);
  // Sharded data parallel: `in` (1-D) holds size() equal slices; rank r's `out` gets the sum of every rank's slice r.
  // `in` is scratch: its contents are undefined afterwards. (Gloo's reduce-scatter is an all-reduce of a copy of its
  // input: for CPU tensors the all-reduce runs on `in` itself, which saves that copy; NCCL's is a true one.)
  std::unique_ptr<PendingWork> reduce_scatter_sum_async(at::Tensor& out, at::Tensor& in);
  // The inverse: `out` (size() times `in`'s length) gets every rank's `in`, in rank order. (For CPU tensors, one
  // broadcast per rank straight into `out`: Gloo's all-gather receives into a temporary as large as `out`.)
  void all_gather_into(at::Tensor& out, at::Tensor& in);
  std::unique_ptr<PendingWork> all_gather_into_async(at::Tensor& out, at::Tensor& in);
  void broadcast(at::Tensor& t, int root);
  void barrier();
  // The c10d group itself, for code that calls c10d directly (include
  // <torch/csrc/distributed/c10d/ProcessGroup.hpp> to use it). Its errors are c10d's, not DistributedError.
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const;

 private:
  struct Impl;
  explicit Comm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace acc::core
