#include "train/optim.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <type_traits>

#include "models/model.hpp"
#include "util/errors.hpp"
#include <acc/json.hpp>
#include "util/options.hpp"

namespace acc::core {

namespace {

// torch.optim's fused=True: one ATen kernel (_fused_adam_ / _fused_adamw_ / _fused_sgd_) steps every
// parameter, instead of LibTorch's loop of a dozen ops per tensor. The state lives where LibTorch's
// optimizers keep it (AdamParamState, SGDParamState), so it reads the same.
template <class Base, class State, class Opts>
class FusedAdam final : public Base {
 public:
  using Base::Base;
  at::Tensor step(typename Base::LossClosure closure = nullptr) override {
    (void)closure;
    c10::NoGradGuard no_grad;
    for (auto& group : this->param_groups()) {
      auto& o = static_cast<Opts&>(group.options());
      std::vector<at::Tensor> params, grads, avgs, sqs, maxs, steps;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& slot = this->state_[p.unsafeGetTensorImpl()];
        if (!slot) {
          auto st = std::make_unique<State>();
          st->step(0);
          st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
          st->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
          if (o.amsgrad()) st->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
          slot = std::move(st);
        }
        auto& st = static_cast<State&>(*slot);
        st.step(st.step() + 1);
        params.push_back(p);
        grads.push_back(p.grad());
        avgs.push_back(st.exp_avg());
        sqs.push_back(st.exp_avg_sq());
        if (o.amsgrad()) maxs.push_back(st.max_exp_avg_sq());
        steps.push_back(at::full({}, static_cast<double>(st.step()), p.options().dtype(at::kFloat)));
      }
      if (params.empty()) continue;
      const auto [beta1, beta2] = o.betas();
      if constexpr (std::is_same_v<Base, torch::optim::AdamW>)
        at::_fused_adamw_(params, grads, avgs, sqs, maxs, steps, o.lr(), beta1, beta2, o.weight_decay(), o.eps(),
                          o.amsgrad(), /*maximize=*/false);
      else
        at::_fused_adam_(params, grads, avgs, sqs, maxs, steps, o.lr(), beta1, beta2, o.weight_decay(), o.eps(),
                         o.amsgrad(), /*maximize=*/false);
    }
    return {};
  }
};

class FusedSgd final : public torch::optim::SGD {
 public:
  using SGD::SGD;
  at::Tensor step(LossClosure closure = nullptr) override {
    (void)closure;
    c10::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
      std::vector<at::Tensor> params, grads, bufs;
      bool first = false;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        params.push_back(p);
        grads.push_back(p.grad());
        if (o.momentum() == 0) continue;
        auto& slot = state_[p.unsafeGetTensorImpl()];
        if (!slot) {
          // The first step sets the buffer to the gradient (the kernel does it with is_first_step).
          auto st = std::make_unique<torch::optim::SGDParamState>();
          st->momentum_buffer(at::empty_like(p, at::MemoryFormat::Preserve));
          slot = std::move(st);
          first = true;
        }
        bufs.push_back(static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
      }
      if (params.empty()) continue;
      at::_fused_sgd_(params, grads, bufs, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                      /*maximize=*/false, first);
    }
    return {};
  }
};

}  // namespace

