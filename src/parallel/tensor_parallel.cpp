#include "parallel/tensor_parallel.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include "models/layers.hpp"
#include "models/lora.hpp"
#include "models/model.hpp"
#include "models/parallel_forward.hpp"
#include "parallel/mesh_forward.hpp"
#include "runtime/comm.hpp"
#include "util/errors.hpp"

namespace acc::core::tp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The autograd functions keep the group by address: the model (which the graph runs) holds it, in its placements
// and its forward split.
int64_t address_of(const Collectives& g) { return reinterpret_cast<int64_t>(&g); }
const Collectives& group_at(AutogradContext* ctx) {
  return *reinterpret_cast<const Collectives*>(ctx->saved_data["group"].toInt());
}

at::Tensor all_reduced(const at::Tensor& x, const Collectives& g) {
  at::Tensor y = x.contiguous().clone();
  g.all_reduce_sum(y);
  return y;
}

at::Tensor gathered_last(const at::Tensor& x, const Collectives& g) {
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
    return all_reduced(x, *reinterpret_cast<const Collectives*>(group));
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
    return gathered_last(x, *reinterpret_cast<const Collectives*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t local = ctx->saved_data["local"].toInt();
    return {grads[0].narrow(-1, group_at(ctx).rank * local, local), at::Tensor()};
  }
};

// Along dim 1: every rank's [B, T_l, ...] into [B, size * T_l, ...], and the sum of [B, size * T_l, ...] over the
// ranks, this rank's [B, T_l, ...] of it.
at::Tensor gathered_sequence(const at::Tensor& x, const Collectives& g) {
  return g.all_gather(x.movedim(1, 0).contiguous()).movedim(0, 1).contiguous();
}
at::Tensor scattered_sequence(const at::Tensor& x, const Collectives& g) {
  return g.reduce_scatter(x.movedim(1, 0).contiguous()).movedim(0, 1).contiguous();
}

struct GatherSequenceFn : torch::autograd::Function<GatherSequenceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return gathered_sequence(x, *reinterpret_cast<const Collectives*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {scattered_sequence(grads[0], group_at(ctx)), at::Tensor()};
  }
};

struct ScatterSequenceFn : torch::autograd::Function<ScatterSequenceFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return scattered_sequence(x, *reinterpret_cast<const Collectives*>(group));
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
int64_t split_dim(const SplittableLayer& layer, LayerStyle style, const std::string& param, const at::Tensor& t) {
  if (style == LayerStyle::VocabEmbedding) return 0;
  if (style == LayerStyle::Colwise) return param == "bias" ? 0 : layer.output_dim();
  if (param == "bias") return -1;  // row-wise: the whole bias, added once after the reduction
  return t.dim() == 2 ? 1 - layer.output_dim() : -1;
}

// What a split layer computes differently: its row-wise output, its embedding over a vocabulary slice.
class SplitLayer final : public LayerSplit {
 public:
  SplitLayer(LayerStyle style, std::shared_ptr<const Collectives> group, bool sequence_parallel)
      : style_(style), group_(std::move(group)), sequence_parallel_(sequence_parallel) {}
  bool splits_input() const override { return style_ == LayerStyle::Rowwise || style_ == LayerStyle::RowwisePartial; }
  at::Tensor rowwise_output(const at::Tensor& partial, const at::Tensor& bias) const override {
    at::Tensor y = style_ == LayerStyle::RowwisePartial ? partial : leave(partial);
    return bias.defined() ? y + bias : y;
  }
  int64_t local_row(int64_t id, int64_t rows) const override {
    if (id < 0) return id;
    const int64_t start = group_->rank * rows;
    return id >= start && id < start + rows ? id - start : -1;
  }
  at::Tensor embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const override {
    const int64_t rows = weight.size(0), start = group_->rank * rows;
    at::Tensor outside = ids.lt(start).logical_or(ids.ge(start + rows));
    // Only the rank whose slice holds the pad id passes it on, as a local row.
    at::Tensor out = at::embedding(weight, (ids - start).masked_fill(outside, 0), local_row(padding_idx, rows));
    return leave(out.masked_fill(outside.unsqueeze(-1), 0));
  }

 private:
  at::Tensor leave(const at::Tensor& x) const {
    return sequence_parallel_ ? scatter_sequence(x, *group_) : reduce(x, *group_);
  }
  LayerStyle style_;
  std::shared_ptr<const Collectives> group_;
  bool sequence_parallel_;
};

// A planned layer of the model, found and checked before anything changes.
struct PlannedLayer {
  std::string module;
  SplittableLayer* layer;
  InitModule* init;
  LayerStyle style;
  int64_t packed;
};

std::vector<PlannedLayer> planned_layers(torch::nn::Module& root, const TensorParallelPlan& plan) {
  const std::string cls = root.name();
  std::vector<PlannedLayer> out;
  for (const auto& item : root.named_modules()) {
    for (const TensorParallelRule& e : plan) {
      if (!matches(e.pattern, item.key())) continue;
      auto* layer = dynamic_cast<SplittableLayer*>(item.value().get());
      auto* init = dynamic_cast<InitModule*>(item.value().get());
      if (!layer || !init)
        throw UnsupportedError("tensor parallelism: " + cls + "'s plan names '" + item.key() +
                               "', which is not a layer libacc splits");
      if ((e.style == LayerStyle::VocabEmbedding) != layer->is_embedding())
        throw UnsupportedError("tensor parallelism: '" + item.key() + "' cannot be split " + layer_style_name(e.style));
      if (e.style == LayerStyle::RowwisePartial && init->bias_or_none().defined())
        throw UnsupportedError("tensor parallelism: '" + item.key() + "' has a bias; its parent cannot add it once");
      out.push_back({item.key(), layer, init, e.style, e.packed});
      break;
    }
  }
  return out;
}
}  // namespace

