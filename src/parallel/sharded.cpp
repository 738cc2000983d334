#include "parallel/sharded.hpp"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>

#include "models/deferred.hpp"
#include "models/model.hpp"
#include "models/module_tree.hpp"
#include "util/errors.hpp"
#include <acc/json.hpp>

namespace acc::core {

// One unit's parameters of one dtype, trainable or frozen, flattened. (Outside the anonymous namespace: ShardState,
// which is not in it, holds them.)
struct FlatParam {
  std::string unit;
  bool trainable = true;  // frozen: gathered and freed as the others, but no gradients, reduction or optimizer pieces
  std::vector<size_t> members;  // indices into ShardState::params
  std::vector<int64_t> offsets;  // each member's first element in `flat`
  int64_t numel = 0, shard_len = 0;
  at::Tensor flat;  // shard_len * world elements, in the compute dtype; the members are views of it
  at::Tensor shard;  // this rank's slice, in the parameters' own dtype (a view of `flat` when it can be)
  bool shard_in_flat = false;
  bool predivided = false;  // the flat gradient was divided by the number of processes before a narrow reduce-scatter
  // What the optimizer steps: the parts of parameters inside the shard, as views of it. Stepped one tensor per
  // parameter (as FSDP's use_orig_params), each starting a multiple of 64 bytes into its parameter, the vectorised
  // kernels round every element as they do for the whole parameter: the result equals DDP's bit for bit.
  struct Piece {
    int64_t offset = 0, length = 0;  // in the shard
    at::Tensor tensor;
    size_t member = 0;  // whose part it is
    int64_t param_offset = 0;  // where in that parameter it starts
  };
  std::vector<Piece> pieces;
  bool gathered = true;
  std::unique_ptr<PendingWork> gathering;  // a prefetch's all-gather into `flat`, not waited for yet
  at::Tensor gather_source;  // what it sends (kept alive until it is done)
  bool on_demand = false;  // a unit the model reports: gathered just before its forward and its backward
  size_t pending = 0;  // members whose gradient this backward has not produced yet
  int64_t held_bytes = 0;  // gradients waiting in their parameters' .grad for the flat gradient (collect_gradient)
  bool ready = false;  // every member's gradient is in (or the backward is over)
  at::Tensor grad_in, grad_out;
  std::unique_ptr<PendingWork> work;
};

namespace {

// Frees a flat buffer's memory while every view of it (the parameters, and autograd's saved copies)
// keeps pointing at the same storage, which allocate_storage() later fills again (FSDP's storage resize).
void free_storage(const at::Tensor& flat) {
  c10::StorageImpl* s = flat.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, flat.device()));
  s->set_nbytes(0);
}

void allocate_storage(const at::Tensor& flat) {
  c10::StorageImpl* s = flat.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(flat.numel()) * flat.element_size();
  c10::Allocator* a = s->allocator() ? s->allocator() : c10::GetAllocator(flat.device().type());
  s->set_data_ptr_noswap(a->allocate(bytes));
  s->set_nbytes(bytes);
}

}  // namespace

struct ShardState final : UnitHooks {
  std::shared_ptr<Comm> comm;  // the ranks that share the shards (all of them, but under hybrid sharding)
  std::shared_ptr<Comm> replicas;  // hybrid sharding: the ranks that hold the same shard; null otherwise
  ShardingOptions opts;
  std::vector<at::Tensor> params;  // unique (tied weights once), trainable and frozen
  std::vector<size_t> group_of;  // param -> group
  std::vector<size_t> member_of;  // param -> its position in the group
  std::vector<FlatParam> groups;  // in order of first parameter
  bool in_backward = false, sync = false;
  bool awaiting_backward = false;  // a forward with gradients ran; its backward has not
  size_t next_to_launch = 0;  // counts groups launched, last group first
  FlatParam* in_flight = nullptr;  // the last group launched, not yet waited for
  std::mutex mu;  // autograd may run hooks on its worker thread

  int world() const { return comm->size(); }
  // Every process of the job: what gradients are averaged over.
  int total() const { return comm->size() * (replicas ? replicas->size() : 1); }

  // Waits for the group's prefetch, if one is in flight.
  static void settle(FlatParam& g) {
    if (!g.gathering) return;
    g.gathering->wait();
    g.gathering.reset();
    g.gather_source.reset();
  }

  // The group's parameters are whole once this returns (a prefetch in flight is waited for).
  void gather(FlatParam& g) {
    settle(g);
    if (g.gathered) return;
    allocate_storage(g.flat);
    at::Tensor mine = g.shard.detach().to(g.flat.device(), g.flat.scalar_type());  // the compute dtype travels
    comm->all_gather_into(g.flat, mine);
    g.gathered = true;
  }

  // Starts the group's all-gather without waiting for it; gather() waits.
  void prefetch(FlatParam& g) {
    if (g.gathered || g.gathering) return;
    allocate_storage(g.flat);
    g.gather_source = g.shard.detach().to(g.flat.device(), g.flat.scalar_type());
    g.gathering = comm->all_gather_into_async(g.flat, g.gather_source);
    g.gathered = true;
  }

  // The on-demand units in the order of the model's forward (stage 3 with prefetching).
  std::vector<std::string> unit_order;

  // Prefetches the unit `step` places from `name` in unit_order (+1: the next forward, -1: the next backward).
  void prefetch_neighbour(const std::string& name, int step) {
    auto it = std::find(unit_order.begin(), unit_order.end(), name);
    if (it == unit_order.end()) return;
    const auto at = (it - unit_order.begin()) + step;
    if (at < 0 || at >= static_cast<std::ptrdiff_t>(unit_order.size())) return;
    for (FlatParam& g : groups)
      if (g.on_demand && g.unit == unit_order[static_cast<size_t>(at)]) prefetch(g);
  }

  at::ScalarType reduce_dtype(const FlatParam& g) const {
    return opts.reduce_dtype != at::ScalarType::Undefined && at::isFloatingType(g.shard.scalar_type())
               ? opts.reduce_dtype
               : g.flat.scalar_type();
  }

  void reshard(FlatParam& g) {
    if (opts.stage < 3 || !g.gathered) return;
    settle(g);  // never free a buffer a collective is writing
    free_storage(g.flat);
    g.gathered = false;
  }

