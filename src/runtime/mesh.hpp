// The process mesh: Accelerate's ParallelismConfig dimensions laid over the job's ranks as torch's DeviceMesh lays
// them, and a c10d group for each dimension and each flattened dimension a collective needs.
//
// Dimensions, outermost first (torchtitan's order; Accelerate's _get_mesh order after pp, which Accelerate lacks):
// pp, dp_replicate, dp_shard, cp, sp, tp. Ranks are numbered row-major over them (tp innermost):
// rank = ((((p * dp_replicate + r) * dp_shard + s) * cp + c) * sp + q) * tp + t, as init_device_mesh's
// torch.arange(world).view(sizes). A group holds the ranks that differ only in its dimensions, ordered row-major over
// those dimensions (DeviceMesh's _flatten), so group rank 0 is its lowest global rank.
//   pp, dp_replicate, dp_shard, cp, sp, tp   one dimension each (cp and sp are exclusive: one of them is 1; pp's
//                ranks hold different pipeline stages and read the same batch, so no flattened group holds pp)
//   dp           dp_replicate x dp_shard: ranks that read different batches (loaders, gather_for_metrics)
//   dp_shard_cp  dp_shard x cp x sp: what FSDP shards over (CP and SP ranks hold different tokens of the same batch;
//                DeepSpeed's ZeRO shards over its sequence-data-parallel group the same way)
//   dp_cp        dp_replicate x dp_shard x cp x sp: ranks that hold the same piece of the model (gradients are
//                averaged over it, weights broadcast over it)
#pragma once
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm.hpp"

namespace acc::core {

// The sizes of the six dimensions; their product is the number of processes. (sp and pp last here, so that the
// four-size initialisers of before them stay what they were; in the mesh sp lies between cp and tp, pp outermost.)
struct MeshSizes {
  int dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, sp = 1, pp = 1;
  int total() const { return pp * dp_replicate * dp_shard * cp * sp * tp; }
  // "dp_replicate 2 x dp_shard 1 x cp 1 x tp 2" (pp and sp named where they are above 1).
  std::string text() const;
};
constexpr int kMeshDims = 6;

// The rank layout alone (no processes): which ranks make each group. Throws std::invalid_argument for a size
// below 1, a rank outside the mesh, or an unknown group name (naming the known ones).
class MeshLayout {
 public:
  MeshLayout(MeshSizes sizes, int rank);
  // pp, dp_replicate, dp_shard, cp, sp, tp, then the flattened dp, dp_shard_cp, dp_cp.
  static const std::vector<std::string>& group_names();
  const MeshSizes& sizes() const { return sizes_; }
  int global_rank() const { return rank_; }
  // This rank's place along each dimension (pp, dp_replicate, dp_shard, cp, sp, tp).
  const std::array<int, kMeshDims>& coordinate() const { return coord_; }
  int size(const std::string& group) const;
  int rank(const std::string& group) const;  // this rank's place in its group of that name
  // The global ranks of this rank's group of that name, in group-rank order.
  std::vector<int> members(const std::string& group) const;
  // Which group of that name this rank is in: 0 .. world / size(group) - 1 (the row-major index of the other
  // dimensions' coordinates), for naming the group's rendezvous keys.
  int group_index(const std::string& group) const;

 private:
  // The dimensions (indices into coordinate()) a group spans.
  const std::vector<int>& dims(const std::string& group) const;
  MeshSizes sizes_;
  std::array<int, kMeshDims> extent_{};
  std::array<int, kMeshDims> coord_{};
  int rank_ = 0;
};

// The mesh over a live process group. Construction is a collective: every rank of `world` builds the same mesh
// (same sizes, in the same order of construction), and each joins the groups it belongs to. A group that is the
// whole world is `world` itself; a group of one rank is made when first asked for (it needs no peer); the others are
// made here, once per set of members (dp_shard_cp is dp_shard's group without cp). Meshes made one after the other in
// a process get distinct rendezvous keys.
class ProcessMesh {
 public:
  ProcessMesh(std::shared_ptr<Comm> world, MeshSizes sizes);
  const MeshLayout& layout() const { return layout_; }
  const MeshSizes& sizes() const { return layout_.sizes(); }
  int size(const std::string& group) const { return layout_.size(group); }
  int rank(const std::string& group) const { return layout_.rank(group); }
  // This rank's c10d group of that name (std::invalid_argument for an unknown name).
  std::shared_ptr<Comm> group(const std::string& group) const;
  const std::shared_ptr<Comm>& world() const { return world_; }

 private:
  std::shared_ptr<Comm> world_;
  MeshLayout layout_;
  int generation_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<Comm>> groups_;  // by group_names() order; null until made
};

}  // namespace acc::core
