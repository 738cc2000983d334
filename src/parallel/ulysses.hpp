// Ulysses sequence parallelism (Accelerate's parallelism_config.sp_size, DeepSpeed's ALST: UlyssesSPAttentionHF):
// the ranks of one group hold consecutive slices of the same sequences (rank r: places [r x T / sp, (r + 1) x T / sp),
// as DeepSpeed's UlyssesSPDataLoaderAdapter hands them out), and everything but attention runs on the slice. Around
// attention an all-to-all trades the sequence split for a head split: each rank attends over the whole sequence with
// heads / sp of the heads, then a second all-to-all gives the heads back for its slice. Grouped-query attention: the
// key/value heads are split the same way where sp divides them, and repeated (each kv head sp / kv_heads times) where
// kv_heads divides sp, as DeepSpeed does; otherwise refused by name. Next-token labels are taken from the whole
// sequence before the split (DeepSpeed's shift_labels); the loss is the token mean over the whole sequence, equal on
// every rank of the group (Accelerate's recipe: each rank's loss weighted by its tokens), and each rank's backward is
// scaled by the group's size so that the mean data parallelism takes over the group is the whole model's gradient (the
// data-parallel groups dp_cp and dp_shard_cp hold sp, as DeepSpeed's sequence-data-parallel group does).
// Composes with tensor parallelism (heads split by tp first, then by sp), not with context parallelism or tensor
// parallelism's own sequence parallelism (Accelerate: cp and sp are exclusive).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/parallel_forward.hpp"
#include "parallel/tensor_parallel.hpp"  // Collectives over a Comm or a c10d group, the declarations they need

namespace acc::core::ulysses {

// The collectives over the ranks that split the sequence, with c10d's all-to-all: over a libacc group, or over a
// c10d process group.
Collectives collectives_of(std::shared_ptr<Comm> comm);
Collectives collectives_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size);

struct Options {
  // sp_seq_length when sp_seq_length_is_variable is false: every batch's whole sequence must have this length.
  std::optional<int64_t> fixed_length;
};

// Makes `model`'s forward sequence-parallel over `group`. Every rank must hold the same weights. Refused, naming why,
// before anything changes: a TorchScript module or a model without a split attention (the built-in MLP, BERT, a
// user's module), a model split already, a model that is context-parallel or split with tensor parallelism's sequence
// parallelism (UnsupportedError, StateError); sp not dividing the heads each rank holds, or the key/value heads (nor
// they it): std::invalid_argument naming the config field and both numbers.
void parallelize(Model& model, std::shared_ptr<const Collectives> group, const Options& options = {});
bool is_split(const Model& model);

// The whole sequence's places held by `rank` of `size`: one consecutive slice.
at::Tensor local_positions(int64_t length, int size, int rank);

// One forward's split sequence.
class Sequence final : public SequenceSplit {
 public:
  // `length`: the whole sequence's. std::invalid_argument naming `model` unless sp divides it (or it differs from a
  // fixed length); UnsupportedError with a key/value cache (generate) or with tensor parallelism's sequence
  // parallelism.
  Sequence(std::shared_ptr<const Collectives> group, const Options& options, int64_t length, bool cache,
           const std::string& model, bool sequence_parallel = false);
  int64_t local_length() const override { return length_ / group_->size; }
  at::Tensor local(const at::Tensor& x) const override;
  at::Tensor next_token_labels(const at::Tensor& labels, int64_t ignore_index) const override;
  void set_masks(const at::Tensor& attention_mask, int64_t window, const at::TensorOptions& o) override;
  // q [batch, heads, local, dim], k and v [batch, kv_heads, local, dim]: heads / sp heads over the whole sequence,
  // back to every head over this rank's slice.
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout,
                       std::optional<double> scale) const override;
  at::Tensor mean(const at::Tensor& sum, const at::Tensor& count) const override;

 private:
  std::shared_ptr<const Collectives> group_;
  int64_t length_ = 0;
  at::Tensor mask_;   // [B|1, 1, time, time] the whole sequence's
  at::Tensor empty_;  // [B, 1, time, 1] the queries that see no key (undefined: none)
};

}  // namespace acc::core::ulysses