  // On CPU, stage 3 waits for the reduce-scatter in flight before it makes the next flat gradient: a unit's gradients,
  // not two, are what backward adds to the shards (ZeRO-3's memory model), and Gloo shares the cores with the
  // computation, so overlapping the two bought no speed (bench/README.md). On a GPU, NCCL's reduce-scatter overlaps
  // the next unit's backward, as in FSDP; stages 1-2 always overlap two buckets.
  void make_flat_gradient(FlatParam& g) {
    if (g.grad_in.defined()) return;
    if (opts.stage == 3 && in_flight && in_flight != &g && !g.flat.is_cuda()) finish(*in_flight);
    g.grad_in = at::zeros({g.shard_len * world()}, g.shard.options().dtype(reduce_dtype(g)).requires_grad(false));
  }

  // A parameter's gradient moves into its group's flat gradient (added: accumulation steps sum there) and the
  // parameter's own is freed, so gradients take no more memory than one flat copy.
  void take_gradient(FlatParam& g, size_t j) {
    at::Tensor& p = params[g.members[j]];
    if (!p.grad().defined()) return;
    c10::NoGradGuard no_grad;
    make_flat_gradient(g);
    g.grad_in.narrow(0, g.offsets[j], p.numel()).add_(p.grad().reshape({-1}));
    p.mutable_grad().reset();
  }

  // A parameter's gradient has arrived. Small ones wait in their .grad until the group's flat gradient exists, made
  // once more than kHoldBytes have arrived or the group is complete: the root unit's norm gradients arrive at the
  // start of backward and its (tied) embedding's at the very end, so its flat gradient is not held all along.
  static constexpr int64_t kHoldBytes = int64_t{1} << 20;
  void collect_gradient(FlatParam& g, size_t j) {
    if (g.grad_in.defined()) return take_gradient(g, j);
    const at::Tensor& grad = params[g.members[j]].grad();
    if (grad.defined()) g.held_bytes += grad.numel() * static_cast<int64_t>(grad.element_size());
    if (g.held_bytes <= kHoldBytes && g.pending > 1) return;
    take_gradients(g);
  }
  void take_gradients(FlatParam& g) {
    for (size_t k = 0; k < g.members.size(); ++k) take_gradient(g, k);
  }

  // The group's flat gradient goes out as one reduce-scatter, once the one before is done and its flat gradient
  // freed: one is in flight while backward goes on, so gradients in transit never exceed one bucket or unit.
  void launch(FlatParam& g) {
    take_gradients(g);
    make_flat_gradient(g);
    // A sum of world-size gradients in 16 bits can overflow: divide first (torch's FSDP pre-divides too).
    g.predivided = g.grad_in.scalar_type() != g.shard.scalar_type();
    if (g.predivided) g.grad_in.div_(total());
    if (in_flight) finish(*in_flight);
    g.grad_out = at::empty({g.shard_len}, g.grad_in.options());
    g.work = comm->reduce_scatter_sum_async(g.grad_out, g.grad_in);
    in_flight = &g;
  }

  void finish(FlatParam& g) {
    if (!g.work) return;
    g.work->wait();
    g.work.reset();
    // Freed now, not when the backend's worker thread lets go of its work a moment later (then it could still hold
    // this buffer as the next flat gradient is made).
    free_storage(g.grad_in);
    g.grad_in.reset();
    if (in_flight == &g) in_flight = nullptr;
  }

  // Every rank issues its collectives in one order: the last group first, as backward reaches them.
  void launch_ready_suffix() {
    while (next_to_launch < groups.size()) {
      FlatParam& g = groups[groups.size() - 1 - next_to_launch];
      if (!g.ready) break;
      if (g.trainable) launch(g);
      ++next_to_launch;
    }
  }

  // Gathers the unit, then prefetches its neighbour `step` places on (0: none).
  void gather_unit(const std::string& name, int step) {
    std::lock_guard<std::mutex> lock(mu);
    for (FlatParam& g : groups)
      if (g.on_demand && g.unit == name) gather(g);
    if (step != 0) prefetch_neighbour(name, step);
  }

  void before_unit(const std::string& name, const at::Tensor& input) override {
    gather_unit(name, opts.forward_prefetch ? 1 : 0);
    // A unit's frozen parameters get no gradient to say when backward is done with them: that is when the gradient
    // of the unit's input is complete (every use of them inside the unit is behind it). A unit whose input needs
    // no gradient (the first block of a model with a frozen embedding) keeps them until the end of backward.
    if (!c10::GradMode::is_enabled() || !input.requires_grad() || opts.stage < 3) return;
    bool frozen = false;
    for (const FlatParam& g : groups) frozen |= g.on_demand && g.unit == name && !g.trainable;
    if (!frozen) return;
    std::weak_ptr<ShardState> self = self_;
    const_cast<at::Tensor&>(input).register_hook([self, name](at::Tensor grad) {
      if (auto s = self.lock()) {
        std::lock_guard<std::mutex> lock(s->mu);
        for (FlatParam& g : s->groups)
          if (g.on_demand && g.unit == name && !g.trainable) s->reshard(g);
      }
      return grad;
    });
  }

  void after_unit(const std::string& name, const at::Tensor& output) override {
    if (c10::GradMode::is_enabled() && output.requires_grad()) {
      // Backward computes the gradient of the unit's output just before it runs the unit's own backward:
      // the parameters must be back by then (FSDP's pre-backward hook).
      std::weak_ptr<ShardState> self = self_;
      const int step = opts.backward_prefetch == "BACKWARD_PRE" ? -1 : 0;
      const_cast<at::Tensor&>(output).register_hook([self, name, step](at::Tensor grad) {
        if (auto s = self.lock()) s->gather_unit(name, step);
        return grad;
      });
      if (!opts.reshard_after_forward) return;
    }
    std::lock_guard<std::mutex> lock(mu);
    for (FlatParam& g : groups)
      if (g.on_demand && g.unit == name) reshard(g);
  }

  // Whether the head's backward may free the root unit (set_unit_hooks): the root holds only what is outside the
  // model's blocks, every block being a unit of its own.
  bool head_frees_root = false;

  void after_head(const at::Tensor& input, const at::Tensor& output) override {
    if (!head_frees_root || !c10::GradMode::is_enabled() || !input.requires_grad() || !output.requires_grad()) return;
    // The root is gathered again when backward reaches the head (another forward's, or a retained graph's) and
    // freed once the head's backward is done, instead of at the end of backward.
    std::weak_ptr<ShardState> self = self_;
    const_cast<at::Tensor&>(output).register_hook([self](at::Tensor grad) {
      if (auto s = self.lock()) s->for_root(&ShardState::gather);
      return grad;
    });
    const_cast<at::Tensor&>(input).register_hook([self](at::Tensor grad) {
      if (auto s = self.lock()) s->for_root(&ShardState::reshard);
      return grad;
    });
  }

  void for_root(void (ShardState::*f)(FlatParam&)) {
    std::lock_guard<std::mutex> lock(mu);
    for (FlatParam& g : groups)
      if (g.unit.empty()) (this->*f)(g);
  }

