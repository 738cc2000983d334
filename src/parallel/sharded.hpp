// Sharded data parallel (ZeRO stages 1-3; FSDP's FULL_SHARD, SHARD_GRAD_OP and HYBRID_SHARD) over c10d.
//
// The trainable parameters of each unit (a wrapped module, the rest of the model being the root unit; stages 1-2:
// buckets) live in one flat buffer, padded to a multiple of the world size; the model's parameters are views into
// it. Each rank owns one contiguous slice, its shard, and the optimizer steps the pieces of parameters in it:
//   stage 1: gradients are whole until the end of backward, then reduce-scattered into the shards;
//   stage 2: each bucket's gradients are reduce-scattered as soon as backward is done with it;
//   stage 3: as 2, and the flat buffers hold no memory outside forward and backward: each unit's
//            parameters are all-gathered when needed and freed again (reshard).
// After the optimizer's step the shards are all-gathered back into the flat buffers (stages 1, 2) or wait
// for the next forward's gather (stage 3). Parameters that do not require gradients stay whole on every rank.
// With a mixed-precision policy or CPU offload the shards are fp32 / CPU copies (masters) of the flat slices.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "parallel/strategy.hpp"
#include "runtime/comm.hpp"

namespace acc::core {

struct ShardingOptions {
  int stage = 3;
  // Stage 3: free a unit's gathered parameters after its forward (FULL_SHARD) rather than after backward
  // (SHARD_GRAD_OP). Units are resharded after forward only where the model reports its units' forward.
  bool reshard_after_forward = true;
  // Dotted names of the modules that are units of their own (the wrap policy's choice).
  std::vector<std::string> units;
  // Stages 1 and 2: a unit's gradients go out in buckets of at most this many bytes (consecutive parameters), so
  // that a bucket's flat copy is all the gradient memory that is added.
  double bucket_cap_mb = 25.0;
  // FSDP's MixedPrecision policy: parameters are gathered and computed in param_dtype and gradients
  // reduce-scattered in reduce_dtype (divided by the world size first when narrower than the parameters), while the
  // shards the optimizer steps keep the parameters' own dtype (fp32 masters). Undefined: the parameters' dtype.
  at::ScalarType param_dtype = at::ScalarType::Undefined;
  at::ScalarType reduce_dtype = at::ScalarType::Undefined;
  // FSDP's cpu_offload / DeepSpeed's offload_*_device "cpu": the shards the optimizer steps (fp32 masters), their
  // gradients and the optimizer's state live in CPU memory; parameters travel to the training device to be gathered.
  bool offload = false;
  // Stage 3, units the model reports: the next unit's all-gather starts (asynchronously) when a unit's forward
  // starts (forward_prefetch), and, going backward, when a unit's backward starts ("BACKWARD_PRE") or ends
  // ("BACKWARD_POST"); at most one unit ahead, so at most two units are gathered at once besides the root (what
  // FSDP's limit_all_gathers bounds). config::Sharding says which configuration asks for which.
  bool forward_prefetch = false;
  std::string backward_prefetch;
  // Which configuration chose this strategy, for messages ("FSDP FULL_SHARD", "DeepSpeed ZeRO-2").
  std::string label;
};

// The process groups a sharded strategy works over (the process mesh's data dimensions, src/runtime/mesh.hpp).
struct ShardGroups {
  // One group for everything: ZeRO / FSDP over every process of `comm` (implicit, so a Comm is a ShardGroups).
  ShardGroups(std::shared_ptr<Comm> comm) : all(comm), shard(std::move(comm)) {}  // NOLINT(google-explicit-constructor)
  ShardGroups(std::shared_ptr<Comm> all_ranks, std::shared_ptr<Comm> shard_ranks, std::shared_ptr<Comm> replica_ranks)
      : all(std::move(all_ranks)), shard(std::move(shard_ranks)), replicas(std::move(replica_ranks)) {}
  // Every rank that holds the same piece of the model (the mesh's dp_cp; the whole job without tensor parallelism):
  // all start from its first rank's weights.
  std::shared_ptr<Comm> all;
  // The ranks whose shards make the whole (dp_shard_cp).
  std::shared_ptr<Comm> shard;
  // FSDP's HYBRID_SHARD / HSDP: the ranks that hold the same shard (dp_replicate); gradients reduce-scattered in
  // `shard` are then summed across them. Null (or one rank): no replication.
  std::shared_ptr<Comm> replicas;
};

std::unique_ptr<Strategy> make_sharded_strategy(std::shared_ptr<Model> model, c10::Device device,
                                                const ShardGroups& groups, const ShardingOptions& opts);

// Accelerate's auto-wrap policies over a model's modules: TRANSFORMER_BASED_WRAP wraps every module whose
// class is in `classes`; SIZE_BASED_WRAP every module holding at least `min_num_params` parameters not
// already in a wrapped submodule (torch's size_based_auto_wrap_policy, bottom-up); NO_WRAP nothing.
// Returns the wrapped modules' dotted names (never the root: it is always a unit).
std::vector<std::string> wrap_units(const Model& model, const std::string& policy,
                                    const std::vector<std::string>& classes, int64_t min_num_params);

}  // namespace acc::core
