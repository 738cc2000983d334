#include "parallel/context_parallel.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "data/sharding.hpp"
#include "models/model.hpp"
#include "parallel/mesh_forward.hpp"
#include "parallel/tensor_parallel.hpp"
#include "runtime/comm.hpp"
#include "util/errors.hpp"

namespace acc::core::cp {

// Named, not anonymous: the core is compiled in unity units (tensor_parallel.cpp's anonymous helpers would clash).
namespace ring {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The autograd functions keep the group by address: the model (through its forward split) and the Sequence hold it.
const Collectives& group_at(AutogradContext* ctx) {
  return *reinterpret_cast<const Collectives*>(ctx->saved_data["group"].toInt());
}

// The ring's step: this rank's keys and values to the next rank; their gradient goes back the other way.
struct RotateFn : torch::autograd::Function<RotateFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return reinterpret_cast<const Collectives*>(group)->rotate(x, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {group_at(ctx).rotate(grads[0], -1), at::Tensor()};
  }
};

// The sum over the group forward; backward, the gradient times the group's size (each rank's share of the whole
// loss, scaled so that the mean over the group that data parallelism takes is the whole gradient).
struct SumFn : torch::autograd::Function<SumFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    at::Tensor y = x.contiguous().clone();
    reinterpret_cast<const Collectives*>(group)->all_reduce_sum(y);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0] * static_cast<double>(group_at(ctx).size), at::Tensor()};
  }
};

at::Tensor rotate_fn(const at::Tensor& x, const Collectives& g) {
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return g.rotate(x, 1);
  return RotateFn::apply(x, reinterpret_cast<int64_t>(&g));
}

}  // namespace ring

const char* exchange_name(Exchange e) { return e == Exchange::AllGather ? "allgather" : "alltoall"; }

Exchange parse_exchange(const std::string& value, const std::string& source) {
  if (value == "allgather") return Exchange::AllGather;
  if (value == "alltoall") return Exchange::AllToAll;
  throw std::invalid_argument(source + ": '" + value + "' is not a context-parallel strategy (allgather, alltoall)");
}

Collectives collectives_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size) {
  Collectives g = tp::collectives_of(pg, rank, size, "cp");
  g.rotate = [pg, rank, size](const at::Tensor& t, int offset) {
    at::Tensor in = t.contiguous().view({-1});
    at::Tensor out = at::empty_like(in);
    // c10d's all-to-all with everything to one rank and from one rank (torch's permute_tensor).
    std::vector<int64_t> in_splits(size, 0), out_splits(size, 0);
    in_splits[((rank + offset) % size + size) % size] = in.numel();
    out_splits[((rank - offset) % size + size) % size] = in.numel();
    pg->all_to_all_single(out, in, out_splits, in_splits)->wait();
    return out.view(t.sizes());
  };
  return g;
}

Collectives collectives_of(std::shared_ptr<Comm> comm) {
  Collectives g = tp::collectives_of(comm, "cp");  // libacc's collectives (shared memory, DistributedError)
  g.rotate = collectives_of(comm->process_group(), comm->rank(), comm->size()).rotate;
  return g;
}

void parallelize(Model& model, std::shared_ptr<const Collectives> group, const Options& options) {
  SequenceSplitTarget t = sequence_split_target(model, "context parallelism", "has no context-parallel attention",
                                                is_split(model), *group, static_cast<bool>(group->rotate));
  if (t.forward->tensor && t.forward->tensor->sequence_parallel)
    throw UnsupportedError("context parallelism: " + t.cls +
                           " is split with sequence parallelism; the two are "
                           "exclusive (as in Accelerate: cp_size and sp_size)");
  t.forward->context = MeshForward::ContextPart{std::move(group), options.exchange};
  t.family->install_split(std::move(t.forward));
}

bool is_split(const Model& model) {
  const MeshForward* forward = MeshForward::installed_on(model);
  return forward && forward->context;
}

