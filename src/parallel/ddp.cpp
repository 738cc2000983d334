#include "parallel/ddp.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

#include "models/model.hpp"

namespace acc::core {

struct Bucket {
  std::vector<size_t> params;   // indices into State::params
  std::vector<int64_t> offsets; // element offset of each param inside `flat`
  at::Tensor flat;
  at::Tensor wire;  // the compressed copy a comm hook sends (undefined without one)
  size_t pending = 0;
  bool launched = false;
  std::unique_ptr<PendingWork> work;
};

struct GradientReducer::State {
  std::shared_ptr<Comm> comm;
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  DdpOptions opts;
  std::vector<Bucket> buckets;
  std::vector<std::pair<size_t, size_t>> where;  // param -> (bucket, slot)
  std::vector<bool> ready;
  // static_graph: after the first synchronised backward, the parameters it left without a gradient (marked ready
  // before each later backward); `recorded` once known. Parameters that break the recorded graph, for the error.
  bool recorded = false;
  std::vector<bool> unused_static;
  std::vector<size_t> broke_graph;
  size_t next_to_launch = 0;
  size_t launched_by_hooks = 0;
  int64_t bytes = 0;  // carried by this backward's all-reduces
  // PowerSGD: synchronised backward passes so far, and per bucket the error feedback and the warm-started Q.
  int64_t iterations = 0;
  std::vector<at::Tensor> error, q_memory;

  bool power_sgd_now() const { return opts.power_sgd.on && iterations >= opts.power_sgd.start_iter; }
  // What a comm hook works on: the bucket, or under a comm_wrapper its copy in the wrapper's dtype.
  at::Tensor hook_input(const Bucket& b) const {
    return opts.wrapper != at::ScalarType::Undefined ? b.flat.to(opts.wrapper) : b.flat;
  }
  void power_sgd(size_t bucket_index, at::Tensor& buf);
  // The bucket's averaged gradients into the parameters' gradients: copied, or (gradient_as_bucket_view) already there,
  // a gradient that is not yet a view (a parameter without one) becoming one.
  void write_back(const Bucket& b) {
    for (size_t j = 0; j < b.params.size(); ++j) {
      at::Tensor& p = params[b.params[j]];
      at::Tensor avg = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
      if (opts.gradient_as_bucket_view) {
        if (!p.grad().defined() || p.grad().data_ptr() != avg.data_ptr()) p.mutable_grad() = avg;
      } else if (p.grad().defined()) {
        p.mutable_grad().copy_(avg);
      } else {
        p.mutable_grad() = avg.clone();
      }
    }
  }
  void batched_power_sgd(size_t bucket_index, at::Tensor& buf);
  bool armed = false;
  std::mutex mu;  // autograd may call hooks from its worker thread

  void launch_ready_prefix() {
    if (power_sgd_now()) return;  // its rounds of collectives run when backward is over (finalize_backward)
    // Buckets go out strictly in order: every rank must issue the same collectives in the same order.
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) {
      Bucket& b = buckets[next_to_launch++];
      if (opts.compress != at::ScalarType::Undefined) {
        // torch's fp16/bf16 compress hooks: divide before the sum, in the narrow dtype, so it cannot overflow.
        b.wire = hook_input(b).to(opts.compress).div_(comm->size());
        b.work = comm->all_reduce_sum_async(b.wire);
        bytes += b.wire.numel() * b.wire.element_size();
      } else {
        b.work = comm->all_reduce_sum_async(b.flat);
        bytes += b.flat.numel() * b.flat.element_size();
      }
      b.launched = true;
    }
  }

  // The bucket's piece for parameter i, shaped as the parameter.
  at::Tensor view_of(size_t i) const {
    auto [bi, slot] = where[i];
    const Bucket& b = buckets[bi];
    return b.flat.narrow(0, b.offsets[slot], params[i].numel()).view(params[i].sizes());
  }

  // gradient_as_bucket_view: the parameter's gradient becomes its bucket piece (holding `grad`'s values) unless it
  // already is it; true when it was not (a copy was made).
  bool point_grad_at_bucket(size_t i, const at::Tensor& grad) {
    at::Tensor view = view_of(i);
    if (grad.defined() && grad.is_alias_of(view) && grad.data_ptr() == view.data_ptr()) return false;
    if (grad.defined()) view.copy_(grad);
    params[i].mutable_grad() = view;
    return true;
  }