  std::weak_ptr<ShardState> self_;

  void mark_ready(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!in_backward) return;
    FlatParam& g = groups[group_of[i]];
    collect_gradient(g, member_of[i]);
    if (g.pending == 0 || --g.pending > 0) return;
    take_gradients(g);
    // Backward is done with this unit: stage 3 frees its parameters, stage 2 sends its gradients now.
    reshard(g);
    if (g.on_demand && opts.backward_prefetch == "BACKWARD_POST") prefetch_neighbour(g.unit, -1);
    if (sync && opts.stage >= 2) {
      g.ready = true;
      launch_ready_suffix();
    }
  }
};

namespace {

class ShardHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ShardHook(std::weak_ptr<ShardState> s, size_t i) : state_(std::move(s)), index_(i) {}
  void operator()(const torch::autograd::Variable&) override {
    if (auto s = state_.lock()) s->mark_ready(index_);
  }

 private:
  std::weak_ptr<ShardState> state_;
  size_t index_;
};

std::string unit_of(const std::string& name, const std::set<std::string>& units) {
  // The innermost wrapped module holding the parameter; "" (the root) when none does.
  std::string best;
  for (const auto& u : units)
    if (u.size() > best.size() && name.size() > u.size() && name.compare(0, u.size(), u) == 0 && name[u.size()] == '.')
      best = u;
  return best;
}

class ShardedStrategy final : public Strategy {
 public:
  ShardedStrategy(std::shared_ptr<Model> model, c10::Device device, const ShardGroups& groups,
                  const ShardingOptions& opts)
      : Strategy(std::move(model)), s_(std::make_shared<ShardState>()) {
    if (opts.stage < 1 || opts.stage > 3) throw std::invalid_argument("ZeRO stage must be 1, 2 or 3");
    if (!groups.all || !groups.shard) throw std::invalid_argument("sharded strategy: no process group");
    ShardState& s = *s_;
    s.opts = opts;
    // ZeRO-3's zero3_init_flag: the parameters still on the meta device are made below, one module at a time, each
    // rank keeping its shards (models/deferred.hpp); the rest of the state moves and is broadcast as usual.
    const std::shared_ptr<DeferredParameters> deferred =
        model_->deferred() && model_->deferred()->pending() ? model_->deferred() : nullptr;
    if (deferred && opts.stage != 3)
      throw std::logic_error("sharded strategy: only stage 3 makes the deferred parameters (the accelerator makes "
                             "them whole for the others)");
    start_from_rank0(device, *groups.all, deferred.get());
    // Hybrid sharding (HSDP): the mesh's dp_shard groups share shards, its dp_replicate groups hold the same shard.
    s.comm = groups.shard;
    if (groups.replicas && groups.replicas->size() > 1) s.replicas = groups.replicas;
    const std::set<std::string> units(opts.units.begin(), opts.units.end());
    const std::vector<std::string> names = group_parameters(units);
    c10::NoGradGuard no_grad;
    std::vector<std::pair<at::Tensor, at::Tensor>> views_later;  // (parameter, its view): lay_out_deferred's
    for (FlatParam& g : s.groups) {
      // Padded so that every rank's slice has one length, a multiple of the alignment.
      const int world = s.world();
      const int64_t align = std::max<int64_t>(1, 64 / static_cast<int64_t>(s.params[g.members.front()].element_size()));
      g.shard_len = (g.numel + align * world - 1) / (align * world) * align;
      if (deferred) lay_out_deferred(g, *deferred, names, device, views_later);
      else lay_out(g);
      cut_pieces(g);
      s_->reshard(g);
    }
    if (deferred) {
      try {
        make_deferred(*deferred, names);
      } catch (...) {
        deferred->revert();  // the model as it was: on the meta device, still to be made
        throw;
      }
      for (auto& [p, view] : views_later) p.set_data(view);
    }
    for (size_t i = 0; i < s.params.size(); ++i)
      if (s.groups[s.group_of[i]].trainable)
        torch::autograd::impl::set_post_acc_grad_hooks(s.params[i], std::make_unique<ShardHook>(s_, i));
    record_placements();
    if (opts.stage == 3) gather_on_demand(units);
  }

 private:
  // Every rank starts from rank 0's weights (FSDP's sync_module_states, DeepSpeed's broadcast), on `device`.
  void start_from_rank0(c10::Device device, Comm& all, DeferredParameters* deferred) {
    std::vector<at::Tensor> state;
    if (deferred) {
      c10::NoGradGuard no_grad;
      for (auto& [n, t] : model_->state()) {
        if (t.is_meta()) continue;
        if (t.device() != device) t.set_data(t.to(device));
        state.push_back(t);
      }
      for (const at::Tensor& t : deferred->rank0_state()) state.push_back(t);  // what makes rank 0's values
    } else {
      model_->to(device);
      for (auto& [n, t] : model_->state()) state.push_back(t);
    }
    broadcast_from_rank0(all, state);
  }

  // The parameters into flat groups: by unit, dtype and requires_grad (stages 1-2: in buckets of bucket_cap_mb).
  // Returns each parameter's (first) name, in s_->params' order.
  std::vector<std::string> group_parameters(const std::set<std::string>& units) {
    ShardState& s = *s_;
    std::vector<std::string> names;
    std::map<std::tuple<std::string, at::ScalarType, bool>, size_t> index;  // the group being filled
    const double cap = s.opts.stage < 3 ? s.opts.bucket_cap_mb * 1048576.0 : std::numeric_limits<double>::infinity();
    std::set<const void*> seen;
    // Frozen parameters are sharded too (as FSDP shards a flat parameter whatever its requires_grad), in groups of
    // their own within their unit: only the trainable ones have gradients and optimizer state.
    for (auto& [name, p] : model_->named_parameters()) {
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      auto key = std::make_tuple(unit_of(name, units), p.scalar_type(), p.requires_grad());
      auto it = index.find(key);
      if (it != index.end() && static_cast<double>((s.groups[it->second].numel + p.numel()) * p.element_size()) > cap) {
        index.erase(it);  // that bucket is full
        it = index.end();
      }
      if (it == index.end()) {
        it = index.emplace(key, s.groups.size()).first;
        s.groups.emplace_back();
        s.groups.back().unit = std::get<0>(key);
        s.groups.back().trainable = std::get<2>(key);
      }
      FlatParam& g = s.groups[it->second];
      // Each parameter starts 64-byte aligned, as its own allocation would: BLAS kernels round differently
      // on misaligned data, and the sharded model must compute what the unsharded one does, bit for bit.
      const int64_t align = std::max<int64_t>(1, 64 / static_cast<int64_t>(p.element_size()));
      g.numel = (g.numel + align - 1) / align * align;
      s.member_of.push_back(g.members.size());
      g.members.push_back(s.params.size());
      g.offsets.push_back(g.numel);
      g.numel += p.numel();
      s.group_of.push_back(it->second);
      s.params.push_back(p);
      names.push_back(name);
    }
    return names;
  }