Optimizer::Optimizer(std::vector<at::Tensor> params, const char* options_json) {
  // PyTorch's defaults (torch.optim): lr 1e-3; SGD momentum 0, dampening 0, nesterov false; Adam(W)
  // betas (0.9, 0.999), eps 1e-8, amsgrad false; weight_decay 0 (AdamW: 0.01); fused where allowed.
  Options o(options_json, "optimizer options",
            {"type", "lr", "momentum", "dampening", "nesterov", "betas", "eps", "weight_decay", "amsgrad", "fused"});
  std::string type = o.get_string("type", "", {"sgd", "adam", "adamw"});
  if (type.empty()) throw OptionsError("optimizer options: 'type' is required: \"sgd\", \"adam\" or \"adamw\"");
  const double lr = o.get_double("lr", 1e-3);
  if (!(lr >= 0)) throw OptionsError("optimizer options: 'lr' must be >= 0");
  auto betas = o.get_double_list("betas", {0.9, 0.999});
  if (betas.size() != 2 || betas[0] < 0 || betas[0] >= 1 || betas[1] < 0 || betas[1] >= 1)
    throw OptionsError("optimizer options: 'betas' must be two numbers in [0, 1)");
  double eps = o.get_double("eps", 1e-8);
  double wd = o.get_double("weight_decay", type == "adamw" ? 0.01 : 0.0);
  if (wd < 0) throw OptionsError("optimizer options: 'weight_decay' must be >= 0");
  // ATen's fused kernels take float tensors of one device; fall back to the loop otherwise.
  bool fusable = !params.empty();
  for (const auto& p : params)
    fusable = fusable && at::isFloatingType(p.scalar_type()) && p.device() == params.front().device() &&
              (p.is_cpu() || p.is_cuda());
  fused_ = o.get_bool("fused", true) && fusable;
  if (type == "sgd") {
    torch::optim::SGDOptions so(lr);
    so.momentum(o.get_double("momentum", 0.0)).dampening(o.get_double("dampening", 0.0))
        .weight_decay(wd).nesterov(o.get_bool("nesterov", false));
    if (fused_) impl_ = std::make_shared<FusedSgd>(params, so);
    else impl_ = std::make_shared<torch::optim::SGD>(params, so);
  } else if (type == "adam") {
    torch::optim::AdamOptions ao(lr);
    ao.betas({betas[0], betas[1]}).eps(eps).weight_decay(wd).amsgrad(o.get_bool("amsgrad", false));
    if (fused_) impl_ = std::make_shared<FusedAdam<torch::optim::Adam, torch::optim::AdamParamState, torch::optim::AdamOptions>>(params, ao);
    else impl_ = std::make_shared<torch::optim::Adam>(params, ao);
  } else {
    torch::optim::AdamWOptions ao(lr);
    ao.betas({betas[0], betas[1]}).eps(eps).weight_decay(wd).amsgrad(o.get_bool("amsgrad", false));
    if (fused_) impl_ = std::make_shared<FusedAdam<torch::optim::AdamW, torch::optim::AdamWParamState, torch::optim::AdamWOptions>>(params, ao);
    else impl_ = std::make_shared<torch::optim::AdamW>(params, ao);
  }
  for (auto& g : impl_->param_groups()) initial_lr_.push_back(g.options().get_lr());
}

Optimizer::Optimizer(std::shared_ptr<torch::optim::Optimizer> impl) : impl_(std::move(impl)) {
  if (!impl_) throw std::invalid_argument("the optimizer is null");
  for (auto& g : impl_->param_groups()) initial_lr_.push_back(g.options().get_lr());
}

Optimizer::~Optimizer() = default;

void Optimizer::step() { impl_->step(); }

void Optimizer::zero_grad() {
  // torch.optim's zero_grad(set_to_none=True). Not LibTorch's, which detaches each gradient in place first and
  // so fails on gradients that are views (a sharded strategy's are views of its reduce-scatter output).
  for (auto& g : impl_->param_groups())
    for (auto& p : g.params()) p.mutable_grad().reset();
}

double Optimizer::lr() const { return impl_->param_groups().front().options().get_lr(); }

void Optimizer::scale_lr(double factor) {
  auto& groups = impl_->param_groups();
  for (size_t i = 0; i < groups.size() && i < initial_lr_.size(); ++i) groups[i].options().set_lr(initial_lr_[i] * factor);
}

std::vector<at::Tensor> Optimizer::params() const {
  std::vector<at::Tensor> v;
  for (auto& g : impl_->param_groups())
    for (auto& p : g.params()) v.push_back(p);
  return v;
}

void Optimizer::rebind(std::vector<at::Tensor> shards, const std::vector<at::Tensor>& params) {
  check_rebind(params);
  impl_->param_groups()[0].params() = std::move(shards);
}

void Optimizer::check_rebind(const std::vector<at::Tensor>& params) const {
  if (!impl_->state().empty())
    throw StateError("a sharded model's optimizer must be prepared before its first step (its state would not match the shards)");
  if (impl_->param_groups().size() != 1)
    throw UnsupportedError("a sharded model's optimizer must have one parameter group; this one has " +
                           std::to_string(impl_->param_groups().size()));
  std::set<const void*> held, wanted;
  for (const auto& p : impl_->param_groups()[0].params()) held.insert(p.unsafeGetTensorImpl());
  for (const auto& p : params) wanted.insert(p.unsafeGetTensorImpl());
  if (held != wanted)
    throw UnsupportedError("a sharded model's optimizer must hold exactly the model's trainable parameters (it holds " +
                           std::to_string(held.size()) + ", the model has " + std::to_string(wanted.size()) + ")");
}

