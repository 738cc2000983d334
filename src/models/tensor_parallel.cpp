#include "models/tensor_parallel.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "models/layers.hpp"
#include "models/lora.hpp"
#include "models/model.hpp"
#include "runtime/comm.hpp"
#include "util/errors.hpp"

namespace acc::core::tp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The autograd functions keep the group by address: it lives in the Sharding that the model (which the graph
// runs) holds.
int64_t address_of(const Group& g) { return reinterpret_cast<int64_t>(&g); }
const Group& group_at(AutogradContext* ctx) {
  return *reinterpret_cast<const Group*>(ctx->saved_data["group"].toInt());
}

at::Tensor all_reduced(const at::Tensor& x, const Group& g) {
  at::Tensor y = x.contiguous().clone();
  g.all_reduce_sum(y);
  return y;
}

at::Tensor gathered_last(const at::Tensor& x, const Group& g) {
  at::Tensor t = g.all_gather(x.movedim(-1, 0).contiguous());  // [size * local, ...]
  return t.movedim(0, -1).contiguous();
}

struct EnterFn : torch::autograd::Function<EnterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], group_at(ctx)), at::Tensor()};
  }
};

struct ReduceFn : torch::autograd::Function<ReduceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    (void)ctx;
    return all_reduced(x, *reinterpret_cast<const Group*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    (void)ctx;
    return {grads[0], at::Tensor()};
  }
};

struct GatherLastFn : torch::autograd::Function<GatherLastFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["local"] = x.size(-1);
    return gathered_last(x, *reinterpret_cast<const Group*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t local = ctx->saved_data["local"].toInt();
    return {grads[0].narrow(-1, group_at(ctx).rank * local, local), at::Tensor()};
  }
};

// Along dim 1: every rank's [B, T_l, ...] into [B, size * T_l, ...], and the sum of [B, size * T_l, ...] over the
// ranks, this rank's [B, T_l, ...] of it.
at::Tensor gathered_sequence(const at::Tensor& x, const Group& g) {
  return g.all_gather(x.movedim(1, 0).contiguous()).movedim(0, 1).contiguous();
}
at::Tensor scattered_sequence(const at::Tensor& x, const Group& g) {
  return g.reduce_scatter(x.movedim(1, 0).contiguous()).movedim(0, 1).contiguous();
}

struct GatherSequenceFn : torch::autograd::Function<GatherSequenceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return gathered_sequence(x, *reinterpret_cast<const Group*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {scattered_sequence(grads[0], group_at(ctx)), at::Tensor()};
  }
};

struct ScatterSequenceFn : torch::autograd::Function<ScatterSequenceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return scattered_sequence(x, *reinterpret_cast<const Group*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {gathered_sequence(grads[0], group_at(ctx)), at::Tensor()};
  }
};

bool matches(const std::string& pattern, const std::string& name) {
  auto parts = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream in(s);
    for (std::string p; std::getline(in, p, '.');) v.push_back(p);
    return v;
  };
  const auto p = parts(pattern), n = parts(name);
  if (p.size() != n.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != n[i]) return false;
  return true;
}

// The dimension a layer's parameter is split along under `style` (-1: replicated).
int64_t split_dim(const Layer& layer, Style style, const std::string& param, const at::Tensor& t) {
  if (style == Style::VocabEmbedding) return 0;
  if (style == Style::Colwise) return param == "bias" ? 0 : layer.output_dim();
  if (param == "bias") return -1;  // row-wise: the whole bias, added once after the reduction
  return t.dim() == 2 ? 1 - layer.output_dim() : -1;
}

// Rank `rank`'s slice of `whole` along the shard's dim: of each packed block, its part.
// join_parts's inverse: rank `rank`'s part of the whole.
at::Tensor slice_of(const at::Tensor& whole, const Shard& s, int rank, int size) {
  const int64_t block = whole.size(s.dim) / s.packed, part = block / size;
  std::vector<at::Tensor> pieces;
  for (int64_t b = 0; b < s.packed; ++b) pieces.push_back(whole.narrow(s.dim, b * block + rank * part, part));
  return s.packed == 1 ? pieces.front() : at::cat(pieces, s.dim);
}

}  // namespace