  // A group's flat buffer from its parameters' values (which become views of it, in the compute dtype) and this
  // rank's shard of it.
  void lay_out(FlatParam& g) {
    ShardState& s = *s_;
    const ShardingOptions& opts = s.opts;
    const int world = s.world(), rank = s.comm->rank();
    const at::Tensor& first = s.params[g.members.front()];
    at::Tensor master = at::zeros({g.shard_len * world}, first.options().requires_grad(false));
    for (size_t j = 0; j < g.members.size(); ++j)
      master.narrow(0, g.offsets[j], s.params[g.members[j]].numel())
          .copy_(s.params[g.members[j]].detach().reshape({-1}));
    const at::ScalarType own = first.scalar_type();  // (set_data below changes it)
    const at::ScalarType compute =
        opts.param_dtype != at::ScalarType::Undefined && at::isFloatingType(own) ? opts.param_dtype : own;
    g.flat = compute == own ? master : master.to(compute);
    for (size_t j = 0; j < g.members.size(); ++j) {
      at::Tensor& p = s.params[g.members[j]];
      p.set_data(g.flat.narrow(0, g.offsets[j], p.numel()).view(p.sizes()));
    }
    at::Tensor mine = master.narrow(0, rank * g.shard_len, g.shard_len);
    // Stages 1 and 2 step the flat buffer's own slice; stage 3, or parameters computed in another dtype, keep
    // the slice on its own (the flat buffer is freed, or holds the compute dtype's copy).
    g.shard_in_flat = opts.stage < 3 && compute == own && !opts.offload;
    g.shard = g.shard_in_flat ? mine.detach()
              : opts.offload  ? mine.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true)
                              : mine.clone();
  }

  // What the optimizer steps of a group: the parts of its members inside this rank's shard.
  void cut_pieces(FlatParam& g) {
    ShardState& s = *s_;
    const int64_t lo = s.comm->rank() * g.shard_len, hi = lo + g.shard_len;
    for (size_t j = 0; j < g.members.size(); ++j) {
      const int64_t a = std::max(lo, g.offsets[j]), b = std::min(hi, g.offsets[j] + s.params[g.members[j]].numel());
      if (a < b)
        g.pieces.push_back({a - lo, b - a, g.shard.narrow(0, a - lo, b - a).detach().requires_grad_(g.trainable), j,
                            a - g.offsets[j]});
    }
  }

  // The model's record of this rank's pieces (of each parameter flattened), over the group FSDP shards over.
  void record_placements() {
    const std::map<const void*, std::string> first = first_names();
    for (const FlatParam& g : s_->groups)
      for (const FlatParam::Piece& piece : g.pieces)
        model_->placements().add_flat(first.at(s_->params[g.members[piece.member]].unsafeGetTensorImpl()),
                                      "dp_shard_cp", piece.param_offset, piece.length);
  }

  // Stage 3 gathers the units the model reports one at a time.
  void gather_on_demand(const std::set<std::string>& units) {
    ShardState& s = *s_;
    s.self_ = s_;
    const auto reported = model_->reported_units();
    const std::set<std::string> on_demand(reported.begin(), reported.end());
    for (FlatParam& g : s.groups) g.on_demand = on_demand.count(g.unit) > 0;
    for (const auto& u : reported)
      for (const FlatParam& g : s.groups)
        if (g.on_demand && g.unit == u) {
          s.unit_order.push_back(u);
          break;
        }
    s.head_frees_root = !reported.empty() && std::all_of(reported.begin(), reported.end(),
                                                         [&](const std::string& u) { return units.count(u) > 0; });
    model_->set_unit_hooks(s_.get());
  }

 public:
  // zero3_init_flag's layout of a group: its parameters become views of a flat buffer that is never filled here (the
  // caller's reshard frees it), and this rank's shard starts as zeros for make_deferred to fill. Members that were
  // not deferred (a LoRA adapter's factors) copy their part now and become views once every value is made.
  void lay_out_deferred(FlatParam& g, DeferredParameters& deferred, const std::vector<std::string>& names,
                        c10::Device device, std::vector<std::pair<at::Tensor, at::Tensor>>& later) {
    ShardState& s = *s_;
    const at::ScalarType own = s.params[g.members.front()].scalar_type();
    const at::ScalarType compute =
        s.opts.param_dtype != at::ScalarType::Undefined && at::isFloatingType(own) ? s.opts.param_dtype : own;
    const auto plain = at::TensorOptions().dtype(own).requires_grad(false);
    g.flat = at::empty({g.shard_len * s.world()}, plain.dtype(compute).device(device));
    g.shard_in_flat = false;
    g.shard = at::zeros({g.shard_len}, plain.device(s.opts.offload ? c10::Device(c10::kCPU) : device));
    for (size_t j = 0; j < g.members.size(); ++j) {
      at::Tensor& p = s.params[g.members[j]];
      at::Tensor view = g.flat.narrow(0, g.offsets[j], p.numel()).view(p.sizes());
      if (p.is_meta()) {
        p = deferred.adopt(names[g.members[j]], view);
      } else {
        fill_shard(g, j, p);
        later.emplace_back(p, view);
      }
    }
  }

  // This rank's part of the group's member j, whose whole value is `whole`, into the shard.
  void fill_shard(FlatParam& g, size_t j, const at::Tensor& whole) {
    const int64_t lo = s_->comm->rank() * g.shard_len, off = g.offsets[j];
    const int64_t a = std::max(lo, off), b = std::min(lo + g.shard_len, off + whole.numel());
    if (a < b) g.shard.narrow(0, a - lo, b - a).copy_(whole.detach().reshape({-1}).narrow(0, a - off, b - a));
  }

  // Every deferred parameter made (one module at a time, rank 0's values: its generator state came with the
  // broadcast), each keeping only this rank's part.
  void make_deferred(DeferredParameters& deferred, const std::vector<std::string>& names) {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
    deferred.make([&](const std::string& name, const at::Tensor& value) {
      auto it = index.find(name);
      if (it != index.end()) fill_shard(s_->groups[s_->group_of[it->second]], s_->member_of[it->second], value);
    });
    deferred.finish();
    for (const auto& [n, t] : model_->state())
      if (t.is_meta()) throw std::logic_error("sharded strategy: '" + n + "' was not made");
  }

  ~ShardedStrategy() override {
    model_->set_unit_hooks(nullptr);
    for (size_t i = 0; i < s_->params.size(); ++i)
      if (s_->groups[s_->group_of[i]].trainable) torch::autograd::impl::set_post_acc_grad_hooks(s_->params[i], nullptr);
  }

  std::string name() const override {
    return s_->opts.label.empty() ? "ZeRO stage " + std::to_string(s_->opts.stage) : s_->opts.label;
  }
  bool sharded() const override { return true; }
  bool parameters_whole() const override { return s_->opts.stage < 3; }
  // A tensor-parallel model's own tensors are its slices: never its state as full_state_dict gives it.
  bool state_in_model() const override { return whole_in_model() && !model_->placements().any_split(); }

  std::vector<at::Tensor> optimizer_parameters() const override {
    std::vector<at::Tensor> v;
    for (const FlatParam& g : s_->groups)
      if (g.trainable)
        for (const FlatParam::Piece& piece : g.pieces) v.push_back(piece.tensor);
    return v;
  }

  std::vector<at::Tensor> pieces_of(const at::Tensor& param) const override {
    std::vector<at::Tensor> v;
    for (const PieceAt& at : pieces_at(param)) v.push_back(at.piece->tensor);
    return v;
  }

  void before_forward() override {
    // The rest of the model (the root unit, units the model does not report) for the whole forward.
    std::lock_guard<std::mutex> lock(s_->mu);
    for (FlatParam& g : s_->groups)
      if (!g.on_demand) s_->gather(g);
  }

  void after_forward() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    // A forward with gradients keeps the parameters until its backward is done with each unit; one
    // without (evaluation) frees them now, unless an earlier forward's backward is still to come.
    if (c10::GradMode::is_enabled()) {
      s_->awaiting_backward = true;
      return;
    }
    if (!s_->awaiting_backward)
      for (FlatParam& g : s_->groups) s_->reshard(g);
  }

  void before_backward(bool sync) override {
    ShardState& s = *s_;
    std::lock_guard<std::mutex> lock(s.mu);
    // A model that ran no forward with gradients since its last backward takes no part in this one.
    if (!s.awaiting_backward) return;
    s.awaiting_backward = false;
    s.in_backward = true;
    s.sync = sync;
    s.next_to_launch = 0;
    for (FlatParam& g : s.groups) {
      g.pending = g.trainable ? g.members.size() : 0;
      g.held_bytes = 0;
      g.ready = !g.trainable;
    }
  }

  void after_backward() override {
    ShardState& s = *s_;
    std::unique_lock<std::mutex> lock(s.mu);
    if (!s.in_backward) return;
    s.in_backward = false;
    // Units that backward did not reach (unused parameters): their gradients count as zeros.
    for (FlatParam& g : s.groups) {
      s.take_gradients(g);  // what still waits in .grad (a group backward did not complete)
      s.reshard(g);
      g.pending = 0;
      g.ready = true;
    }
    if (!s.sync) return;
    s.launch_ready_suffix();
    lock.unlock();
    c10::NoGradGuard no_grad;
    const double inv_world = 1.0 / s.total();
    for (size_t k = s.groups.size(); k-- > 0;) {
      FlatParam& g = s.groups[k];
      if (!g.trainable) continue;
      s.finish(g);
      if (s.replicas) s.replicas->all_reduce(g.grad_out, ReduceOp::Sum);  // the other machines' sums of this shard
      if (!g.predivided) g.grad_out.mul_(inv_world);  // as DDP: sum, then divide
      for (FlatParam::Piece& piece : g.pieces) {
        at::Tensor grad =
            g.grad_out.narrow(0, piece.offset, piece.length).to(piece.tensor.device(), piece.tensor.scalar_type());
        if (piece.tensor.grad().defined()) piece.tensor.mutable_grad().add_(grad);
        else piece.tensor.mutable_grad() = grad;  // a view: Optimizer::zero_grad frees without detaching
      }
      g.grad_out = at::Tensor();
    }
  }

  void after_optimizer_step() override {
    // Gathered parameters (always, below stage 3) take the new values; freed ones get them at the next gather.
    std::lock_guard<std::mutex> lock(s_->mu);
    c10::NoGradGuard no_grad;
    for (FlatParam& g : s_->groups) {
      if (!g.gathered || !g.trainable) continue;  // frozen ones did not change
      ShardState::settle(g);
      // The collective must not read what it writes: a copy when the shard is a slice of the flat buffer.
      at::Tensor mine = g.shard_in_flat ? g.shard.detach().clone()
                                        : g.shard.detach().to(g.flat.device(), g.flat.scalar_type());
      s_->comm->all_gather_into(g.flat, mine);
    }
  }

  at::Tensor grad_norm(double norm_type, const std::set<std::string>& left_out) const override {
    // The norm over every rank's shards (padding is zero): local sums of |g|^p (or the max), then one all-reduce.
    // A tensor-parallel model: [0] sums the pieces of split parameters, whose slices differ across the tp group
    // (summed over it too), [1] the replicated ones' (the same on every tp rank: counted once).
    const Placements& placements = model_->placements();
    std::set<const void*> split_params;
    const Collectives* split = nullptr;  // the group the split parameters are split over
    for (const auto& [name, p] : model_->named_parameters())
      if (const Placement::Split* s = placements.split_of(name)) {
        split_params.insert(p.unsafeGetTensorImpl());
        split = s->over.get();
      }
    const bool inf = std::isinf(norm_type);
    const std::map<const void*, std::string> names = first_names();
    at::Tensor local = at::zeros({2}, at::kFloat);
    for (const FlatParam& g : s_->groups) {
      if (!g.trainable) continue;
      for (const FlatParam::Piece& piece : g.pieces) {
        if (!piece.tensor.grad().defined() ||
            left_out.count(names.at(s_->params[g.members[piece.member]].unsafeGetTensorImpl())))
          continue;
        at::Tensor n = at::linalg_vector_norm(piece.tensor.grad().detach().to(at::kFloat), norm_type).cpu();
        const int64_t k = split_params.count(s_->params[g.members[piece.member]].unsafeGetTensorImpl()) ? 0 : 1;
        local[k].copy_(inf ? at::maximum(local[k], n) : local[k] + n.pow(norm_type));
      }
    }
    s_->comm->all_reduce(local, inf ? ReduceOp::Max : ReduceOp::Sum);
    at::Tensor parts = local;
    if (split) {
      at::Tensor over_tp = local.narrow(0, 0, 1).clone();
      inf ? split->all_reduce_max(over_tp) : split->all_reduce_sum(over_tp);
      parts = at::cat({over_tp, local.narrow(0, 1, 1)});
    }
    return inf ? parts.max() : parts.sum().pow(1.0 / norm_type);
  }

  NamedTensors full_state_dict(const std::set<std::string>* only = nullptr) const override {
    if (whole_in_model()) return Strategy::full_state_dict(only);
    // The masters (the shards, in the parameters' own dtype), gathered into whole tensors: a collective. With `only`,
    // the groups holding none of those names are not gathered (every rank skips the same ones).
    std::set<const void*> wanted;
    if (only)
      for (const auto& [name, p] : model_->named_parameters())
        if (only->count(name)) wanted.insert(p.unsafeGetTensorImpl());
    std::lock_guard<std::mutex> lock(s_->mu);
    std::map<const void*, at::Tensor> whole;
    for (const FlatParam& g : s_->groups) {
      if (only && std::none_of(g.members.begin(), g.members.end(),
                               [&](size_t m) { return wanted.count(s_->params[m].unsafeGetTensorImpl()) > 0; }))
        continue;
      at::Tensor flat = at::empty({g.shard_len * s_->world()}, g.shard.options().requires_grad(false));
      at::Tensor mine = g.shard.detach();
      s_->comm->all_gather_into(flat, mine);
      for (size_t j = 0; j < g.members.size(); ++j) {
        const at::Tensor& p = s_->params[g.members[j]];
        whole[p.unsafeGetTensorImpl()] = flat.narrow(0, g.offsets[j], p.numel()).view(p.sizes());
      }
    }
    // Tensor parallelism: the gathered tensors are this rank's slices, gathered whole over the tp group.
    NamedTensors out;
    for (auto& [name, t] : model_->state()) {
      if (only && !only->count(name)) continue;
      auto it = whole.find(t.unsafeGetTensorImpl());
      at::Tensor mine = it != whole.end() ? it->second : t.detach();
      out.emplace_back(name, whole_tensor(model_->placements(), name, mine));
    }
    return out;
  }

  void load_full_state_dict(const NamedTensors& given, const std::string& source) override {
    // Tensor parallelism: this rank's slices of the whole tensors are what the shards hold.
    const NamedTensors tensors = local_state(model_->placements(), given);
    if (whole_in_model()) return model_->load_state_dict(tensors, source);
    with_gathered([&] {
      model_->load_state_dict(tensors, source);  // checks every name and shape; fills buffers and the flat buffers
      // The masters from the given tensors themselves (not from a compute-dtype copy of them).
      std::map<const void*, const at::Tensor*> by_impl;
      const NamedTensors params = model_->named_parameters();
      std::map<std::string, const at::Tensor*> given;
      for (const auto& [name, t] : tensors) given[name] = &t;
      for (const auto& [name, p] : params) by_impl.emplace(p.unsafeGetTensorImpl(), given.at(name));
      c10::NoGradGuard no_grad;
      for (FlatParam& g : s_->groups)
        for (const FlatParam::Piece& piece : g.pieces) {
          const at::Tensor& src = *by_impl.at(s_->params[g.members[piece.member]].unsafeGetTensorImpl());
          g.shard.narrow(0, piece.offset, piece.length)
              .copy_(src.reshape({-1}).narrow(0, piece.param_offset, piece.length));
        }
      return 0;
    });
  }

  std::vector<Slice> optimizer_slices(const ParamGroups& whole) const override {
    const std::map<const void*, std::string> names = first_names();
    std::vector<Slice> v;
    for (const PieceAt& at : optimizer_order(whole, nullptr)) {
      const at::Tensor& p = s_->params[at.param];
      v.push_back({names.at(p.unsafeGetTensorImpl()), at.offset, p.sizes().vec(), at.piece->tensor});
    }
    return v;
  }

  std::vector<Slice> model_slices() const override {
    const std::map<const void*, std::string> names = first_names();
    std::vector<Slice> v;
    for (const FlatParam& g : s_->groups)
      for (const FlatParam::Piece& piece : g.pieces) {
        const at::Tensor& p = s_->params[g.members[piece.member]];
        v.push_back({names.at(p.unsafeGetTensorImpl()), piece.param_offset, p.sizes().vec(), piece.tensor});
      }
    return v;
  }

  void optimizer_state_to_full(const ParamGroups& whole, NamedTensors& tensors, std::string& json) const override;
  void optimizer_state_from_full(const ParamGroups& whole, NamedTensors& tensors, std::string& json,
                                 const std::string& source) const override;

 private:
  // The optimizer state of this rank's pieces to the state of the model's own parameters (whole, or with tensor
  // parallelism this rank's slices), and back.
  void pieces_to_full(const ParamGroups& whole, NamedTensors& tensors, std::string& json) const;
  void full_to_pieces(const ParamGroups& whole, NamedTensors& tensors, std::string& json,
                      const std::string& source) const;

 private:
  // Whether the model's own tensors are the whole parameters in their own dtype (stages 1-2 without a policy).
  bool whole_in_model() const {
    for (const FlatParam& g : s_->groups)
      if (!g.shard_in_flat) return false;
    return true;
  }

  // Where a piece of a trainable parameter lies: the parameter (index into params) and the offset in it.
  struct PieceAt {
    const FlatParam::Piece* piece;
    size_t param;
    int64_t offset, length;
  };
  // This process's pieces of `param`; none when it is not a trainable parameter of the model.
  std::vector<PieceAt> pieces_at(const at::Tensor& param) const {
    std::vector<PieceAt> v;
    for (size_t i = 0; i < s_->params.size(); ++i) {
      if (s_->params[i].unsafeGetTensorImpl() != param.unsafeGetTensorImpl()) continue;
      const FlatParam& g = s_->groups[s_->group_of[i]];
      if (g.trainable)
        for (const FlatParam::Piece& piece : g.pieces)
          if (piece.member == s_->member_of[i]) v.push_back({&piece, i, piece.param_offset, piece.length});
      break;
    }
    return v;
  }
  // The optimizer's pieces in its order (group by group, parameter by parameter, as Optimizer::rebind made them);
  // `whole_index` (if given) gets each piece's parameter's index among the whole groups' parameters.
  std::vector<PieceAt> optimizer_order(const ParamGroups& whole, std::vector<size_t>* whole_index) const {
    std::vector<PieceAt> v;
    size_t f = 0;
    for (const auto& group : whole)
      for (const at::Tensor& p : group) {
        for (const PieceAt& at : pieces_at(p)) {
          v.push_back(at);
          if (whole_index) whole_index->push_back(f);
        }
        ++f;
      }
    return v;
  }
  // Each parameter's first name (a tied weight's other names are aliases).
  std::map<const void*, std::string> first_names() const {
    std::map<const void*, std::string> names;
    for (const auto& [name, p] : model_->named_parameters()) names.emplace(p.unsafeGetTensorImpl(), name);
    return names;
  }

  // Stage 3: runs `f` with every unit's parameters gathered, then frees them again (a collective).
  template <class F>
  auto with_gathered(F&& f) const -> decltype(f()) {
    std::lock_guard<std::mutex> lock(s_->mu);
    std::vector<bool> was;
    for (FlatParam& g : s_->groups) {
      was.push_back(g.gathered);
      s_->gather(g);
    }
    auto result = f();
    for (size_t k = 0; k < s_->groups.size(); ++k)
      if (!was[k]) s_->reshard(s_->groups[k]);
    return result;
  }

  std::shared_ptr<ShardState> s_;
};

}  // namespace