Collectives collectives_of(std::shared_ptr<Comm> comm, const std::string& dim) {
  Collectives g;
  g.dim = dim;
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

Collectives collectives_of(c10::intrusive_ptr<c10d::ProcessGroup> pg, int rank, int size, const std::string& dim) {
  if (!pg) throw std::invalid_argument("tensor parallelism: the process group is null");
  if (rank < 0 || rank >= size || size != pg->getSize() || rank != pg->getRank())
    throw std::invalid_argument("tensor parallelism: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                " disagrees with the process group's rank " + std::to_string(pg->getRank()) + " of " +
                                std::to_string(pg->getSize()));
  Collectives g;
  g.dim = dim;
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

at::Tensor enter(const at::Tensor& x, const Collectives& g) {
  if (g.size == 1 || !c10::GradMode::is_enabled() || !x.requires_grad()) return x;
  return EnterFn::apply(x, address_of(g));
}

at::Tensor reduce(const at::Tensor& x, const Collectives& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return all_reduced(x, g);
  return ReduceFn::apply(x, address_of(g));
}

at::Tensor gather_last(const at::Tensor& x, const Collectives& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return gathered_last(x, g);
  return GatherLastFn::apply(x, address_of(g));
}

at::Tensor gather_sequence(const at::Tensor& x, const Collectives& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return gathered_sequence(x, g);
  return GatherSequenceFn::apply(x, address_of(g));
}

at::Tensor scatter_sequence(const at::Tensor& x, const Collectives& g) {
  if (g.size == 1) return x;
  if (!c10::GradMode::is_enabled() || !x.requires_grad()) return scattered_sequence(x, g);
  return ScatterSequenceFn::apply(x, address_of(g));
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                        const Collectives& g, bool sum) {
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

void parallelize(Model& model, std::shared_ptr<const Collectives> group_ptr, const Options& options) {
  const std::string plans = "(plans: Llama, Mistral, Qwen2, Mixtral, GPT-2 and the built-in GPT)";
  const auto [nn, family] = family_to_split(model, "tensor parallelism", "which has no tensor-parallel plan " + plans,
                                            "has no tensor-parallel plan " + plans, is_split(model));
  const std::string cls = nn->module()->name();
  const Collectives& group = *group_ptr;
  if (group.size < 1 || group.rank < 0 || group.rank >= group.size)
    throw std::invalid_argument("tensor parallelism: rank " + std::to_string(group.rank) + " of " +
                                std::to_string(group.size) + " is not a rank of the group");
  if (lora::find(*nn->module()))
    throw UnsupportedError("tensor parallelism: " + cls +
                           " has a LoRA adapter: libacc's LoRA and tensor parallelism do not "
                           "combine (merge the adapter first)");
  const std::vector<PlannedLayer> layers = planned_layers(*nn->module(), family->tensor_parallel_plan(group.size));

  // Everything is checked before anything changes.
  Placements& placements = model.placements();
  std::map<std::string, Placement::Split> splits;  // by parameter
  for (const PlannedLayer& s : layers) {
    for (const auto& p : s.init->named_parameters(/*recurse=*/false)) {
      const int64_t dim = split_dim(*s.layer, s.style, p.key(), p.value());
      if (dim < 0) continue;
      const int64_t packed = s.style == LayerStyle::Colwise ? s.packed : 1;
      const int64_t n = p.value().size(dim);
      if (n % (packed * group.size) != 0)
        throw std::invalid_argument("tensor parallelism: " + s.module + "." + p.key() + "'s dimension " +
                                    std::to_string(dim) + " (" + std::to_string(n) + ") does not split into " +
                                    std::to_string(group.size) + " equal parts" +
                                    (packed > 1 ? " per packed block" : ""));
      splits[s.module + "." + p.key()] = Placement::Split{dim, packed, group_ptr};
    }
  }
  const bool sequence_parallel = options.sequence_parallel && group.size > 1;
  c10::NoGradGuard no_grad;
  for (const PlannedLayer& s : layers) {
    for (const auto& p : s.init->named_parameters(/*recurse=*/false)) {
      const std::string name = s.module + "." + p.key();
      auto it = splits.find(name);
      if (it == splits.end()) continue;
      at::Tensor& param = s.init->param(p.key().c_str());
      const bool grad = param.requires_grad();
      placements.set_split(name, it->second, param.sizes().vec());
      param = part_of(param, it->second.dim, it->second.packed, group.rank, group.size).clone().requires_grad_(grad);
    }
    s.layer->set_split(std::make_shared<SplitLayer>(s.style, group_ptr, sequence_parallel));
  }
  if (sequence_parallel) {
    // The replicated parameters (norms, row-wise biases, the router, positions) saw this rank's tokens only: their
    // gradients are summed over the group, as each reaches them.
    for (const auto& [name, p] : model.named_parameters()) {
      if (splits.count(name) || !p.requires_grad()) continue;
      at::Tensor param = p;
      param.register_hook([group_ptr](const at::Tensor& grad) { return all_reduced(grad, *group_ptr); });
    }
  }
  auto forward = std::make_shared<MeshForward>(MeshForward::of(*family));
  forward->tensor = MeshForward::TensorPart{group_ptr, sequence_parallel};
  family->install_split(std::move(forward));
}

bool is_split(const Model& model) { return model.placements().any_split(); }

}  // namespace acc::core::tp