  void mark_ready(size_t i, const at::Tensor& grad) {
    std::lock_guard<std::mutex> lock(mu);
    if (!armed) return;
    if (ready[i]) {
      if (recorded && unused_static[i]) broke_graph.push_back(i);  // static_graph: it had no gradient before
      return;
    }
    ready[i] = true;
    auto [bi, slot] = where[i];
    Bucket& b = buckets[bi];
    if (opts.gradient_as_bucket_view) point_grad_at_bucket(i, grad);  // no copy when the gradient is the view
    else b.flat.narrow(0, b.offsets[slot], grad.numel()).copy_(grad.reshape({-1}));
    --b.pending;
    size_t before = next_to_launch;
    launch_ready_prefix();
    launched_by_hooks += next_to_launch - before;
  }
};

namespace {

// Gram-Schmidt on the columns of m (n x r), in place (torch's _orthogonalize_gram_schmidt for one matrix).
void orthogonalize(at::Tensor& m, double epsilon) {
  for (int64_t i = 0; i < m.size(1); ++i) {
    at::Tensor col = m.narrow(1, i, 1);
    col.div_(at::linalg_vector_norm(col, 2, 0, true) + epsilon);
    if (i + 1 < m.size(1)) {
      at::Tensor rest = m.narrow(1, i + 1, m.size(1) - i - 1);
      rest.sub_((col * rest).sum(0, true) * col);
    }
  }
}

}  // namespace

void GradientReducer::State::batched_power_sgd(size_t bi, at::Tensor& buf) {
  // torch's batched_powerSGD_hook: the bucket, zero-padded to side^2, is one side x side matrix M; P = M Q summed and
  // orthogonalised, Q = M^T P summed and divided by the world size, M = P Q^T; error feedback over the padded bucket.
  const DdpOptions::PowerSgd& o = opts.power_sgd;
  const int64_t total = buf.numel(), side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(total))));
  const int64_t r = std::min(side, o.rank);
  at::Tensor padded = at::zeros({side * side}, buf.options());
  padded.narrow(0, 0, total).copy_(buf);
  at::Tensor original;
  if (o.error_feedback) {
    if (error[bi].defined()) padded.add_(error[bi]);
    original = padded.clone();
  }
  at::Tensor matrix = padded.view({side, side});
  at::Tensor& q = q_memory[bi];
  if (!o.warm_start || !q.defined()) {  // the same random Q on every rank: one seeded generator
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed + bi);
    q = at::randn({side, r}, gen, buf.options().device(at::kCPU)).to(buf.device());
  }
  orthogonalize(q, o.epsilon);
  at::Tensor p = at::mm(matrix, q);
  comm->all_reduce(p, ReduceOp::Sum);
  orthogonalize(p, o.epsilon);
  at::mm_out(q, matrix.t(), p);
  comm->all_reduce(q, ReduceOp::Sum);
  q.div_(comm->size());
  bytes += (p.numel() + q.numel()) * buf.element_size();
  at::mm_out(matrix, p, q.t());
  if (o.error_feedback) error[bi] = original - padded;
  buf.copy_(padded.narrow(0, 0, total));
}