namespace {

// The per-parameter tensors optimizers keep (Optimizer::save_state's names), in one order on every rank.
const char* const kStateTensors[] = {"exp_avg",  "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg",
                                     "grad_avg", "sum"};
constexpr size_t kNumStateTensors = sizeof(kStateTensors) / sizeof(kStateTensors[0]);

// "state.{index}.{name}" -> (index, name's position in kStateTensors).
std::pair<size_t, size_t> parse_state_name(const std::string& full, const std::string& source) {
  const size_t dot = full.find('.', 6);
  if (full.rfind("state.", 0) != 0 || dot == std::string::npos)
    throw std::invalid_argument(source + ": '" + full + "' is not an optimizer state tensor name");
  const std::string name = full.substr(dot + 1);
  for (size_t k = 0; k < kNumStateTensors; ++k)
    if (name == kStateTensors[k]) return {std::stoul(full.substr(6, dot - 6)), k};
  throw std::invalid_argument(source + ": unknown optimizer state tensor '" + full + "'");
}

std::string state_name(size_t index, size_t k) { return "state." + std::to_string(index) + "." + kStateTensors[k]; }

}  // namespace

namespace {

// The whole groups' parameters in order (torch's state_dict indexing) and where each one's elements start in one
// flat run of all of them.
struct WholeLayout {
  std::vector<at::Tensor> params;
  std::vector<int64_t> base{0};
  explicit WholeLayout(const Strategy::ParamGroups& whole) {
    for (const auto& g : whole)
      for (const at::Tensor& p : g) {
        params.push_back(p);
        base.push_back(base.back() + p.numel());
      }
  }
};

}  // namespace

