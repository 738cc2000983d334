#include "parallel/ddp.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

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
  size_t next_to_launch = 0;
  size_t launched_by_hooks = 0;
  int64_t bytes = 0;  // carried by this backward's all-reduces
  bool armed = false;
  std::mutex mu;  // autograd may call hooks from its worker thread

  void launch_ready_prefix() {
    // Buckets go out strictly in order: every rank must issue the same collectives in the same order.
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) {
      Bucket& b = buckets[next_to_launch++];
      if (opts.compress != at::ScalarType::Undefined) {
        // torch's fp16/bf16 compress hooks: divide before the sum, in the narrow dtype, so it cannot overflow.
        b.wire = b.flat.to(opts.compress).div_(comm->size());
        b.work = comm->all_reduce_sum_async(b.wire);
        bytes += b.wire.numel() * b.wire.element_size();
      } else {
        b.work = comm->all_reduce_sum_async(b.flat);
        bytes += b.flat.numel() * b.flat.element_size();
      }
      b.launched = true;
    }
  }

  void mark_ready(size_t i, const at::Tensor& grad) {
    std::lock_guard<std::mutex> lock(mu);
    if (!armed || ready[i]) return;
    ready[i] = true;
    auto [bi, slot] = where[i];
    Bucket& b = buckets[bi];
    b.flat.narrow(0, b.offsets[slot], grad.numel()).copy_(grad.reshape({-1}));
    --b.pending;
    size_t before = next_to_launch;
    launch_ready_prefix();
    launched_by_hooks += next_to_launch - before;
  }
};

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
  std::vector<int64_t> numel;             // elements per bucket so far
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
  for (size_t k = 0; k < s.params.size(); ++k)
    if (s.params[k].requires_grad())
      torch::autograd::impl::set_post_acc_grad_hooks(
          s.params[k], std::make_unique<ReadyHook>(state_, k));
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
  for (Bucket& b : s.buckets) {
    b.pending = b.params.size();
    b.launched = false;
    b.work.reset();
  }
}

void GradientReducer::finalize_backward() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.armed) return;
  s.armed = false;
  // Parameters that took no part in this backward: zeros when the user allowed it, else an error
  // (waiting for them would hang every rank, as in torch's DDP).
  std::vector<std::string> unused;
  for (size_t k = 0; k < s.params.size(); ++k) {
    if (!s.params[k].requires_grad() || s.ready[k]) continue;
    if (!s.opts.find_unused_parameters) {
      unused.push_back(s.names[k]);
      continue;
    }
    auto [bi, slot] = s.where[k];
    Bucket& b = s.buckets[bi];
    b.flat.narrow(0, b.offsets[slot], s.params[k].numel()).zero_();
    s.ready[k] = true;
    --b.pending;
  }
  if (!unused.empty()) {
    std::string list;
    for (auto& n : unused) list += (list.empty() ? "" : ", ") + n;
    throw std::invalid_argument(
        "DDP: parameters received no gradient in this backward pass: " + list +
        ". Set ddp_kwargs.find_unused_parameters = true if parts of the model are unused.");
  }
  s.launch_ready_prefix();
  lock.unlock();
  const double inv_world = 1.0 / s.comm->size();
  for (Bucket& b : s.buckets) {
    b.work->wait();
    b.work.reset();
    if (b.wire.defined()) {
      b.flat.copy_(b.wire);  // already the mean
      b.wire.reset();
    } else {
      b.flat.mul_(inv_world);
    }
    for (size_t j = 0; j < b.params.size(); ++j) {
      at::Tensor& p = s.params[b.params[j]];
      at::Tensor avg = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(avg);
      else
        p.mutable_grad() = avg.clone();
    }
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
    for (auto& [n, p] : model_->named_parameters()) {
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
  // One flat buffer per dtype: few collectives, as torch's _sync_module_states does.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> flat_parts;
    for (auto& t : group) flat_parts.push_back(t.detach().reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    comm.broadcast(flat, 0);
    int64_t off = 0;
    for (auto& t : group) {
      t.detach().copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

}  // namespace acc::core