Group group_of(std::shared_ptr<Comm> comm) {
  Group g;
  g.rank = comm->rank();
  g.size = comm->size();
  g.all_reduce_sum = [comm](at::Tensor& t) { comm->all_reduce(t, ReduceOp::Sum); };
  g.all_reduce_max = [comm](at::Tensor& t) { comm->all_reduce(t, ReduceOp::Max); };
  g.all_gather = [comm](const at::Tensor& t) {
    at::Tensor in = t.contiguous().view({-1});
    at::Tensor out = at::empty({in.numel() * comm->size()}, in.options());
    comm->all_gather_into(out, in);
    auto shape = t.sizes().vec();
    shape[0] *= comm->size();
    return out.view(shape);
  };
  g.reduce_scatter = [comm](const at::Tensor& t) {
    at::Tensor in = t.contiguous().view({-1}).clone();  // scratch for the collective
    at::Tensor out = at::empty({in.numel() / comm->size()}, in.options());
    comm->reduce_scatter_sum_async(out, in)->wait();
    auto shape = t.sizes().vec();
    shape[0] /= comm->size();
    return out.view(shape);
  };
  return g;
}

Group group_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size) {
  if (!pg) throw std::invalid_argument("tensor parallelism: the process group is null");
  if (rank < 0 || rank >= size || size != pg->getSize() || rank != pg->getRank())
    throw std::invalid_argument("tensor parallelism: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                " disagrees with the process group's rank " + std::to_string(pg->getRank()) +
                                " of " + std::to_string(pg->getSize()));
  Group g;
  g.rank = rank;
  g.size = size;
  auto reduce = [pg](at::Tensor& t, c10d::ReduceOp::RedOpType op) {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    pg->allreduce(v, o)->wait();
  };
  g.all_reduce_sum = [reduce](at::Tensor& t) { reduce(t, c10d::ReduceOp::SUM); };
  g.all_reduce_max = [reduce](at::Tensor& t) { reduce(t, c10d::ReduceOp::MAX); };
  g.all_gather = [pg, size](const at::Tensor& t) {
    std::vector<at::Tensor> in{t.contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size; ++r) out[0].push_back(at::empty_like(in[0]));
    pg->allgather(out, in)->wait();
    return at::cat(out[0], 0);
  };
  g.reduce_scatter = [pg, size](const at::Tensor& t) {
    std::vector<at::Tensor> out{at::empty_like(t.chunk(size, 0)[0], at::MemoryFormat::Contiguous)};
    std::vector<std::vector<at::Tensor>> in(1);
    for (const at::Tensor& c : t.chunk(size, 0)) in[0].push_back(c.contiguous());
    pg->reduce_scatter(out, in)->wait();
    return out[0];
  };
  return g;
}

const char* style_name(Style s) {
  switch (s) {
    case Style::Colwise: return "colwise";
    case Style::Rowwise: return "rowwise";
    case Style::RowwisePartial: return "rowwise (reduced by its parent)";
    case Style::VocabEmbedding: return "vocabulary-parallel embedding";
  }
  return "?";
}

at::Tensor enter(const at::Tensor& x, const Group& g) {
  if (g.size == 1 || !c10::GradMode::is_enabled() || !x.requires_grad()) return x;
  return EnterFn::apply(x, address_of(g));
}

at::Tensor reduce(const at::Tensor& x, const Group& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return all_reduced(x, g);
  return ReduceFn::apply(x, address_of(g));
}

at::Tensor gather_last(const at::Tensor& x, const Group& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return gathered_last(x, g);
  return GatherLastFn::apply(x, address_of(g));
}

at::Tensor gather_sequence(const at::Tensor& x, const Group& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return gathered_sequence(x, g);
  return GatherSequenceFn::apply(x, address_of(g));
}

at::Tensor scatter_sequence(const at::Tensor& x, const Group& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return scattered_sequence(x, g);
  return ScatterSequenceFn::apply(x, address_of(g));
}

at::Tensor enter_region(const at::Tensor& x, const Sharding& s) {
  return s.sequence_parallel ? gather_sequence(x, s.group) : enter(x, s.group);
}

at::Tensor leave_region(const at::Tensor& x, const Sharding& s) {
  return s.sequence_parallel ? scatter_sequence(x, s.group) : reduce(x, s.group);
}

at::Tensor local_sequence(const at::Tensor& x, const Sharding& s) {
  if (!s.sequence_parallel) return x;
  const int64_t part = x.size(1) / s.group.size;
  return x.narrow(1, s.group.rank * part, part);
}

void check_sequence(const Sharding& s, int64_t length, bool cache, const std::string& model) {
  if (!s.sequence_parallel) return;
  if (cache)
    throw std::invalid_argument(model + ": sequence parallelism runs without a key/value cache (generate on a model "
                                "split without sequence parallelism)");
  if (length % s.group.size != 0)
    throw std::invalid_argument(model + ": sequence parallelism needs the sequence length (" + std::to_string(length) +
                                ") to be a multiple of tp_size (" + std::to_string(s.group.size) + ")");
}

at::Tensor Layer::rowwise_output(const at::Tensor& partial, const at::Tensor& bias) const {
  at::Tensor y = style_ == Style::RowwisePartial ? partial : leave_region(partial, *sharding_);
  return bias.defined() ? y + bias : y;
}