void ShardedStrategy::optimizer_state_to_full(const ParamGroups& whole, NamedTensors& tensors,
                                              std::string& json) const {
  pieces_to_full(whole, tensors, json);
  state_to_whole_parameters(whole, tensors);  // tensor parallelism: whole parameters' state, not this rank's slices'
}

void ShardedStrategy::pieces_to_full(const ParamGroups& whole, NamedTensors& tensors, std::string& json) const {
  // Every rank contributes its pieces to whole-parameter tensors (zeros elsewhere; the pieces are disjoint), and
  // one all-reduce per kind of tensor sums them; steps and which parameters have state are agreed the same way.
  std::vector<size_t> index;  // piece -> whole parameter
  const std::vector<PieceAt> at_ = optimizer_order(whole, &index);
  const WholeLayout layout(whole);
  const std::vector<at::Tensor>& params = layout.params;
  const acc::json::Document doc = acc::json::Document::object(json, "optimizer state");
  const acc::json::Value root = doc.root();
  const acc::json::Value groups = root.get("param_groups");
  if (groups.size() != whole.size())
    throw std::logic_error("optimizer state of " + std::to_string(groups.size()) + " groups for " +
                           std::to_string(whole.size()));
  const acc::json::Value state = root.get("state");
  at::Tensor present = at::zeros({static_cast<int64_t>(kNumStateTensors) + 1}, at::kDouble);  // last: has steps
  at::Tensor step = at::full({static_cast<int64_t>(params.size())}, -1.0, at::kDouble);
  at::Tensor has_state = at::zeros({static_cast<int64_t>(params.size())}, at::kDouble);
  for (const std::string& key : state.keys()) {
    const int64_t f = static_cast<int64_t>(index.at(std::stoul(key)));
    has_state[f] = 1.0;
    if (state.get(key).has("step")) {
      present[static_cast<int64_t>(kNumStateTensors)] = 1.0;
      step[f] = static_cast<double>(state.get(key).get_int("step"));
    }
  }
  for (const auto& [name, t] : tensors)
    present[static_cast<int64_t>(parse_state_name(name, "optimizer state").second)] = 1.0;
  Comm& comm = *s_->comm;
  comm.all_reduce(present, ReduceOp::Max);
  comm.all_reduce(step, ReduceOp::Max);
  comm.all_reduce(has_state, ReduceOp::Max);
  NamedTensors full;
  const at::TensorOptions opts = params.empty() ? at::TensorOptions(at::kFloat)
                                                : params.front().options().requires_grad(false);
  std::vector<at::Tensor> sums(kNumStateTensors);
  for (size_t k = 0; k < kNumStateTensors; ++k)
    if (present[static_cast<int64_t>(k)].item<double>() > 0) sums[k] = at::zeros({layout.base.back()}, opts);
  for (const auto& [name, t] : tensors) {
    const auto [piece, k] = parse_state_name(name, "optimizer state");
    const PieceAt& p = at_.at(piece);
    sums[k].narrow(0, layout.base[index.at(piece)] + p.offset, p.length).copy_(t.reshape({-1}));
  }
  for (auto& sum : sums)
    if (sum.defined()) comm.all_reduce(sum, ReduceOp::Sum);
  acc::json::Writer j;
  j.begin_object().key("type").value(root.get_string("type")).key("param_groups").begin_array();
  for (size_t g = 0; g < groups.size(); ++g)
    j.begin_object()
        .key("lr")
        .value(groups.at(g).get_double("lr"))
        .key("initial_lr")
        .value(groups.at(g).get_double("initial_lr"))
        .key("num_params")
        .value(static_cast<int64_t>(whole[g].size()))
        .end_object();
  j.end_array().key("state").begin_object();
  const bool steps = present[static_cast<int64_t>(kNumStateTensors)].item<double>() > 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (has_state[static_cast<int64_t>(i)].item<double>() == 0) continue;
    j.key(std::to_string(i)).begin_object();
    if (steps) j.key("step").value(static_cast<int64_t>(step[static_cast<int64_t>(i)].item<double>()));
    j.end_object();
    for (size_t k = 0; k < kNumStateTensors; ++k)
      if (sums[k].defined())
        full.emplace_back(state_name(i, k),
                          sums[k].narrow(0, layout.base[i], params[i].numel()).view(params[i].sizes()));
  }
  j.end_object().end_object();
  tensors = std::move(full);
  json = j.str();
}