void GradientReducer::State::power_sgd(size_t bi, at::Tensor& buf) {
  // torch's powerSGD_hook on one bucket (`buf`: its flat gradients, or their copy in a comm_wrapper's dtype): vectors
  // (and matrices too small to gain) are averaged whole; each matrix M (a gradient viewed as [size(0), rest]) becomes
  // P Q^T: P = M Q summed over ranks and orthogonalised, then Q = M^T P summed and divided by the world size. The
  // error feedback keeps what the approximation lost.
  c10::NoGradGuard no_grad;
  const DdpOptions::PowerSgd& o = opts.power_sgd;
  Bucket& b = buckets[bi];
  if (error.size() < buckets.size()) error.resize(buckets.size()), q_memory.resize(buckets.size());
  if (o.batched) return batched_power_sgd(bi, buf);
  at::Tensor original;
  if (o.error_feedback) {
    if (error[bi].defined()) buf.add_(error[bi]);
    original = buf.clone();
  }
  std::vector<at::Tensor> whole, matrices;
  std::vector<int64_t> ranks;
  for (size_t j = 0; j < b.params.size(); ++j) {
    const at::Tensor& p = params[b.params[j]];
    at::Tensor v = buf.narrow(0, b.offsets[j], p.numel());
    const int64_t n = p.dim() > 0 ? p.size(0) : 1, m = p.numel() / std::max<int64_t>(n, 1);
    const int64_t r = std::min({n, m, o.rank});
    if (static_cast<double>((n + m) * r) * o.min_compression_rate < static_cast<double>(n * m)) {
      matrices.push_back(v.view({n, m}));
      ranks.push_back(r);
    } else {
      whole.push_back(v);
    }
  }
  const double inv_world = 1.0 / comm->size();
  if (!whole.empty()) {
    at::Tensor flat = at::cat(whole);
    comm->all_reduce(flat, ReduceOp::Sum);
    bytes += flat.numel() * flat.element_size();
    flat.mul_(inv_world);
    int64_t off = 0;
    for (auto& v : whole) {
      v.copy_(flat.narrow(0, off, v.numel()));
      off += v.numel();
    }
  }
  if (matrices.empty()) return;
  int64_t p_total = 0, q_total = 0;
  for (size_t k = 0; k < matrices.size(); ++k) {
    p_total += matrices[k].size(0) * ranks[k];
    q_total += matrices[k].size(1) * ranks[k];
  }
  at::Tensor p_memory = at::empty({p_total}, buf.options());
  at::Tensor& q_mem = q_memory[bi];
  const bool fresh = !o.warm_start || !q_mem.defined();
  if (fresh) q_mem = at::empty({q_total}, buf.options());
  std::vector<at::Tensor> ps, qs;
  int64_t po = 0, qo = 0;
  for (size_t k = 0; k < matrices.size(); ++k) {
    ps.push_back(p_memory.narrow(0, po, matrices[k].size(0) * ranks[k]).view({matrices[k].size(0), ranks[k]}));
    qs.push_back(q_mem.narrow(0, qo, matrices[k].size(1) * ranks[k]).view({matrices[k].size(1), ranks[k]}));
    po += matrices[k].size(0) * ranks[k];
    qo += matrices[k].size(1) * ranks[k];
  }
  if (fresh) {  // the same random Qs on every rank: one seeded generator
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed + bi);
    for (auto& q : qs) q.copy_(at::randn(q.sizes(), gen, buf.options()));
  }
  for (auto& q : qs) orthogonalize(q, o.epsilon);
  for (size_t k = 0; k < matrices.size(); ++k) at::mm_out(ps[k], matrices[k], qs[k]);
  comm->all_reduce(p_memory, ReduceOp::Sum);
  for (auto& p : ps) orthogonalize(p, o.epsilon);
  for (size_t k = 0; k < matrices.size(); ++k) at::mm_out(qs[k], matrices[k].t(), ps[k]);
  comm->all_reduce(q_mem, ReduceOp::Sum);
  q_mem.mul_(inv_world);
  bytes += (p_total + q_total) * buf.element_size();
  for (size_t k = 0; k < matrices.size(); ++k) at::mm_out(matrices[k], ps[k], qs[k].t());
  if (o.error_feedback) error[bi] = original - buf;
}

namespace {

class ReadyHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(std::weak_ptr<GradientReducer::State> s, size_t i) : state_(std::move(s)), index_(i) {}
  void operator()(const torch::autograd::Variable& param) override {
    if (auto s = state_.lock(); s && param.grad().defined()) s->mark_ready(index_, param.grad());
  }

 private:
  std::weak_ptr<GradientReducer::State> state_;
  size_t index_;
};

}  // namespace

