// Tensor parallelism (Megatron-LM's scheme, as transformers' tp_plan and torch's parallelize_module apply it):
// a model's layers are split over the ranks of one group. A family's plan (models/parallel_forward.hpp) names its
// layers by dotted-name patterns: column-wise layers hold a slice of the output features (q/k/v, gate/up: each rank
// runs its own attention heads), row-wise layers a slice of the input features (o, down: their partial outputs are
// summed by an all-reduce, the bias added once after it), the token embedding a slice of the vocabulary (ids outside
// it give zeros, then an all-reduce), and the language-model head its vocabulary slice too, so that the loss is
// computed without gathering the logits (torch's loss_parallel). Every rank of the group gets the same batch; the
// loss, the replicated parameters and their gradients come out the same on every rank.
//
// Checkpoints and state dicts speak of whole tensors: the split records each parameter's placement on the model
// (models/placement.hpp), which whole_state gathers and local_state slices.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <string>

#include "models/placement.hpp"

namespace c10d {
class ProcessGroup;
}

namespace acc::core {
class Comm;
class Model;
}  // namespace acc::core

namespace acc::core::tp {

// The collectives over a libacc group (its errors become DistributedError), or over a c10d process group; `dim`
// names the mesh dimension.
Collectives collectives_of(std::shared_ptr<Comm> comm, const std::string& dim = "tp");
Collectives collectives_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size,
                           const std::string& dim = "tp");

struct Options {
  // Megatron's sequence parallelism: between the split layers (norms, residuals, dropout) each rank holds its slice
  // of the sequence, [batch, time / size, hidden], instead of the whole activation: a column-wise region starts with
  // an all-gather along time (reduce-scatter in backward) and a row-wise layer ends with a reduce-scatter (all-gather
  // in backward) instead of the all-reduce. The replicated parameters' gradients are then summed over the group.
  // Every forward's sequence length must be a multiple of the size, without a key/value cache (generate: no).
  bool sequence_parallel = false;
};

// Splits `model` over `group` by its family's plan: each planned layer keeps its slice of the weights (new parameter
// tensors: before an optimizer holds them), their placements are recorded, and the model's forward uses its local
// heads, the vocabulary-parallel embedding and head, and the loss without gathered logits. Every rank must hold the
// same whole weights (load or seed alike) and call it alike. Refused, naming why, before anything changes: a model
// without a plan (a TorchScript module, the built-in MLP, a user's own modules), a model already split, one with a
// LoRA adapter, a size that does not divide the split dimensions.
void parallelize(Model& model, std::shared_ptr<const Collectives> group, const Options& options = {});
// Whether `model` is split by tensor parallelism.
bool is_split(const Model& model);

// Megatron's f and g operators and the gathers, as autograd functions over the group:
// identity forward, all-reduce backward (where a replicated activation enters column-wise layers);
at::Tensor enter(const at::Tensor& x, const Collectives& g);
// all-reduce forward, identity backward (row-wise layers' partial outputs);
at::Tensor reduce(const at::Tensor& x, const Collectives& g);
// all-gather along the last dimension forward, this rank's slice backward (vocabulary-parallel logits to whole).
at::Tensor gather_last(const at::Tensor& x, const Collectives& g);
// Sequence parallelism, along dim 1 ([batch, time, ...]): all-gather forward, reduce-scatter backward;
at::Tensor gather_sequence(const at::Tensor& x, const Collectives& g);
// reduce-scatter forward, all-gather backward.
at::Tensor scatter_sequence(const at::Tensor& x, const Collectives& g);

// Cross entropy over vocabulary-parallel logits [N, V / size] (this rank's classes start at rank * V / size)
// against targets [N]: max, sum of exponentials and the target logit are all-reduced, never the logits. The mean
// over the targets other than `ignore_index`, as torch's cross_entropy (and loss_parallel) gives it; with `sum`, their
// sum (context parallelism adds the sums over its group).
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                        const Collectives& g, bool sum = false);

}  // namespace acc::core::tp