void ShardedStrategy::optimizer_state_from_full(const ParamGroups& whole, NamedTensors& tensors, std::string& json,
                                                const std::string& source) const {
  state_to_slices(whole, tensors, source);  // tensor parallelism: this rank's slices of the whole parameters' state
  full_to_pieces(whole, tensors, json, source);
}

void ShardedStrategy::full_to_pieces(const ParamGroups& whole, NamedTensors& tensors, std::string& json,
                                     const std::string& source) const {
  // Each rank keeps the parts of the whole-parameter tensors its pieces cover.
  std::vector<size_t> index;  // piece -> whole parameter
  const std::vector<PieceAt> at_ = optimizer_order(whole, &index);
  const WholeLayout layout(whole);
  const std::vector<at::Tensor>& params = layout.params;
  const acc::json::Document doc = acc::json::Document::object(json, source);
  const acc::json::Value root = doc.root();
  const acc::json::Value groups = root.get("param_groups");
  if (groups.size() != whole.size())
    throw std::invalid_argument(source + ": 'param_groups' has " + std::to_string(groups.size()) +
                                " groups; this optimizer has " + std::to_string(whole.size()));
  for (size_t g = 0; g < whole.size(); ++g)
    if (groups.at(g).get_int("num_params") != static_cast<int64_t>(whole[g].size()))
      throw std::invalid_argument(source + ": param_groups[" + std::to_string(g) + "] has " +
                                  std::to_string(groups.at(g).get_int("num_params")) +
                                  " parameters; this optimizer's has " + std::to_string(whole[g].size()));
  std::map<std::pair<size_t, size_t>, at::Tensor> by_param;
  for (const auto& [name, t] : tensors) {
    const auto [i, k] = parse_state_name(name, source);
    if (i >= params.size() || !t.sizes().equals(params[i].sizes()))
      throw std::invalid_argument(source + ": '" + name + "' has shape " + c10::str(t.sizes()) +
                                  (i < params.size() ? " but its parameter has " + c10::str(params[i].sizes())
                                                     : std::string(" but there is no such parameter")));
    by_param[{i, k}] = t;
  }
  const acc::json::Value state = root.get("state");
  NamedTensors local;
  acc::json::Writer j;
  j.begin_object().key("type").value(root.get_string("type")).key("param_groups").begin_array();
  for (size_t g = 0; g < whole.size(); ++g) {
    int64_t n = 0;  // this rank's pieces of the group's parameters
    for (const at::Tensor& p : whole[g]) n += static_cast<int64_t>(pieces_at(p).size());
    j.begin_object()
        .key("lr")
        .value(groups.at(g).get_double("lr"))
        .key("initial_lr")
        .value(groups.at(g).get_double("initial_lr"))
        .key("num_params")
        .value(n)
        .end_object();
  }
  j.end_array().key("state").begin_object();
  for (size_t piece = 0; piece < at_.size(); ++piece) {
    const PieceAt& p = at_[piece];
    const size_t f = index[piece];
    const std::string key = std::to_string(f);
    if (!state.has(key)) continue;
    j.key(std::to_string(piece)).begin_object();
    if (state.get(key).has("step")) j.key("step").value(state.get(key).get_int("step"));
    j.end_object();
    for (size_t k = 0; k < kNumStateTensors; ++k)
      if (auto it = by_param.find({f, k}); it != by_param.end())
        local.emplace_back(state_name(piece, k), it->second.reshape({-1}).narrow(0, p.offset, p.length));
  }
  j.end_object().end_object();
  tensors = std::move(local);
  json = j.str();
}

