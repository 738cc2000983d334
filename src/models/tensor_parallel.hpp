// Tensor parallelism (Megatron-LM's scheme, as transformers' tp_plan and torch's parallelize_module apply it):
// a model's layers are split over the ranks of one group. A family's plan names its layers by dotted-name
// patterns, as transformers' base_model_tp_plan does: column-wise layers hold a slice of the output features
// (q/k/v, gate/up: each rank runs its own attention heads), row-wise layers a slice of the input features
// (o, down: their partial outputs are summed by an all-reduce, the bias added once after it), the token
// embedding a slice of the vocabulary (ids outside it give zeros, then an all-reduce), and the language-model
// head its vocabulary slice too, so that the loss is computed without gathering the logits (torch's
// loss_parallel). Every rank of the group gets the same batch; the loss, the replicated parameters and their
// gradients come out the same on every rank.
//
// Checkpoints and state dicts speak of whole tensors: Sharding records, per parameter, the dimension it was
// split along, and full_state gathers them (slice_state is the way back).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.hpp"

namespace c10d {
class ProcessGroup;
}

namespace acc::core {
class Comm;
class Model;
}  // namespace acc::core

namespace acc::core::tp {

// The ranks a model is split over, and the two collectives the split needs.
struct Group {
  int rank = 0, size = 1;
  std::function<void(at::Tensor&)> all_reduce_sum;  // in place
  std::function<void(at::Tensor&)> all_reduce_max;  // in place
  // Every rank's tensor (equal shapes), concatenated along dim 0 in rank order.
  std::function<at::Tensor(const at::Tensor&)> all_gather;
  // The sum over the ranks of a tensor of size() equal blocks along dim 0: this rank's block of it.
  std::function<at::Tensor(const at::Tensor&)> reduce_scatter;
};
// Over a libacc group (its errors become DistributedError), or over a c10d process group.
Group group_of(std::shared_ptr<Comm> comm);
Group group_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size);

// How a plan splits a layer.
enum class Style {
  Colwise,         // output features (and the bias): nn.Linear's weight dim 0, Conv1D's dim 1
  Rowwise,         // input features; the output is all-reduced, then the (whole) bias added
  RowwisePartial,  // input features, output left partial: the enclosing module reduces (Mixtral's experts' w2)
  VocabEmbedding,  // an embedding's rows (the vocabulary); ids of other ranks give zeros, then an all-reduce
};
const char* style_name(Style s);

struct PlanEntry {
  std::string pattern;  // a dotted module name; "*" stands for one name component (a layer's index)
  Style style;
  int64_t packed = 1;  // column-wise weights that pack several projections (GPT-2's c_attn: q, k, v = 3)
};
using Plan = std::vector<PlanEntry>;

// Where a parameter's local tensor lies in the whole one.
struct Shard {
  int64_t dim = 0;
  int64_t packed = 1;  // the whole dimension holds `packed` equal blocks; each rank has a slice of each
  std::vector<int64_t> whole_shape;
};

struct Options {
  // Megatron's sequence parallelism: between the split layers (norms, residuals, dropout) each rank holds its slice
  // of the sequence, [batch, time / size, hidden], instead of the whole activation: a column-wise region starts with
  // an all-gather along time (reduce-scatter in backward) and a row-wise layer ends with a reduce-scatter (all-gather
  // in backward) instead of the all-reduce. The replicated parameters' gradients are then summed over the group.
  // Every forward's sequence length must be a multiple of the size, without a key/value cache (generate: no).
  bool sequence_parallel = false;
};

// What a split model shares with its layers.
struct Sharding {
  Group group;
  bool sequence_parallel = false;
  std::map<std::string, Shard> shards;  // the split parameters by dotted name; the others are replicated
  std::map<std::string, Style> layers;  // the split modules and their style
};

// A layer a plan can split (hf::Linear, GPT-2's Conv1D, the embeddings, the built-in GPT's layers). Its forward
// asks through the helpers below; they do nothing until the layer was split.
class Layer {
 public:
  virtual ~Layer() = default;
  // The dimension of "weight" that indexes output features: 0 for nn.Linear ([out, in]) and embeddings
  // ([vocab, dim]), 1 for Conv1D ([in, out]).
  virtual int64_t output_dim() const = 0;
  virtual bool is_embedding() const { return false; }

  // Set by parallelize.
  void split(Style style, std::shared_ptr<const Sharding> sharding) {
    style_ = style;
    sharding_ = std::move(sharding);
  }
  bool splits_input() const { return sharding_ && (style_ == Style::Rowwise || style_ == Style::RowwisePartial); }
  // A row-wise layer's output from its partial product (computed without bias): reduced unless partial, then
  // the bias (undefined: none) added.
  at::Tensor rowwise_output(const at::Tensor& partial, const at::Tensor& bias) const;
  // An embedding's lookup: the whole table's, or over a vocabulary slice. `padding_idx` (a whole-vocabulary id, -1:
  // none) is nn.Embedding's: that row is read but gets no gradient.
  at::Tensor embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx = -1) const;
  // Whole-vocabulary row `id` of a weight with `rows` local rows: its index here, -1 where another rank holds it (or
  // id is -1).
  int64_t local_row(int64_t id, int64_t rows) const;

 private:
  Style style_ = Style::Colwise;
  std::shared_ptr<const Sharding> sharding_;
};