GradientReducer::GradientReducer(std::shared_ptr<Comm> comm, std::vector<std::string> names,
                                 std::vector<at::Tensor> params, DdpOptions opts)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.comm = std::move(comm);
  s.names = std::move(names);
  s.params = std::move(params);
  s.opts = opts;
  s.where.resize(s.params.size());
  s.ready.assign(s.params.size(), false);
  // Gradients arrive roughly in reverse order of definition, so buckets are filled from the last
  // parameter backwards, one dtype per bucket; the first bucket is smaller to start talking early.
  std::map<at::ScalarType, size_t> open;  // dtype -> bucket being filled
  std::vector<int64_t> numel;  // elements per bucket so far
  for (size_t k = s.params.size(); k-- > 0;) {
    const at::Tensor& p = s.params[k];
    if (!p.requires_grad()) continue;
    auto it = open.find(p.scalar_type());
    if (it != open.end()) {
      double cap_mb = it->second == 0 ? opts.first_bucket_cap_mb : opts.bucket_cap_mb;
      if (static_cast<double>((numel[it->second] + p.numel()) * p.element_size()) > cap_mb * 1048576.0) {
        open.erase(it);
        it = open.end();
      }
    }
    if (it == open.end()) {
      s.buckets.emplace_back();
      numel.push_back(0);
      it = open.emplace(p.scalar_type(), s.buckets.size() - 1).first;
    }
    Bucket& b = s.buckets[it->second];
    s.where[k] = {it->second, b.params.size()};
    b.params.push_back(k);
    b.offsets.push_back(numel[it->second]);
    numel[it->second] += p.numel();
  }
  for (Bucket& b : s.buckets) {
    const at::Tensor& last = s.params[b.params.back()];
    b.flat = at::zeros({b.offsets.back() + last.numel()}, last.options().requires_grad(false));
  }
  s.unused_static.assign(s.params.size(), false);
  // As torch's Reducer::initialize_bucket_views: gradients that exist already move into their buckets.
  if (opts.gradient_as_bucket_view)
    for (size_t k = 0; k < s.params.size(); ++k)
      if (s.params[k].requires_grad() && s.params[k].grad().defined()) s.point_grad_at_bucket(k, s.params[k].grad());
  for (size_t k = 0; k < s.params.size(); ++k)
    if (s.params[k].requires_grad())
      torch::autograd::impl::set_post_acc_grad_hooks(s.params[k], std::make_unique<ReadyHook>(state_, k));
}

GradientReducer::~GradientReducer() {
  for (auto& p : state_->params)
    if (p.requires_grad()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

size_t GradientReducer::num_buckets() const { return state_->buckets.size(); }

size_t GradientReducer::launched_during_backward() const { return state_->launched_by_hooks; }

int64_t GradientReducer::bytes_communicated() const { return state_->bytes; }

void GradientReducer::prepare_for_backward(bool sync) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.armed = sync;
  s.next_to_launch = 0;
  s.launched_by_hooks = 0;
  if (sync) s.bytes = 0;
  std::fill(s.ready.begin(), s.ready.end(), false);
  s.broke_graph.clear();
  for (Bucket& b : s.buckets) {
    b.pending = b.params.size();
    b.launched = false;
    b.work.reset();
  }
  if (!sync || !s.recorded) return;
  // static_graph, after the first backward: the parameters it left without a gradient are ready now (zeros), so the
  // buckets holding them go out as soon as their other parameters are ready, during backward.
  for (size_t k = 0; k < s.params.size(); ++k) {
    if (!s.unused_static[k]) continue;
    auto [bi, slot] = s.where[k];
    Bucket& b = s.buckets[bi];
    b.flat.narrow(0, b.offsets[slot], s.params[k].numel()).zero_();
    s.ready[k] = true;
    --b.pending;
  }
  s.launch_ready_prefix();
}

void GradientReducer::finalize_backward() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.armed) return;
  s.armed = false;
  // static_graph: a parameter recorded as unused got a gradient, or one recorded as used got none.
  std::vector<std::string> changed;
  for (size_t k : s.broke_graph) changed.push_back(s.names[k] + " (now used)");
  if (s.recorded)
    for (size_t k = 0; k < s.params.size(); ++k)
      if (s.params[k].requires_grad() && !s.ready[k]) changed.push_back(s.names[k] + " (now unused)");
  if (!changed.empty()) {
    std::string list;
    for (auto& n : changed) list += (list.empty() ? "" : ", ") + n;
    throw std::invalid_argument("DDP: ddp_kwargs.static_graph is true, but the parameters that get a gradient changed "
                                "since the first backward: " +
                                list + ". Set ddp_kwargs.static_graph = false.");
  }
  // Parameters that took no part in this backward: zeros when the user allowed it (or static_graph, which records
  // them now), else an error (waiting for them would hang every rank, as in torch's DDP).
  const bool record = s.opts.static_graph && !s.recorded;
  std::vector<std::string> unused;
  for (size_t k = 0; k < s.params.size(); ++k) {
    if (!s.params[k].requires_grad() || s.ready[k]) continue;
    if (!s.opts.find_unused_parameters && !s.opts.static_graph) {
      unused.push_back(s.names[k]);
      continue;
    }
    if (record) s.unused_static[k] = true;
    auto [bi, slot] = s.where[k];
    Bucket& b = s.buckets[bi];
    b.flat.narrow(0, b.offsets[slot], s.params[k].numel()).zero_();
    s.ready[k] = true;
    --b.pending;
  }
  if (!unused.empty()) {
    std::string list;
    for (auto& n : unused) list += (list.empty() ? "" : ", ") + n;
    throw std::invalid_argument("DDP: parameters received no gradient in this backward pass: " + list +
                                ". Set ddp_kwargs.find_unused_parameters = true if parts of the model are unused.");
  }
  if (record) s.recorded = true;
  s.launch_ready_prefix();
  lock.unlock();
  const double inv_world = 1.0 / s.comm->size();
  const bool power = s.power_sgd_now();
  ++s.iterations;
  for (size_t bi = 0; bi < s.buckets.size(); ++bi) {
    Bucket& b = s.buckets[bi];
    if (power) {
      at::Tensor buf = s.hook_input(b);
      s.power_sgd(bi, buf);  // leaves the mean's approximation in buf
      if (!buf.is_same(b.flat)) b.flat.copy_(buf);  // a wrapper's result comes back into the bucket
      s.write_back(b);
      continue;
    }
    b.work->wait();
    b.work.reset();
    if (b.wire.defined()) {
      b.flat.copy_(b.wire);  // already the mean
      b.wire.reset();
    } else {
      b.flat.mul_(inv_world);
    }
    s.write_back(b);
  }
}