int64_t Layer::local_row(int64_t id, int64_t rows) const {
  if (id < 0 || !sharding_) return id;
  const int64_t start = sharding_->group.rank * rows;
  return id >= start && id < start + rows ? id - start : -1;
}

at::Tensor Layer::embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const {
  if (!sharding_) return at::embedding(weight, ids, padding_idx);
  const int64_t rows = weight.size(0), start = sharding_->group.rank * rows;
  at::Tensor outside = ids.lt(start).logical_or(ids.ge(start + rows));
  // Only the rank whose slice holds the pad id passes it on, as a local row.
  at::Tensor out = at::embedding(weight, (ids - start).masked_fill(outside, 0), local_row(padding_idx, rows));
  return leave_region(out.masked_fill(outside.unsqueeze(-1), 0), *sharding_);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                        const Group& g, bool sum) {
  const int64_t local = logits.size(-1), start = g.rank * local;
  at::Tensor max = std::get<0>(logits.detach().max(-1, /*keepdim=*/true)).contiguous();
  g.all_reduce_max(max);
  at::Tensor z = logits - max;  // softmax is unchanged by the shift; exp cannot overflow
  at::Tensor sum_exp = reduce(z.exp().sum(-1), g);
  at::Tensor t = targets.to(at::kLong);
  at::Tensor outside = t.lt(start).logical_or(t.ge(start + local));
  at::Tensor picked = z.gather(-1, (t - start).masked_fill(outside, 0).unsqueeze(-1)).squeeze(-1);
  picked = reduce(picked.masked_fill(outside, 0), g);
  at::Tensor kept = t.ne(ignore_index);
  at::Tensor losses = (sum_exp.log() - picked).masked_fill(kept.logical_not(), 0);
  if (sum) return losses.sum();
  return losses.sum() / kept.sum().to(losses.scalar_type());
}

void parallelize(Model& model, const Group& group, const Options& options) {
  auto* family = dynamic_cast<Parallelizable*>(&model);
  auto* nn = dynamic_cast<NnModel*>(&model);
  if (!nn)
    throw UnsupportedError("tensor parallelism: the model is a TorchScript module, which has no tensor-parallel plan "
                           "(plans: Llama, Mistral, Qwen2, Mixtral, GPT-2 and the built-in GPT)");
  const std::string cls = nn->module()->name();
  if (!family)
    throw UnsupportedError("tensor parallelism: " + cls + " has no tensor-parallel plan (plans: Llama, Mistral, Qwen2, "
                           "Mixtral, GPT-2 and the built-in GPT)");
  if (family->tensor_parallel()) throw StateError("tensor parallelism: " + cls + " is split already");
  if (group.size < 1 || group.rank < 0 || group.rank >= group.size)
    throw std::invalid_argument("tensor parallelism: rank " + std::to_string(group.rank) + " of " +
                                std::to_string(group.size) + " is not a rank of the group");
  if (lora::find(*nn->module()))
    throw UnsupportedError("tensor parallelism: " + cls + " has a LoRA adapter: libacc's LoRA and tensor parallelism do not "
                           "combine (merge the adapter first)");
  const Plan plan = family->tensor_parallel_plan(group.size);

  // Everything is checked before anything changes.
  struct Split {
    std::string module;
    Layer* layer;
    InitModule* init;
    Style style;
    int64_t packed;
  };
  std::vector<Split> splits;
  for (const auto& item : nn->module()->named_modules()) {
    for (const PlanEntry& e : plan) {
      if (!matches(e.pattern, item.key())) continue;
      auto* layer = dynamic_cast<Layer*>(item.value().get());
      auto* init = dynamic_cast<InitModule*>(item.value().get());
      if (!layer || !init)
        throw UnsupportedError("tensor parallelism: " + cls + "'s plan names '" + item.key() +
                               "', which is not a layer libacc splits");
      if ((e.style == Style::VocabEmbedding) != layer->is_embedding())
        throw UnsupportedError("tensor parallelism: '" + item.key() + "' cannot be split " + style_name(e.style));
      if (e.style == Style::RowwisePartial && init->bias_or_none().defined())
        throw UnsupportedError("tensor parallelism: '" + item.key() + "' has a bias; its parent cannot add it once");
      splits.push_back({item.key(), layer, init, e.style, e.packed});
      break;
    }
  }
  auto sharding = std::make_shared<Sharding>();
  sharding->group = group;
  sharding->sequence_parallel = options.sequence_parallel && group.size > 1;
  for (const Split& s : splits) {
    for (const auto& p : s.init->named_parameters(/*recurse=*/false)) {
      const int64_t dim = split_dim(*s.layer, s.style, p.key(), p.value());
      if (dim < 0) continue;
      const int64_t packed = s.style == Style::Colwise ? s.packed : 1;
      const int64_t n = p.value().size(dim);
      if (n % (packed * group.size) != 0)
        throw std::invalid_argument("tensor parallelism: " + s.module + "." + p.key() + "'s dimension " +
                                    std::to_string(dim) + " (" + std::to_string(n) + ") does not split into " +
                                    std::to_string(group.size) + " equal parts" +
                                    (packed > 1 ? " per packed block" : ""));
      sharding->shards[s.module + "." + p.key()] = Shard{dim, packed, p.value().sizes().vec()};
    }
    sharding->layers[s.module] = s.style;
  }
  c10::NoGradGuard no_grad;
  for (const Split& s : splits) {
    for (const auto& p : s.init->named_parameters(/*recurse=*/false)) {
      auto it = sharding->shards.find(s.module + "." + p.key());
      if (it == sharding->shards.end()) continue;
      at::Tensor& param = s.init->param(p.key().c_str());
      const bool grad = param.requires_grad();
      param = slice_of(param, it->second, group.rank, group.size).clone().requires_grad_(grad);
    }
  }
  std::shared_ptr<const Sharding> shared = sharding;
  for (const Split& s : splits) s.layer->split(s.style, shared);
  if (shared->sequence_parallel) {
    // The replicated parameters (norms, row-wise biases, the router, positions) saw this rank's tokens only: their
    // gradients are summed over the group, as each reaches them.
    for (const auto& [name, p] : model.named_parameters()) {
      if (shared->shards.count(name) || !p.requires_grad()) continue;
      at::Tensor param = p;
      param.register_hook([shared](const at::Tensor& grad) { return all_reduced(grad, shared->group); });
    }
  }
  family->set_tensor_parallel(shared);
}

