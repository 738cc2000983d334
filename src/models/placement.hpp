// Where each parameter of a model lives across the process mesh (in the spirit of DTensor's placements): whole and
// replicated, split along a dimension by tensor parallelism (packed or not), and a flat shard at an offset under
// FSDP / ZeRO-3. The model owns the record (Model::placements); each mechanism writes it when it applies
// (src/parallel), and every consumer reads it: strategies, gradient clipping, state getters, save_model, checkpoints.
// No consumer asks a mechanism where a tensor is.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/batch.hpp"

namespace acc::core {

class Model;

// The collectives over one dimension of the process mesh (made from a c10d group by src/parallel).
struct Collectives {
  std::string dim;  // the mesh dimension: "tp", "cp"
  int rank = 0, size = 1;
  std::function<void(at::Tensor&)> all_reduce_sum;  // in place
  std::function<void(at::Tensor&)> all_reduce_max;  // in place
  // Every rank's tensor (equal shapes), concatenated along dim 0 in rank order.
  std::function<at::Tensor(const at::Tensor&)> all_gather;
  // The sum over the ranks of a tensor of size equal blocks along dim 0: this rank's block of it.
  std::function<at::Tensor(const at::Tensor&)> reduce_scatter;
  // This rank's tensor to rank (rank + offset) mod size; gives back the tensor of rank (rank - offset) mod size (the
  // ring of context parallelism; empty where the group was made without it).
  std::function<at::Tensor(const at::Tensor&, int offset)> rotate;
  // A tensor of size equal blocks along dim 0: block j to rank j; gives back the blocks received, in rank order (the
  // heads' exchange of Ulysses sequence parallelism; empty where the group was made without it).
  std::function<at::Tensor(const at::Tensor&)> all_to_all;
};

struct Placement {
  // Split along `dim` of the whole parameter over `over`'s ranks: the dimension holds `packed` equal blocks (GPT-2's
  // c_attn packs q, k and v: 3), and each rank holds its slice of each, in rank order.
  struct Split {
    int64_t dim = 0;
    int64_t packed = 1;
    std::shared_ptr<const Collectives> over;
  };
  // Pieces of the (local) parameter flattened: this rank holds elements [offset, offset + numel) of each range,
  // sharded over the mesh dimension `over` (FSDP, ZeRO-3: "dp_shard_cp").
  struct Flat {
    std::string over;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, numel)
  };
  std::optional<Split> split;
  std::optional<Flat> flat;
  std::vector<int64_t> whole_shape;  // the whole parameter's (before any split)
};

// A model's placements by dotted parameter name; a name without one is whole on every rank.
class Placements {
 public:
  const Placement* find(const std::string& name) const;
  // The split of `name` (nullptr: not split).
  const Placement::Split* split_of(const std::string& name) const;
  bool any_split() const { return splits_ > 0; }
  void set_split(const std::string& name, Placement::Split split, std::vector<int64_t> whole_shape);
  void add_flat(const std::string& name, const std::string& over, int64_t offset, int64_t numel);
  const std::map<std::string, Placement>& all() const { return by_name_; }

 private:
  std::map<std::string, Placement> by_name_;
  int splits_ = 0;
};

// The whole tensor of `name` from this rank's part (a collective over the split's group: every rank calls it alike);
// a name not split passes through.
at::Tensor whole_tensor(const Placements& p, const std::string& name, const at::Tensor& local);
NamedTensors whole_state(const Placements& p, const NamedTensors& local);
// This rank's part of a whole tensor (no communication). A shape that is not the whole parameter's is
// std::invalid_argument naming the tensor.
at::Tensor local_tensor(const Placements& p, const std::string& name, const at::Tensor& whole);
NamedTensors local_state(const Placements& p, const NamedTensors& whole);
// The whole tensor from every rank's part, in rank order (no communication): of each of the `packed` blocks along
// `dim`, the ranks' slices in rank order (whole_tensor's order, and the checkpoints' joining parts read from files).
at::Tensor join_parts(const std::vector<at::Tensor>& parts, int64_t dim, int64_t packed);
// Rank `rank`'s part of `whole` along `dim` (of each packed block, its slice): join_parts's inverse.
at::Tensor part_of(const at::Tensor& whole, int64_t dim, int64_t packed, int rank, int size);

// torch's clip_grad_norm_ total over the whole model: split parameters' gradients count every rank's slice
// (collective over their group), the others once.
at::Tensor grad_norm(const Model& model, double norm_type, const std::set<std::string>& left_out = {});

}  // namespace acc::core
