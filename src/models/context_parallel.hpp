// Context parallelism (torch.distributed.tensor.experimental.context_parallel, as Accelerate's cp_size and
// cp_comm_strategy use it): the ranks of one group hold different tokens of the same sequences. Every rank's forward
// receives the whole batch [batch, time] (the loaders shard over dp only) and keeps its load-balanced part of it:
// chunks r and 2 x size - 1 - r of 2 x size (context_parallel_positions), so that every rank has as much causal work.
// Position ids stay the tokens' own (rotary and learned positions are right); attention is causal over the whole
// sequence by the tokens' places in it:
//   allgather  the keys and values are all-gathered over the group (their gradients reduce-scattered back);
//   alltoall   they pass around the ring, one rank's block per step (torch's all-to-all rotater), and the partial
//              attentions are merged by their log-sum-exp.
// Next-token labels are taken from the whole sequence before the split. The loss is the token mean over the whole
// sequence, equal on every rank of the group, and each rank's backward is scaled by the group's size, so that the
// gradient averaged over the group (DDP and FSDP average over dp_cp, which holds cp) is the whole model's.
// Composes with tensor parallelism (models/tensor_parallel.hpp: heads split by TP, tokens by CP), not with its
// sequence parallelism (Accelerate: cp and sp are exclusive). Logits come back for this rank's tokens only, as
// torch's context_parallel leaves its buffers sharded: [batch, time / size, vocab], in local_positions' order.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/tensor_parallel.hpp"

namespace c10d {
class ProcessGroup;
}

namespace acc::core {
class Comm;
class Model;
}  // namespace acc::core

namespace acc::core::cp {

enum class Strategy { AllGather, AllToAll };
const char* strategy_name(Strategy s);  // "allgather", "alltoall" (Accelerate's cp_comm_strategy values)
// Accelerate's cp_comm_strategy value; std::invalid_argument naming `source` and both values otherwise.
Strategy parse_strategy(const std::string& value, const std::string& source);

// The ranks that split the sequence: tensor parallelism's collectives (all-gather, reduce-scatter, all-reduce) and
// the ring's step.
struct Group {
  tp::Group collectives;
  // This rank's tensor to rank (rank + offset) mod size; gives back the tensor of rank (rank - offset) mod size.
  std::function<at::Tensor(const at::Tensor&, int offset)> rotate;
  int rank() const { return collectives.rank; }
  int size() const { return collectives.size; }
};
// Over a libacc group, or over a c10d process group (the ring step is c10d's all-to-all).
Group group_of(std::shared_ptr<Comm> comm);
Group group_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size);

struct Options {
  Strategy strategy = Strategy::AllGather;
};

struct Sharding {
  Group group;
  Strategy strategy = Strategy::AllGather;
};

// A model family whose forward splits its sequence (the Llama family, GPT-2, the built-in GPT).
class Parallelizable {
 public:
  virtual ~Parallelizable() = default;
  const Sharding* context_parallel() const { return cp_.get(); }
  void set_context_parallel(std::shared_ptr<const Sharding> s) { cp_ = std::move(s); }

 protected:
  std::shared_ptr<const Sharding> cp_;
};

// Makes `model`'s forward context-parallel over `group`. Every rank must hold the same weights. Refused, naming why,
// before anything changes: a TorchScript module or a model without context-parallel attention (the built-in MLP,
// BERT, a user's module), a model split already, a model split by tensor parallelism with sequence parallelism.
void parallelize(Model& model, const Group& group, const Options& options = {});

// The model's context parallelism (nullptr: none).
const Sharding* sharding_of(const Model& model);

// The whole sequence's places held by `rank` of `size` (load-balanced chunks; the length must split into 2 x size).
at::Tensor local_positions(int64_t length, int size, int rank);

// One forward's split sequence.
class Sequence {
 public:
  // `length`: the whole sequence's. std::invalid_argument naming `model` unless it splits into 2 x size chunks;
  // UnsupportedError with a key/value cache (generate) or with `tp`'s sequence parallelism.
  Sequence(const Sharding& s, int64_t length, bool cache, const std::string& model,
           const tp::Sharding* tp = nullptr);
  const Sharding& sharding() const { return *s_; }
  int64_t length() const { return length_; }
  int64_t local_length() const { return index_.size(0); }
  const at::Tensor& index() const { return index_; }  // [local_length] this rank's places in the sequence
  // This rank's part of `x` along dim 1 ([batch, time, ...]; no gradient exchange: for inputs).
  at::Tensor local(const at::Tensor& x) const;
  // Next-token labels [batch, local_length]: labels [batch, time] shifted left on the whole sequence (the last place
  // gets `ignore_index`), then this rank's part.
  at::Tensor next_token_labels(const at::Tensor& labels, int64_t ignore_index) const;

  // The attention masks of this forward: causal by place in the sequence, keys where attention_mask [batch, time]
  // is 0 hidden (undefined: none; the caller checks its values, as hf::check_attention_mask, and passes it only where
  // something is padded), a sliding window when window > 0. Additive,
  // in `o`'s dtype and on its device, with the dtype's lowest value where hidden (transformers' eager masks). Call
  // once before attention.
  void set_masks(const at::Tensor& attention_mask, int64_t window, const at::TensorOptions& o);
  // Attention of this rank's queries q [batch, heads, local, dim] over every key of the sequence, from this rank's
  // k, v [batch, kv_heads, local, dim] (grouped-query when kv_heads < heads). `scale`: nullopt for 1/sqrt(dim).
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout,
                       std::optional<double> scale) const;

  // The whole sequence's token mean from this rank's sum of token losses and their count: the sums and counts are
  // added over the group; the sum's gradient is scaled by the group's size (see the top of this file).
  at::Tensor mean(const at::Tensor& sum, const at::Tensor& count) const;

 private:
  const Sharding* s_;
  int64_t length_ = 0;
  at::Tensor index_;
  std::vector<at::Tensor> key_index_;  // per rank, its places (the gathered keys' order is rank order)
  std::vector<at::Tensor> masks_;      // allgather: one [B|1, 1, local, time]; alltoall: one per source rank
  at::Tensor empty_;                   // [B, 1, local, 1] the queries that see no key (undefined: none)
};

// Cross entropy of logits [N, V] (or this rank's vocabulary slice under tensor parallelism, `vocab_split`) against
// targets [N], summed over the targets other than ignore_index; and their count.
std::pair<at::Tensor, at::Tensor> cross_entropy_sum(const at::Tensor& logits, const at::Tensor& targets,
                                                    int64_t ignore_index, const tp::Group* vocab_split);

}  // namespace acc::core::cp