namespace {

// One optimizer family's per-parameter state: its tensors by name, and its step count (if it has one).
struct StateKind {
  const char* type;
  std::vector<const char*> tensors;
  bool has_step;
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>()> make;
  std::function<at::Tensor*(torch::optim::OptimizerParamState&, const std::string&)> tensor;
  std::function<int64_t*(torch::optim::OptimizerParamState&)> step;
};

template <class St>
std::unique_ptr<torch::optim::OptimizerParamState> make_state() {
  return std::make_unique<St>();
}

template <class St>
StateKind adam_like(const char* type) {
  return {type,
          {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
          true,
          make_state<St>,
          [](torch::optim::OptimizerParamState& s, const std::string& n) -> at::Tensor* {
            auto& st = static_cast<St&>(s);
            return n == "exp_avg" ? &st.exp_avg() : n == "exp_avg_sq" ? &st.exp_avg_sq() : &st.max_exp_avg_sq();
          },
          [](torch::optim::OptimizerParamState& s) { return &static_cast<St&>(s).step(); }};
}

StateKind state_kind(const torch::optim::Optimizer& opt) {
  using namespace torch::optim;
  if (dynamic_cast<const AdamW*>(&opt)) return adam_like<AdamWParamState>("adamw");
  if (dynamic_cast<const Adam*>(&opt)) return adam_like<AdamParamState>("adam");
  if (dynamic_cast<const SGD*>(&opt))
    return {"sgd", {"momentum_buffer"}, false, make_state<SGDParamState>,
            [](OptimizerParamState& s, const std::string&) { return &static_cast<SGDParamState&>(s).momentum_buffer(); },
            nullptr};
  if (dynamic_cast<const RMSprop*>(&opt))
    return {"rmsprop", {"square_avg", "momentum_buffer", "grad_avg"}, true, make_state<RMSpropParamState>,
            [](OptimizerParamState& s, const std::string& n) {
              auto& st = static_cast<RMSpropParamState&>(s);
              return n == "square_avg" ? &st.square_avg() : n == "momentum_buffer" ? &st.momentum_buffer() : &st.grad_avg();
            },
            [](OptimizerParamState& s) { return &static_cast<RMSpropParamState&>(s).step(); }};
  if (dynamic_cast<const Adagrad*>(&opt))
    return {"adagrad", {"sum"}, true, make_state<AdagradParamState>,
            [](OptimizerParamState& s, const std::string&) { return &static_cast<AdagradParamState&>(s).sum(); },
            [](OptimizerParamState& s) { return &static_cast<AdagradParamState&>(s).step(); }};
  throw UnsupportedError("the optimizer's state cannot be checkpointed: only SGD, Adam, AdamW, RMSprop and Adagrad "
                         "(LibTorch's classes or libacc's fused ones) are known");
}

}  // namespace

Optimizer::State Optimizer::save_state() const {
  const StateKind kind = state_kind(*impl_);
  State out;
  json::Writer j;
  j.begin_object().key("type").value(kind.type).key("param_groups").begin_array();
  auto& groups = impl_->param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    j.begin_object()
        .key("lr").value(groups[g].options().get_lr())
        .key("initial_lr").value(g < initial_lr_.size() ? initial_lr_[g] : groups[g].options().get_lr())
        .key("num_params").value(static_cast<int64_t>(groups[g].params().size()))
        .end_object();
  j.end_array().key("state").begin_object();
  int64_t i = 0;
  for (auto& g : groups)
    for (auto& p : g.params()) {
      auto it = impl_->state().find(p.unsafeGetTensorImpl());
      if (it != impl_->state().end() && it->second) {
        auto& st = *it->second;
        j.key(std::to_string(i)).begin_object();
        if (kind.has_step) j.key("step").value(*kind.step(st));
        j.end_object();
        for (const char* name : kind.tensors)
          if (const at::Tensor* t = kind.tensor(st, name); t->defined())
            out.tensors.emplace_back("state." + std::to_string(i) + "." + name, *t);
      }
      ++i;
    }
  j.end_object().end_object();
  out.json = j.str();
  return out;
}

void Optimizer::load_state(const State& state, const std::string& source) {
  const StateKind kind = state_kind(*impl_);
  const json::Document doc = json::Document::object(state.json, source);
  const std::string type = doc.root().get_string("type");
  if (type != kind.type)
    throw std::invalid_argument(source + ": the checkpoint holds a " + type + " optimizer; this one is " + kind.type);
  auto& groups = impl_->param_groups();
  json::Value saved_groups = doc.root().get("param_groups");
  if (saved_groups.size() != groups.size())
    throw std::invalid_argument(source + ": 'param_groups' has " + std::to_string(saved_groups.size()) +
                                " groups; this optimizer has " + std::to_string(groups.size()));
  // Index the parameters as torch's state_dict does, and check every tensor before changing anything.
  std::vector<at::Tensor> params;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t n = saved_groups.at(g).get_int("num_params");
    if (n != static_cast<int64_t>(groups[g].params().size()))
      throw std::invalid_argument(source + ": param_groups[" + std::to_string(g) + "] has " + std::to_string(n) +
                                  " parameters; this optimizer's has " + std::to_string(groups[g].params().size()));
    for (auto& p : groups[g].params()) params.push_back(p);
  }
  std::map<std::string, at::Tensor> by_name(state.tensors.begin(), state.tensors.end());
  json::Value saved_state = doc.root().get("state");
  std::vector<std::pair<size_t, std::unique_ptr<torch::optim::OptimizerParamState>>> fresh;
  for (const std::string& key : saved_state.keys()) {
    size_t i = 0;
    try {
      i = std::stoul(key);
    } catch (const std::exception&) {
      throw std::invalid_argument(source + ": state key '" + key + "' is not a parameter index");
    }
    if (i >= params.size())
      throw std::invalid_argument(source + ": state of parameter " + key + ", but the optimizer has " +
                                  std::to_string(params.size()));
    const at::Tensor& p = params[i];
    auto st = kind.make();
    if (kind.has_step) *kind.step(*st) = saved_state.get(key).get_int("step");
    for (const char* name : kind.tensors) {
      const std::string full = "state." + key + "." + name;
      auto it = by_name.find(full);
      if (it == by_name.end()) continue;
      if (!it->second.sizes().equals(p.sizes()))
        throw std::invalid_argument(source + ": '" + full + "' has shape " + c10::str(it->second.sizes()) +
                                    " but parameter " + key + " has " + c10::str(p.sizes()));
      check_dtype_converts(full, it->second, p, source);  // a moment is copied into the parameter's dtype
      *kind.tensor(*st, name) = it->second;  // still the file's; copied below, once everything is checked
      by_name.erase(it);
    }
    fresh.emplace_back(i, std::move(st));
  }
  if (!by_name.empty())
    throw std::invalid_argument(source + ": tensor '" + by_name.begin()->first + "' belongs to no saved state");
  // All checked: copy into the moments this optimizer already has (no new allocation), or into new ones.
  auto& live = impl_->state();
  for (auto& [i, st] : fresh) {
    const at::Tensor& p = params[i];
    auto old = live.find(p.unsafeGetTensorImpl());
    for (const char* name : kind.tensors) {
      at::Tensor& loaded = *kind.tensor(*st, name);
      if (!loaded.defined()) continue;
      at::Tensor dst;
      if (old != live.end()) dst = *kind.tensor(*old->second, name);
      if (!dst.defined() || !dst.sizes().equals(p.sizes()) || dst.scalar_type() != p.scalar_type() ||
          dst.device() != p.device())
        dst = at::empty_like(p, at::MemoryFormat::Contiguous);
      dst.copy_(loaded);
      loaded = dst;
    }
  }
  live.clear();
  for (auto& [i, st] : fresh) live[params[i].unsafeGetTensorImpl()] = std::move(st);
  initial_lr_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options().set_lr(saved_groups.at(g).get_double("lr"));
    initial_lr_.push_back(saved_groups.at(g).get_double("initial_lr"));
  }
}

