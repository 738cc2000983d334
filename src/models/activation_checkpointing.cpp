// Activation checkpointing (FSDP's activation_checkpointing; torch.utils.checkpoint): a block runs without keeping
// its activations, and backward runs it again to have them. Reentrant, as torch's use_reentrant=True: the block's
// backward node recomputes the block with grad enabled and runs that graph's backward inside its own, which
// accumulates the block's parameter gradients (their hooks, DDP's and the sharded strategies', fire as usual). The
// RNG, autocast and fp8 state of the first run are restored for the second (torch's preserve_rng_state), so dropout
// draws the same masks and the gradients are those of the forward that happened.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <optional>

#include "models/model.hpp"
#include "precision/fp8.hpp"
#include "precision/precision.hpp"
#include "runtime/cuda.hpp"

namespace acc::core {

namespace {

// The default generator of a device and its state, to be put back for the recomputation.
struct RngState {
  at::Generator generator;
  at::Tensor state;

  static RngState of(const c10::Device& device) {
    RngState r;
    if (device.is_cpu()) {
      r.generator = at::detail::getDefaultCPUGenerator();
    } else if (device.is_cuda()) {
      auto all = cuda::default_generators();
      const auto index = static_cast<size_t>(std::max<int>(device.index(), 0));
      if (index < all.size()) r.generator = all[index];
    }
    if (r.generator.defined()) {
      std::lock_guard<std::mutex> lock(r.generator.mutex());
      r.state = r.generator.get_state();
    }
    return r;
  }
};

// Sets the generator to `saved` for its lifetime and back to where it was after.
class RngReplay {
 public:
  explicit RngReplay(const RngState& saved) : gen_(saved.generator) {
    if (!gen_.defined()) return;
    std::lock_guard<std::mutex> lock(gen_.mutex());
    now_ = gen_.get_state();
    gen_.set_state(saved.state);
  }
  ~RngReplay() {
    if (!gen_.defined()) return;
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(now_);
  }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  at::Generator gen_;
  at::Tensor now_;
};

// What the recomputation needs: the body and the state it first ran in.
struct Recompute : torch::CustomClassHolder {
  UnitBody body;
  RngState rng;
  c10::DeviceType device_type = c10::DeviceType::CPU;
  bool autocast = false;
  c10::ScalarType autocast_dtype = at::kFloat;
  bool autocast_cache = true;
  bool fp8 = false;
  bool offload = false;            // activation_checkpointing_offload
  c10::Device device = c10::kCPU;  // where the kept input goes back to for the recomputation
};

struct Checkpointed : public torch::autograd::Function<Checkpointed> {
  // `anchor`: a scalar requiring grad, so that the block's output has this node even when its input needs no
  // gradient (frozen embeddings): the parameters inside still get theirs.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& anchor,
                            c10::intrusive_ptr<Recompute> recompute) {
    (void)anchor;
    if (recompute->offload && !x.is_cpu()) {
      // activation_checkpointing_offload: the kept input waits in pinned CPU memory (torch's save_on_cpu).
      at::Tensor kept = at::empty(x.sizes(), x.options().device(at::kCPU).pinned_memory(true));
      kept.copy_(x, /*non_blocking=*/true);
      ctx->save_for_backward({kept});
    } else {
      ctx->save_for_backward({x});
    }
    ctx->saved_data["x_requires_grad"] = x.requires_grad();
    at::Tensor y = recompute->body(x);  // grad mode is off here (Function::apply)
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(std::move(recompute));
    return y.is_same(x) ? y.detach() : y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};  // the output got no gradient
    auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    const Recompute& r = *recompute;
    at::Tensor x = ctx->get_saved_variables()[0].detach().to(r.device, /*non_blocking=*/true);
    x.requires_grad_(ctx->saved_data["x_requires_grad"].toBool());
    at::Tensor y;
    {
      at::AutoGradMode grad(true);
      RngReplay rng(r.rng);
      std::optional<AutocastScope> autocast;
      if (r.autocast) autocast.emplace(r.device_type, r.autocast_dtype, true, r.autocast_cache);
      std::optional<Fp8Scope> fp8;
      if (r.fp8) fp8.emplace();
      y = r.body(x);
    }
    if (y.requires_grad()) torch::autograd::backward({y}, {grads[0]});
    return {x.requires_grad() ? x.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Model::run_unit(const std::string& name, const at::Tensor& x, const UnitBody& body) const {
  if (unit_hooks_) unit_hooks_->before_unit(name, x);
  at::Tensor y;
  if (checkpoint_units_ && c10::GradMode::is_enabled()) {
    auto r = c10::make_intrusive<Recompute>();
    r->body = body;
    r->rng = RngState::of(x.device());
    r->device_type = x.device().type();
    r->autocast = at::autocast::is_autocast_enabled(r->device_type);
    r->autocast_dtype = at::autocast::get_autocast_dtype(r->device_type);
    r->autocast_cache = at::autocast::is_autocast_cache_enabled();
    r->fp8 = Fp8Scope::active();
    r->offload = offload_checkpoints_;
    r->device = x.device();
    at::Tensor anchor = at::zeros({}, x.options().dtype(at::kFloat)).requires_grad_();
    y = Checkpointed::apply(x, anchor, std::move(r));
  } else {
    y = body(x);
  }
  if (unit_hooks_) unit_hooks_->after_unit(name, y);
  return y;
}

at::Tensor Model::run_head(const at::Tensor& x, const UnitBody& body) const {
  at::Tensor y = body(x);
  if (unit_hooks_) unit_hooks_->after_head(x, y);
  return y;
}

}  // namespace acc::core
