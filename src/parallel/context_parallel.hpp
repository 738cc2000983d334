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
// Composes with tensor parallelism (parallel/tensor_parallel.hpp: heads split by TP, tokens by CP), not with its
// sequence parallelism (Accelerate: cp and sp are exclusive). Logits come back for this rank's tokens only, as
// torch's context_parallel leaves its buffers sharded: [batch, time / size, vocab], in local_positions' order.
#pragma once
#include <optional>
#include <vector>

#include "models/parallel_forward.hpp"
#include "parallel/tensor_parallel.hpp"  // Collectives over a Comm or a c10d group, the declarations they need

namespace acc::core::cp {

// How the keys and values reach every rank (Accelerate's cp_comm_strategy).
enum class Exchange { AllGather, AllToAll };
const char* exchange_name(Exchange e);  // "allgather", "alltoall" (Accelerate's cp_comm_strategy values)
// Accelerate's cp_comm_strategy value; std::invalid_argument naming `source` and both values otherwise.
Exchange parse_exchange(const std::string& value, const std::string& source);

// The collectives over the ranks that split the sequence, with the ring's step (c10d's all-to-all): over a libacc
// group, or over a c10d process group.
Collectives collectives_of(std::shared_ptr<Comm> comm);
Collectives collectives_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size);

struct Options {
  Exchange exchange = Exchange::AllGather;
};

// Makes `model`'s forward context-parallel over `group`. Every rank must hold the same weights. Refused, naming why,
// before anything changes: a TorchScript module or a model without context-parallel attention (the built-in MLP,
// BERT, a user's module), a model split already, a model split by tensor parallelism with sequence parallelism.
void parallelize(Model& model, std::shared_ptr<const Collectives> group, const Options& options = {});
// Whether `model`'s forward splits its sequence.
bool is_split(const Model& model);

// The whole sequence's places held by `rank` of `size` (load-balanced chunks; the length must split into 2 x size).
at::Tensor local_positions(int64_t length, int size, int rank);

// What a hidden attention score holds: the dtype's lowest value (torch.finfo(dtype).min, as transformers' masks).
double hidden_score(at::ScalarType t);
// The additive mask [B|1, 1, queries, keys] between places in the whole sequence: 0 where the query may see the key
// (the key's place not after the query's, within `window` places when window > 0, and kept by `keep` [B, time] when it
// is defined), hidden_score where not.
at::Tensor causal_mask(const at::Tensor& query_places, const at::Tensor& key_places, const at::Tensor& keep,
                       int64_t window, const at::TensorOptions& o);
// Next-token labels of the whole sequence [batch, length]: shifted left, the last place `ignore_index`
// (std::invalid_argument for another shape). The sequence splits (cp, Ulysses) take their part of it.
at::Tensor shifted_labels(const at::Tensor& labels, int64_t length, int64_t ignore_index);
// attention_mask [batch, length] as the keys present (undefined: none given; std::invalid_argument for another shape).
at::Tensor kept_keys(const at::Tensor& attention_mask, int64_t length, c10::Device device);
// The whole sequence's token mean from this rank's sum of token losses and their count: sums and counts added over the
// group, the sum's gradient scaled by the group's size (see the top of this file). Equal on every rank of the group.
at::Tensor group_token_mean(const at::Tensor& sum, const at::Tensor& count, const Collectives& g);

// One forward's split sequence.
class Sequence final : public SequenceSplit {
 public:
  // `length`: the whole sequence's. std::invalid_argument naming `model` unless it splits into 2 x size chunks;
  // UnsupportedError with a key/value cache (generate) or with tensor parallelism's sequence parallelism.
  Sequence(std::shared_ptr<const Collectives> group, Exchange exchange, int64_t length, bool cache,
           const std::string& model, bool sequence_parallel = false);
  int64_t length() const { return length_; }
  int64_t local_length() const override { return index_.size(0); }
  const at::Tensor& index() const { return index_; }  // [local_length] this rank's places in the sequence
  at::Tensor local(const at::Tensor& x) const override;
  at::Tensor next_token_labels(const at::Tensor& labels, int64_t ignore_index) const override;
  // Additive masks, in `o`'s dtype and on its device, with the dtype's lowest value where hidden (transformers' eager
  // masks); the caller checks attention_mask's values (hf::check_attention_mask) and passes it only where something is
  // padded.
  void set_masks(const at::Tensor& attention_mask, int64_t window, const at::TensorOptions& o) override;
  // Grouped-query when kv_heads < heads.
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout,
                       std::optional<double> scale) const override;
  // The sums and counts are added over the group; the sum's gradient is scaled by the group's size (see the top of
  // this file).
  at::Tensor mean(const at::Tensor& sum, const at::Tensor& count) const override;

 private:
  std::shared_ptr<const Collectives> group_;
  Exchange exchange_;
  int64_t length_ = 0;
  at::Tensor index_;
  std::vector<at::Tensor> key_index_;  // per rank, its places (the gathered keys' order is rank order)
  std::vector<at::Tensor> masks_;  // allgather: one [B|1, 1, local, time]; alltoall: one per source rank
  at::Tensor empty_;  // [B, 1, local, 1] the queries that see no key (undefined: none)
};

}  // namespace acc::core::cp