Schedule::Schedule(const char* options_json) {
  Options o(options_json, "scheduler options", {"type", "warmup_steps", "total_steps", "min_lr_ratio"});
  type_ = o.get_string("type", "constant", {"constant", "linear", "cosine"});
  warmup_ = o.get_int("warmup_steps", 0, 0);
  bool needs_total = type_ != "constant";
  total_ = o.get_int("total_steps", needs_total ? std::nullopt : std::optional<int64_t>(0), 0);
  if (needs_total && total_ <= warmup_)
    throw OptionsError("scheduler options: 'total_steps' (" + std::to_string(total_) +
                       ") must exceed 'warmup_steps' (" + std::to_string(warmup_) + ")");
  min_ratio_ = o.get_double("min_lr_ratio", 0.0);
  if (min_ratio_ < 0 || min_ratio_ > 1) throw OptionsError("scheduler options: 'min_lr_ratio' must be in [0, 1]");
}

double Schedule::factor(int64_t step) const {
  // The shapes of transformers' get_{constant,linear,cosine}_schedule_with_warmup.
  if (step < warmup_) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_));
  if (type_ == "constant") return 1.0;
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  progress = std::min(progress, 1.0);
  if (type_ == "linear") return std::max(0.0, 1.0 - progress);
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_ratio_ + (1.0 - min_ratio_) * cosine;
}

}  // namespace acc::core