at::Tensor local_positions(int64_t length, int size, int rank) {
  return at::tensor(context_parallel_positions(length, size, rank), at::TensorOptions().dtype(at::kLong));
}

double hidden_score(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case at::kDouble: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

at::Tensor causal_mask(const at::Tensor& query_places, const at::Tensor& key_places, const at::Tensor& keep,
                       int64_t window, const at::TensorOptions& o) {
  const auto device = o.device();
  at::Tensor q = query_places.to(device).view({-1, 1}), k = key_places.to(device).view({1, -1});
  at::Tensor allowed = k.le(q);
  if (window > 0) allowed = allowed.logical_and(q.sub(k).lt(window));
  allowed = allowed.view({1, 1, q.size(0), k.size(1)});
  if (keep.defined())
    allowed = allowed.logical_and(keep.index_select(1, key_places.to(device)).view({keep.size(0), 1, 1, k.size(1)}));
  return at::where(allowed, at::zeros({}, o), at::full({}, hidden_score(o.dtype().toScalarType()), o));
}

at::Tensor shifted_labels(const at::Tensor& labels, int64_t length, int64_t ignore_index) {
  if (labels.dim() != 2 || labels.size(1) != length)
    throw std::invalid_argument("labels have shape " + c10::str(labels.sizes()) + "; expected [batch, " +
                                std::to_string(length) + "]");
  return at::cat({labels.narrow(1, 1, length - 1), at::full({labels.size(0), 1}, ignore_index, labels.options())}, 1);
}

at::Tensor kept_keys(const at::Tensor& attention_mask, int64_t length, c10::Device device) {
  if (!attention_mask.defined()) return at::Tensor();
  if (attention_mask.dim() != 2 || attention_mask.size(1) != length)
    throw std::invalid_argument("attention_mask has shape " + c10::str(attention_mask.sizes()) + "; expected [batch, " +
                                std::to_string(length) + "]");
  return attention_mask.to(device).ne(0);
}

at::Tensor group_token_mean(const at::Tensor& sum, const at::Tensor& count, const Collectives& g) {
  at::Tensor both = at::stack({sum, count.to(sum.device(), sum.scalar_type())});
  if (c10::GradMode::is_enabled() && both.requires_grad()) {
    both = ring::SumFn::apply(both, reinterpret_cast<int64_t>(&g));
  } else {
    both = both.contiguous().clone();
    g.all_reduce_sum(both);
  }
  return both[0] / both[1];
}

Sequence::Sequence(std::shared_ptr<const Collectives> group, Exchange exchange, int64_t length, bool cache,
                   const std::string& model, bool sequence_parallel)
    : group_(std::move(group)), exchange_(exchange), length_(length) {
  const int n = group_->size;
  if (sequence_parallel)
    throw UnsupportedError(model + ": context parallelism and sequence parallelism are exclusive (as in Accelerate: "
                                   "cp_size and sp_size)");
  if (cache)
    throw UnsupportedError(model + ": context parallelism runs without a key/value cache (generate on a model that is "
                                   "not context-parallel)");
  if (length % (2 * n) != 0)
    throw std::invalid_argument(model + ": context parallelism needs the sequence length (" + std::to_string(length) +
                                ") to split into 2 x cp_size (" + std::to_string(2 * n) + ") equal chunks");
  for (int r = 0; r < n; ++r) key_index_.push_back(local_positions(length, n, r));
  index_ = key_index_[static_cast<size_t>(group_->rank)];
}

at::Tensor Sequence::local(const at::Tensor& x) const {
  if (x.dim() < 2 || x.size(1) != length_)
    throw std::invalid_argument("context parallelism: a tensor of shape " + c10::str(x.sizes()) +
                                " has no sequence of " + std::to_string(length_) + " along dim 1");
  return x.index_select(1, index_.to(x.device()));
}

at::Tensor Sequence::next_token_labels(const at::Tensor& labels, int64_t ignore_index) const {
  return local(shifted_labels(labels, length_, ignore_index));
}

void Sequence::set_masks(const at::Tensor& attention_mask, int64_t window, const at::TensorOptions& o) {
  const at::Tensor keep = kept_keys(attention_mask, length_, o.device());
  auto build = [&](const at::Tensor& places) { return causal_mask(index_, places, keep, window, o); };
  masks_.clear();
  // A query that may see no key at all (a padding token before the first real one) gets an output of zero and no
  // gradient, as the whole model's attention gives it (Masking::attention, models/attention.hpp: transformers' sdpa).
  empty_ = at::Tensor();
  if (keep.defined()) empty_ = build(at::cat(key_index_)).eq(hidden_score(o.dtype().toScalarType())).all(-1, true);
  if (exchange_ == Exchange::AllGather)
    masks_.push_back(build(at::cat(key_index_)));  // the gathered keys come in rank order
  else
    for (const at::Tensor& places : key_index_) masks_.push_back(build(places));
}

at::Tensor Sequence::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout,
                               std::optional<double> scale) const {
  if (masks_.empty()) throw std::logic_error("context parallelism: attention before set_masks");
  const Collectives& g = *group_;
  const int64_t rep = q.size(1) / k.size(1);
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (exchange_ == Exchange::AllGather) {
    // [B, H, local, D] along the sequence: all-gathered forward, reduce-scattered backward.
    auto gathered = [&](const at::Tensor& t) { return tp::gather_sequence(t.transpose(1, 2), g).transpose(1, 2); };
    at::Tensor mask = masks_[0].to(q.scalar_type());
    at::Tensor y = at::scaled_dot_product_attention(q, gathered(k), gathered(v), mask, dropout, false, sc, rep > 1);
    return empty_.defined() ? y.masked_fill(empty_, 0) : y;
  }
  // The ring: step s holds rank (rank - s)'s keys and values. Each block's attention is normalised on its own with
  // its log-sum-exp; the blocks are merged by rescaling to the running log-sum-exp (dropout on a block's normalised
  // probabilities is dropout on the whole softmax's, since the rescaling is linear). In float32.
  const int n = g.size;
  at::Tensor qf = q.to(at::kFloat) * sc;
  at::Tensor kv = at::stack({k, v});  // one rotation per step for both
  at::Tensor out, lse;
  for (int step = 0; step < n; ++step) {
    if (step > 0) kv = ring::rotate_fn(kv, g);
    const int src = ((g.rank - step) % n + n) % n;
    at::Tensor kb = kv[0].to(at::kFloat), vb = kv[1].to(at::kFloat);
    if (rep > 1) kb = kb.repeat_interleave(rep, 1), vb = vb.repeat_interleave(rep, 1);
    at::Tensor raw = at::matmul(qf, kb.transpose(-2, -1));
    at::Tensor scores = raw + masks_[static_cast<size_t>(src)].to(at::kFloat);
    at::Tensor block_lse = scores.logsumexp(-1, /*keepdim=*/true);
    at::Tensor p = (scores - block_lse).exp();
    if (dropout > 0) p = at::dropout(p, dropout, true);
    at::Tensor block = at::matmul(p, vb);
    if (step == 0) {
      out = block, lse = block_lse;
      continue;
    }
    at::Tensor merged = at::logaddexp(lse, block_lse);
    out = out * (lse - merged).exp() + block * (block_lse - merged).exp();
    lse = merged;
  }
  if (empty_.defined()) out = out.masked_fill(empty_, 0);  // (their rows' blocks were finite: no NaN to hide)
  return out.to(q.scalar_type());
}

at::Tensor Sequence::mean(const at::Tensor& sum, const at::Tensor& count) const {
  return group_token_mean(sum, count, *group_);
}

}  // namespace acc::core::cp