const Sharding* sharding_of(const Model& model) {
  const auto* family = dynamic_cast<const Parallelizable*>(&model);
  return family ? family->tensor_parallel() : nullptr;
}

at::Tensor full_tensor(const Sharding& sharding, const std::string& name, const at::Tensor& local) {
  auto it = sharding.shards.find(name);
  if (it == sharding.shards.end()) return local;
  const Shard& s = it->second;
  const Group& g = sharding.group;
  c10::NoGradGuard no_grad;
  at::Tensor all = g.all_gather(local.detach().movedim(s.dim, 0).contiguous());  // the ranks' parts, along dim 0
  return join_parts(all.chunk(g.size, 0), 0, s.packed).movedim(0, s.dim).contiguous();
}

at::Tensor join_parts(const std::vector<at::Tensor>& parts, int64_t dim, int64_t packed) {
  const int64_t part = parts.front().size(dim) / packed;
  std::vector<at::Tensor> pieces;
  for (int64_t b = 0; b < packed; ++b)
    for (const at::Tensor& p : parts) pieces.push_back(p.narrow(dim, b * part, part));
  return at::cat(pieces, dim);
}

NamedTensors full_state(const Sharding& sharding, const NamedTensors& local) {
  NamedTensors out;
  for (const auto& [name, t] : local) out.emplace_back(name, full_tensor(sharding, name, t));
  return out;
}

at::Tensor slice_tensor(const Sharding& sharding, const std::string& name, const at::Tensor& whole) {
  auto it = sharding.shards.find(name);
  if (it == sharding.shards.end()) return whole;
  if (whole.sizes().vec() != it->second.whole_shape)
    throw std::invalid_argument("tensor parallelism: '" + name + "' has shape " + c10::str(whole.sizes()) +
                                "; the whole parameter's is " + c10::str(at::IntArrayRef(it->second.whole_shape)));
  return slice_of(whole, it->second, sharding.group.rank, sharding.group.size);
}

NamedTensors slice_state(const Sharding& sharding, const NamedTensors& whole) {
  NamedTensors out;
  for (const auto& [name, t] : whole) out.emplace_back(name, slice_tensor(sharding, name, t));
  return out;
}

at::Tensor grad_norm(const Model& model, const Sharding& sharding, double norm_type) {
  const bool inf = std::isinf(norm_type);
  at::Tensor split = at::zeros({}, at::kFloat), replicated = at::zeros({}, at::kFloat);
  std::set<const void*> seen;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.grad().defined() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    at::Tensor g = p.grad().detach().to(at::kFloat).cpu();
    at::Tensor& acc = sharding.shards.count(name) ? split : replicated;
    acc = inf ? at::maximum(acc, g.abs().max()) : acc + g.abs().pow(norm_type).sum();
  }
  if (inf) {
    sharding.group.all_reduce_max(split);
    return at::maximum(split, replicated);
  }
  sharding.group.all_reduce_sum(split);
  return (split + replicated).pow(1.0 / norm_type);
}

}  // namespace acc::core::tp