namespace {

class DdpStrategy final : public Strategy {
 public:
  DdpStrategy(std::shared_ptr<Model> model, c10::Device device, std::shared_ptr<Comm> comm, const DdpOptions& opts)
      : Strategy(std::move(model)), comm_(std::move(comm)), broadcast_buffers_(opts.broadcast_buffers) {
    model_->to(device);
    std::vector<std::string> names;
    std::vector<at::Tensor> params, state;
    for (auto& [n, p] : model_->trainable_parameters()) {  // a tied weight once, as torch's DDP
      names.push_back(n);
      params.push_back(p);
    }
    for (auto& [n, t] : model_->state()) state.push_back(t);
    broadcast_from_rank0(*comm_, state);
    reducer_ = std::make_unique<GradientReducer>(comm_, names, params, opts);
  }
  std::string name() const override { return "ddp"; }
  void before_forward() override {
    // As torch's DDP: in training, buffers follow rank 0 before every forward.
    if (!broadcast_buffers_ || !model_->is_training()) return;
    std::vector<at::Tensor> buffers;
    for (auto& [name, b] : model_->named_buffers()) buffers.push_back(b);
    broadcast_from_rank0(*comm_, buffers);
  }
  void before_backward(bool sync) override { reducer_->prepare_for_backward(sync); }
  void after_backward() override { reducer_->finalize_backward(); }

 private:
  std::shared_ptr<Comm> comm_;
  bool broadcast_buffers_;
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(std::shared_ptr<Model> model, c10::Device device,
                                            std::shared_ptr<Comm> comm, const DdpOptions& opts) {
  return std::make_unique<DdpStrategy>(std::move(model), device, std::move(comm), opts);
}

void broadcast_from_rank0(Comm& comm, const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  c10::NoGradGuard no_grad;
  // Flat buffers per dtype of at most kBucketBytes, as torch's _sync_module_states broadcasts in 250 MB buckets: few
  // collectives, and no second copy of the whole model (a 7 B model's would be 28 GB on every rank). Rank 0 sends
  // what it has and copies nothing back.
  constexpr int64_t kBucketBytes = int64_t{64} << 20;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  const bool root = comm.rank() == 0;
  for (auto& [dtype, group] : by_dtype) {
    for (size_t first = 0; first < group.size();) {
      size_t last = first;
      int64_t bytes = 0;
      std::vector<at::Tensor> parts;
      do {
        parts.push_back(group[last].detach().reshape({-1}));
        bytes += group[last].numel() * static_cast<int64_t>(group[last].element_size());
        ++last;
      } while (last < group.size() && bytes < kBucketBytes);
      at::Tensor flat = at::cat(parts);
      comm.broadcast(flat, 0);
      if (!root) {
        int64_t off = 0;
        for (size_t k = first; k < last; ++k) {
          group[k].detach().copy_(flat.narrow(0, off, group[k].numel()).view(group[k].sizes()));
          off += group[k].numel();
        }
      }
      first = last;
    }
  }
}

}  // namespace acc::core
