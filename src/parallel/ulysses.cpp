#include "parallel/ulysses.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cmath>
#include <stdexcept>

#include "models/model.hpp"
#include "parallel/context_parallel.hpp"
#include "parallel/mesh_forward.hpp"
#include "runtime/comm.hpp"
#include "util/errors.hpp"

namespace acc::core::ulysses {

// Named, not anonymous: the core is compiled in unity units.
namespace heads {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// c10d's all-to-all along dim 0 in equal blocks (block j to rank j). Its gradient goes back by the same exchange:
// the block rank i sent to rank j returns from j to i.
struct AllToAllFn : torch::autograd::Function<AllToAllFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return reinterpret_cast<const Collectives*>(group)->all_to_all(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reinterpret_cast<const Collectives*>(ctx->saved_data["group"].toInt())->all_to_all(grads[0]), at::Tensor()};
  }
};

at::Tensor all_to_all(const at::Tensor& x, const Collectives& g) {
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return g.all_to_all(x);
  return AllToAllFn::apply(x, reinterpret_cast<int64_t>(&g));
}

// [B, H, local, D], this rank's slice of every head -> [B, H / n, time, D], its heads over the whole sequence.
at::Tensor to_heads(const at::Tensor& x, const Collectives& g) {
  const int64_t n = g.size, b = x.size(0), h = x.size(1), l = x.size(2), d = x.size(3);
  at::Tensor blocks = x.reshape({b, n, h / n, l, d}).permute({1, 0, 2, 3, 4}).contiguous();  // block j: heads of j
  at::Tensor got = all_to_all(blocks, g);  // block i: rank i's slice of this rank's heads
  return got.permute({1, 2, 0, 3, 4}).reshape({b, h / n, n * l, d});
}

// The way back: [B, H / n, time, D] -> [B, H, local, D].
at::Tensor to_sequence(const at::Tensor& y, const Collectives& g) {
  const int64_t n = g.size, b = y.size(0), h = y.size(1), l = y.size(2) / n, d = y.size(3);
  at::Tensor blocks = y.reshape({b, h, n, l, d}).permute({2, 0, 1, 3, 4}).contiguous();  // block j: rank j's slice
  at::Tensor got = all_to_all(blocks, g);  // block i: rank i's heads of this rank's slice
  return got.permute({1, 0, 2, 3, 4}).reshape({b, n * h, l, d});
}

// sp must divide the query heads each rank holds (after tensor parallelism's `parts`), and divide the key/value heads
// or be divided by them (DeepSpeed's rule: then each kv head is repeated).
void check_heads(const std::string& cls, const Parallelizable::AttentionHeads& all, int64_t parts, int sp) {
  auto shown = [&](const std::pair<const char*, int64_t>& f) {
    return cls + "'s " + f.first + " (" + std::to_string(f.second) +
           (parts > 1 ? ", " + std::to_string(f.second / parts) + " per tensor-parallel rank)" : ")");
  };
  const int64_t heads = all.heads.second / parts, kv = all.kv_heads.second / parts;
  if (heads % sp != 0)
    throw std::invalid_argument("sequence parallelism: sp_size " + std::to_string(sp) + " does not divide " +
                                shown(all.heads));
  if (kv % sp != 0 && sp % kv != 0)
    throw std::invalid_argument("sequence parallelism: sp_size " + std::to_string(sp) + " does not divide " +
                                shown(all.kv_heads) + ", nor they it");
}

}  // namespace heads

Collectives collectives_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size) {
  Collectives g = tp::collectives_of(pg, rank, size, "sp");
  g.all_to_all = [pg](const at::Tensor& t) {
    at::Tensor in = t.contiguous();
    at::Tensor out = at::empty_like(in);
    std::vector<int64_t> equal;  // no split sizes: equal blocks along dim 0
    pg->all_to_all_single(out, in, equal, equal)->wait();
    return out;
  };
  return g;
}

Collectives collectives_of(std::shared_ptr<Comm> comm) {
  Collectives g = tp::collectives_of(comm, "sp");  // libacc's collectives (shared memory, DistributedError)
  g.all_to_all = collectives_of(comm->process_group(), comm->rank(), comm->size()).all_to_all;
  return g;
}