// A model family with a plan. Its forward runs this rank's heads and vocabulary slice once split.
class Parallelizable {
 public:
  virtual ~Parallelizable() = default;
  // The family's plan for `size` ranks. A size that does not divide what the plan splits (attention heads, key/value
  // heads, intermediate size, vocabulary) is std::invalid_argument naming the config field and both numbers.
  virtual Plan tensor_parallel_plan(int size) const = 0;
  const Sharding* tensor_parallel() const { return tp_.get(); }
  void set_tensor_parallel(std::shared_ptr<const Sharding> s) { tp_ = std::move(s); }

 protected:
  std::shared_ptr<const Sharding> tp_;
};

// Splits `model` over `group` by its family's plan: each planned layer keeps its slice of the weights (new
// parameter tensors: before an optimizer holds them), and the model's forward uses its local heads, the
// vocabulary-parallel embedding and head, and the loss without gathered logits. Every rank must hold the same
// whole weights (load or seed alike) and call it alike. Refused, naming why, before anything changes: a model
// without a plan (a TorchScript module, the built-in MLP, a user's own modules), a model already split, one with a
// LoRA adapter, a size that does not divide the split dimensions.
void parallelize(Model& model, const Group& group, const Options& options = {});

// The model's sharding (nullptr: not split).
const Sharding* sharding_of(const Model& model);

// Whole tensors from this rank's (collective over the group: every rank calls it alike). Names not split pass
// through. `local` holds (name, local tensor) pairs, as Model::state gives them.
NamedTensors full_state(const Sharding& sharding, const NamedTensors& local);
at::Tensor full_tensor(const Sharding& sharding, const std::string& name, const at::Tensor& local);
// This rank's slices of whole tensors (no communication).
NamedTensors slice_state(const Sharding& sharding, const NamedTensors& whole);
at::Tensor slice_tensor(const Sharding& sharding, const std::string& name, const at::Tensor& whole);
// The whole tensor from every rank's part, in rank order (no communication): of each of the `packed` blocks along
// `dim`, the ranks' slices in rank order. full_tensor's order, and the checkpoints' (joining parts read from files).
at::Tensor join_parts(const std::vector<at::Tensor>& parts, int64_t dim, int64_t packed);

// The gradient norm over the whole model (torch's clip_grad_norm_ total): split parameters' gradients count every
// rank's slice, replicated ones once. Collective over the group.
at::Tensor grad_norm(const Model& model, const Sharding& sharding, double norm_type);

// Megatron's f and g operators and the gather, as autograd functions over the group:
// identity forward, all-reduce backward (where a replicated activation enters column-wise layers);
at::Tensor enter(const at::Tensor& x, const Group& g);
// all-reduce forward, identity backward (row-wise layers' partial outputs);
at::Tensor reduce(const at::Tensor& x, const Group& g);
// all-gather along the last dimension forward, this rank's slice backward (vocabulary-parallel logits to whole).
at::Tensor gather_last(const at::Tensor& x, const Group& g);
// Sequence parallelism, along dim 1 ([batch, time, ...]): all-gather forward, reduce-scatter backward;
at::Tensor gather_sequence(const at::Tensor& x, const Group& g);
// reduce-scatter forward, all-gather backward.
at::Tensor scatter_sequence(const at::Tensor& x, const Group& g);

// Where a replicated activation [batch, time, hidden] enters column-wise layers: `enter`, or with sequence
// parallelism `gather_sequence`. And where partial outputs leave them: `reduce`, or `scatter_sequence`.
at::Tensor enter_region(const at::Tensor& x, const Sharding& s);
at::Tensor leave_region(const at::Tensor& x, const Sharding& s);
// This rank's slice of the sequence of `x` [batch, time, ...] (no communication, no gradient exchange: for inputs
// such as position ids).
at::Tensor local_sequence(const at::Tensor& x, const Sharding& s);
// Sequence parallelism needs every forward's length to be a multiple of the size and no key/value cache:
// std::invalid_argument naming `model`, the length and the size otherwise.
void check_sequence(const Sharding& s, int64_t length, bool cache, const std::string& model);

// Cross entropy over vocabulary-parallel logits [N, V / size] (this rank's classes start at rank * V / size)
// against targets [N]: max, sum of exponentials and the target logit are all-reduced, never the logits. The mean
// over the targets other than `ignore_index`, as torch's cross_entropy (and loss_parallel) gives it; with `sum`, their
// sum (context parallelism adds the sums over its group).
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                        const Group& g, bool sum = false);

}  // namespace acc::core::tp
