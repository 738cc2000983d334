// What a model family offers parallelism, so that its own code holds none: the tensor-parallel plan it declares as
// data (module names to styles, as transformers' base_model_tp_plan), the seam a split installs on each planned layer,
// and the seams of its forward (where replicated activations enter split layers, the sequence split of context
// parallelism, the logits and the loss). Until src/parallel/parallelize.hpp fills them in, each is the whole model's.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <memory>
#include <optional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace acc::core {

// How a plan splits a layer (torch's ParallelStyle, transformers' tp_plan values).
enum class LayerStyle {
  Colwise,         // output features (and the bias): nn.Linear's weight dim 0, Conv1D's dim 1
  Rowwise,         // input features; the output is all-reduced, then the (whole) bias added
  RowwisePartial,  // input features, output left partial: the enclosing module reduces (Mixtral's experts' w2)
  VocabEmbedding,  // an embedding's rows (the vocabulary); ids of other ranks give zeros, then an all-reduce
};
const char* layer_style_name(LayerStyle s);

struct TensorParallelRule {
  std::string pattern;  // a dotted module name; "*" stands for one name component (a layer's index)
  LayerStyle style;
  int64_t packed = 1;  // column-wise weights that pack several projections (GPT-2's c_attn: q, k, v = 3)
};
using TensorParallelPlan = std::vector<TensorParallelRule>;

// What a split installs on one layer (src/parallel/tensor_parallel.cpp).
class LayerSplit {
 public:
  virtual ~LayerSplit() = default;
  virtual bool splits_input() const = 0;
  virtual at::Tensor rowwise_output(const at::Tensor& partial, const at::Tensor& bias) const = 0;
  virtual at::Tensor embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const = 0;
  virtual int64_t local_row(int64_t id, int64_t rows) const = 0;
};

// A layer a plan can split (hf::Linear, GPT-2's Conv1D, the embeddings). Its forward goes through the helpers below,
// which compute the whole layer until a split is installed.
class SplittableLayer {
 public:
  virtual ~SplittableLayer() = default;
  // The dimension of "weight" that indexes output features: 0 for nn.Linear ([out, in]) and embeddings
  // ([vocab, dim]), 1 for Conv1D ([in, out]).
  virtual int64_t output_dim() const = 0;
  virtual bool is_embedding() const { return false; }

  void set_split(std::shared_ptr<const LayerSplit> split) { split_ = std::move(split); }
  bool splits_input() const { return split_ && split_->splits_input(); }
  // A row-wise layer's output from its partial product (computed without bias), the bias (undefined: none) added.
  at::Tensor rowwise_output(const at::Tensor& partial, const at::Tensor& bias) const;
  // An embedding's lookup. `padding_idx` (a whole-vocabulary id, -1: none) is nn.Embedding's: that row is read but
  // gets no gradient.
  at::Tensor embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx = -1) const;
  // Whole-vocabulary row `id` of a weight with `rows` local rows: its index here, -1 where another rank holds it.
  int64_t local_row(int64_t id, int64_t rows) const;

 private:
  std::shared_ptr<const LayerSplit> split_;
};

// One forward's sequence, when its tokens are split over ranks (context parallelism): this rank's part of it.
class SequenceSplit {
 public:
  virtual ~SequenceSplit() = default;
  virtual int64_t local_length() const = 0;
  // This rank's part of `x` along dim 1 ([batch, time, ...]; no gradient exchange: for inputs).
  virtual at::Tensor local(const at::Tensor& x) const = 0;
  // Next-token labels for this rank's tokens: labels [batch, time] shifted left on the whole sequence (the last place
  // gets `ignore_index`), then this rank's part.
  virtual at::Tensor next_token_labels(const at::Tensor& labels, int64_t ignore_index) const = 0;
  // The attention masks of this forward: causal by place in the sequence, keys where attention_mask [batch, time] is
  // 0 hidden (undefined: none), a sliding window when window > 0. Call once before attention.
  virtual void set_masks(const at::Tensor& attention_mask, int64_t window, const at::TensorOptions& o) = 0;
  // Attention of this rank's queries q [batch, heads, local, dim] over every key of the sequence, from this rank's
  // k, v [batch, kv_heads, local, dim]. `scale`: nullopt for 1/sqrt(dim).
  virtual at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout,
                               std::optional<double> scale) const = 0;
  // The whole sequence's token mean from this rank's sum of token losses and their count.
  virtual at::Tensor mean(const at::Tensor& sum, const at::Tensor& count) const = 0;
};

// The seams of a family's forward. This base class is the whole model's (nothing split); parallelize installs the
// process mesh's (src/parallel/parallelize.hpp).
class ForwardSplit {
 public:
  virtual ~ForwardSplit() = default;
  // How many parts the attention heads, the intermediate features and the vocabulary are split into.
  virtual int64_t parts() const { return 1; }
  // Where a replicated activation [batch, time, hidden] enters column-wise layers, and where the partial outputs of
  // row-wise layers leave them (tensor parallelism: Megatron's f and g; with sequence parallelism, the gather and
  // scatter along time).
  virtual at::Tensor enter_region(const at::Tensor& x) const { return x; }
  virtual at::Tensor leave_region(const at::Tensor& x) const { return x; }
  // This rank's positions [batch, time] when the activations between regions hold its slice of the sequence.
  virtual at::Tensor local_positions(const at::Tensor& positions) const { return positions; }
  // The sequence length this forward runs on (after any sequence split): std::invalid_argument naming `model` where
  // the split needs another.
  virtual void check_length(int64_t length, bool cache, const std::string& model) const {
    (void)length, (void)cache, (void)model;
  }
  // This forward's sequence split of a sequence of `length` (nullptr: every rank holds the whole sequence).
  virtual std::shared_ptr<SequenceSplit> split_sequence(int64_t length, bool cache, const std::string& model) const {
    (void)length, (void)cache, (void)model;
    return nullptr;
  }
  // Whole logits from this rank's [..., vocab / parts()].
  virtual at::Tensor whole_logits(const at::Tensor& local) const { return local; }
  // The cross entropy of logits [..., vocab / parts()] against targets [...] (targets equal to `ignore_index` are
  // skipped): their mean, or with `sequence`, the whole sequence's token mean.
  virtual at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                   const SequenceSplit* sequence) const;
};

// A plan's check that `parts` divides each config field it splits (name, value): std::invalid_argument naming `model`,
// the field and both numbers otherwise.
void check_divides(int parts, const std::string& model, std::initializer_list<std::pair<const char*, int64_t>> fields);

// A model family with a tensor-parallel plan and an attention that context and sequence parallelism split.
class Parallelizable {
 public:
  virtual ~Parallelizable() = default;
  // The family's plan for `parts` ranks. A number that does not divide what the plan splits (attention heads,
  // key/value heads, intermediate size, vocabulary) is std::invalid_argument naming the config field and both numbers.
  virtual TensorParallelPlan tensor_parallel_plan(int parts) const = 0;
  // The attention's query and key/value head counts with their config fields (what sequence parallelism splits).
  struct AttentionHeads {
    std::pair<const char*, int64_t> heads, kv_heads;
  };
  virtual AttentionHeads attention_heads() const = 0;
  const ForwardSplit& forward_split() const;
  const std::shared_ptr<const ForwardSplit>& installed_split() const { return split_; }  // nullptr: none yet
  void install_split(std::shared_ptr<const ForwardSplit> split) { split_ = std::move(split); }

 private:
  std::shared_ptr<const ForwardSplit> split_;
};

}  // namespace acc::core