void parallelize(Model& model, std::shared_ptr<const Collectives> group, const Options& options) {
  SequenceSplitTarget t = sequence_split_target(model, "sequence parallelism", "has no split attention",
                                                is_split(model), *group, static_cast<bool>(group->all_to_all));
  if (t.forward->context)
    throw UnsupportedError("sequence parallelism: " + t.cls +
                           " is context-parallel; the two are exclusive (as in Accelerate: cp_size and sp_size)");
  if (t.forward->tensor && t.forward->tensor->sequence_parallel)
    throw UnsupportedError("sequence parallelism: " + t.cls +
                           " is split with tensor parallelism's sequence parallelism; Ulysses splits the sequence "
                           "itself");
  const int64_t tp = t.forward->tensor ? t.forward->tensor->group->size : 1;
  heads::check_heads(t.cls, t.family->attention_heads(), tp, group->size);
  t.forward->ulysses = MeshForward::UlyssesPart{std::move(group), options};
  t.family->install_split(std::move(t.forward));
}

bool is_split(const Model& model) {
  const MeshForward* forward = MeshForward::installed_on(model);
  return forward && forward->ulysses;
}

at::Tensor local_positions(int64_t length, int size, int rank) {
  const int64_t part = length / size;
  return at::arange(rank * part, (rank + 1) * part, at::TensorOptions().dtype(at::kLong));
}

Sequence::Sequence(std::shared_ptr<const Collectives> group, const Options& options, int64_t length, bool cache,
                   const std::string& model, bool sequence_parallel)
    : group_(std::move(group)), length_(length) {
  const int n = group_->size;
  if (sequence_parallel)
    throw UnsupportedError(model + ": Ulysses sequence parallelism and tensor parallelism's sequence parallelism are "
                                   "exclusive");
  if (cache)
    throw UnsupportedError(model + ": sequence parallelism runs without a key/value cache (generate on a model that is "
                                   "not sequence-parallel)");
  if (options.fixed_length && length != *options.fixed_length)
    throw std::invalid_argument(model + ": the sequence length (" + std::to_string(length) +
                                ") is not parallelism_config.sp_seq_length (" + std::to_string(*options.fixed_length) +
                                "), and sp_seq_length_is_variable is false");
  if (length % n != 0)
    throw std::invalid_argument(model + ": sequence parallelism needs the sequence length (" + std::to_string(length) +
                                ") to be a multiple of sp_size (" + std::to_string(n) + ")");
}

at::Tensor Sequence::local(const at::Tensor& x) const {
  if (x.dim() < 2 || x.size(1) != length_)
    throw std::invalid_argument("sequence parallelism: a tensor of shape " + c10::str(x.sizes()) +
                                " has no sequence of " + std::to_string(length_) + " along dim 1");
  const int64_t part = length_ / group_->size;
  return x.narrow(1, group_->rank * part, part);
}

at::Tensor Sequence::next_token_labels(const at::Tensor& labels, int64_t ignore_index) const {
  return local(cp::shifted_labels(labels, length_, ignore_index));
}

void Sequence::set_masks(const at::Tensor& attention_mask, int64_t window, const at::TensorOptions& o) {
  const at::Tensor keep = cp::kept_keys(attention_mask, length_, o.device());
  const at::Tensor places = at::arange(length_, at::TensorOptions().dtype(at::kLong));
  mask_ = cp::causal_mask(places, places, keep, window, o);
  // A query that sees no key gets zero, as the whole model's attention gives it (see cp::Sequence::set_masks).
  empty_ = keep.defined() ? mask_.eq(cp::hidden_score(o.dtype().toScalarType())).all(-1, true) : at::Tensor();
}

at::Tensor Sequence::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout,
                               std::optional<double> scale) const {
  if (!mask_.defined()) throw std::logic_error("sequence parallelism: attention before set_masks");
  const Collectives& g = *group_;
  const int64_t n = g.size, kv = k.size(1);  // (parallelize checked that n divides the heads: check_heads)
  at::Tensor keys = k, values = v;
  if (kv % n != 0)  // fewer kv heads than ranks: each repeated, so that rank r gets kv head r / (n / kv), its queries'
    keys = k.repeat_interleave(n / kv, 1), values = v.repeat_interleave(n / kv, 1);
  at::Tensor qh = heads::to_heads(q, g), kh = heads::to_heads(keys, g), vh = heads::to_heads(values, g);
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor y = at::scaled_dot_product_attention(qh, kh, vh, mask_.to(q.scalar_type()), dropout, false, sc,
                                                  qh.size(1) != kh.size(1));
  if (empty_.defined()) y = y.masked_fill(empty_, 0);
  return heads::to_sequence(y, g);
}

at::Tensor Sequence::mean(const at::Tensor& sum, const at::Tensor& count) const {
  return cp::group_token_mean(sum, count, *group_);
}

}  // namespace acc::core::ulysses
