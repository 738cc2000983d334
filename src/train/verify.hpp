// Debug mode (`debug: true`, ACCELERATE_DEBUG_MODE), Accelerate's verify_operation: before a collective of the
// Accelerator, every process describes what it is about to send (the operation, its argument, dtype, device,
// shape) in one small all-reduce, and all compare. A mismatch that would hang the job or mix up data becomes the
// same DistributedError on every process, listing each process's description; the group stays usable after it.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "runtime/comm.hpp"

namespace acc::core {

enum class CollectiveOp : int64_t {
  gather = 1,
  gather_for_metrics,
  reduce,
  broadcast,
  pad_across_processes,
  gather_object,
  gather_object_for_metrics,
  broadcast_object,
};

// What one process calls: `arg` is the reduction (reduce), the source process (broadcasts) or the padded dim
// (pad_across_processes); `t` is the tensor sent (null for the object collectives, whose sizes may differ).
// What must agree: the operation and arg always; for gather, dtype, device and every dim but the first (0-d
// counts as [1]); for reduce and broadcast, dtype, device and the whole shape; for pad, the number of dims.
void verify_collective(Comm& comm, CollectiveOp op, int64_t arg, const at::Tensor* t);

}  // namespace acc::core