std::unique_ptr<Strategy> make_sharded_strategy(std::shared_ptr<Model> model, c10::Device device,
                                                const ShardGroups& groups, const ShardingOptions& opts) {
  return std::make_unique<ShardedStrategy>(std::move(model), device, groups, opts);
}

std::vector<std::string> wrap_units(const Model& model, const std::string& policy,
                                    const std::vector<std::string>& classes, int64_t min_num_params) {
  if (policy == "NO_WRAP") return {};
  ModuleTree tree;
  try {
    tree = tree_of(model, /*weightless=*/false);  // units hold parameters
  } catch (const std::invalid_argument& e) {
    throw UnsupportedError("auto_wrap_policy " + policy + " needs a module tree: " + e.what() +
                           "; use NO_WRAP (the whole model is one unit)");
  }
  std::vector<std::string> units;
  if (policy == "TRANSFORMER_BASED_WRAP") {
    std::set<std::string> wanted(classes.begin(), classes.end()), found;
    std::function<void(int, const std::string&)> walk = [&](int m, const std::string& name) {
      const auto& mod = tree.modules[static_cast<size_t>(m)];
      if (!name.empty() && wanted.count(mod.class_name)) {
        units.push_back(name);
        found.insert(mod.class_name);
      }
      for (const auto& [local, child] : mod.children) walk(child, name.empty() ? local : name + "." + local);
    };
    walk(0, "");
    // Accelerate raises when a class to wrap is not in the model (a typo would silently wrap nothing).
    for (const auto& c : wanted)
      if (!found.count(c))
        throw std::invalid_argument("fsdp transformer_cls_names_to_wrap: no module of class '" + c + "' in the model");
    return units;
  }
  if (policy != "SIZE_BASED_WRAP") throw std::invalid_argument("unknown auto_wrap_policy '" + policy + "'");
  // torch's size_based_auto_wrap_policy: bottom-up, a module is wrapped when the parameters not yet in a wrapped
  // descendant number at least min_num_params (tied aliases such as lm_head count once, where they are defined).
  std::set<std::string> owned;
  for (const auto& [name, t] : model.named_parameters()) owned.insert(name);
  std::function<int64_t(int, const std::string&)> walk = [&](int m, const std::string& name) -> int64_t {
    const auto& mod = tree.modules[static_cast<size_t>(m)];
    int64_t remaining = 0;
    for (const auto& [local, child] : mod.children) remaining += walk(child, name.empty() ? local : name + "." + local);
    for (const auto& [local, t] : mod.parameters)
      if (owned.count(name.empty() ? local : name + "." + local)) remaining += t.numel;
    if (!name.empty() && remaining >= min_num_params) {
      units.push_back(name);
      return 0;
    }
    return remaining;
  };
  walk(0, "");
  return units;
}

}  // namespace acc::core
