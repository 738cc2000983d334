#include "train/optim.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <type_traits>

#include "models/model.hpp"
#include "models/module_tree.hpp"
#include "train/param_groups.hpp"
#include "util/errors.hpp"
#include <acc/json.hpp>
#include "util/options.hpp"
#include "util/pattern.hpp"

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

namespace {

// One parameter group's hyperparameters: PyTorch's defaults (torch.optim), then the top-level options, then the
// group's own. lr 1e-3; SGD momentum 0, dampening 0, nesterov false; Adam(W) betas (0.9, 0.999), eps 1e-8,
// amsgrad false; weight_decay 0 (AdamW: 0.01).
struct Hyper {
  double lr = 1e-3, momentum = 0, dampening = 0, eps = 1e-8, weight_decay = 0;
  bool nesterov = false, amsgrad = false;
  std::vector<double> betas{0.9, 0.999};
};

const std::vector<std::string> kHyperKeys = {"lr",    "momentum", "dampening",    "nesterov",
                                             "betas", "eps",      "weight_decay", "amsgrad"};

std::vector<std::string> with(std::vector<std::string> keys, std::initializer_list<const char*> more) {
  keys.insert(keys.end(), more.begin(), more.end());
  return keys;
}

Hyper read_hyper(const Options& o, Hyper h, const std::string& what) {
  h.lr = o.get_double("lr", h.lr);
  if (!(h.lr >= 0)) throw OptionsError(what + ": 'lr' must be >= 0");
  h.betas = o.get_double_list("betas", h.betas);
  if (h.betas.size() != 2 || h.betas[0] < 0 || h.betas[0] >= 1 || h.betas[1] < 0 || h.betas[1] >= 1)
    throw OptionsError(what + ": 'betas' must be two numbers in [0, 1)");
  h.eps = o.get_double("eps", h.eps);
  h.weight_decay = o.get_double("weight_decay", h.weight_decay);
  if (h.weight_decay < 0) throw OptionsError(what + ": 'weight_decay' must be >= 0");
  h.momentum = o.get_double("momentum", h.momentum);
  h.dampening = o.get_double("dampening", h.dampening);
  h.nesterov = o.get_bool("nesterov", h.nesterov);
  h.amsgrad = o.get_bool("amsgrad", h.amsgrad);
  return h;
}

template <class T>
std::unique_ptr<torch::optim::OptimizerOptions> adam_options(const Hyper& h) {
  T a(h.lr);
  a.betas({h.betas[0], h.betas[1]}).eps(h.eps).weight_decay(h.weight_decay).amsgrad(h.amsgrad);
  return std::make_unique<T>(a);
}

std::unique_ptr<torch::optim::OptimizerOptions> options_for(const std::string& type, const Hyper& h) {
  if (type == "sgd") {
    torch::optim::SGDOptions so(h.lr);
    so.momentum(h.momentum).dampening(h.dampening).weight_decay(h.weight_decay).nesterov(h.nesterov);
    return std::make_unique<torch::optim::SGDOptions>(so);
  }
  if (type == "adam") return adam_options<torch::optim::AdamOptions>(h);
  return adam_options<torch::optim::AdamWOptions>(h);
}

// A group of the options' param_groups: the parameters whose names a pattern matches (regular expressions matched
// against the whole name), with the group's hyperparameters.
struct GroupSpec {
  std::string what;  // "param_groups[1]"
  std::function<bool(const std::string&)> selects;
  Hyper hyper;
  std::vector<at::Tensor> params;
};

std::vector<GroupSpec> explicit_groups(const json::Value& list, const Hyper& top) {
  std::vector<GroupSpec> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string what = "param_groups[" + std::to_string(i) + "]";
    const json::Value g = list.at(i);
    const std::string where = "optimizer options: " + what;
    if (!g.is_object()) throw OptionsError(where + " must be an object {\"params\": [patterns], \"lr\": ...}");
    Options o(g.text().c_str(), where, with(kHyperKeys, {"params"}));
    if (!o.has("params")) throw OptionsError(where + ": 'params' (a pattern or a list of them) is required");
    const json::Value p = o.root().get("params");
    std::vector<std::string> texts;
    if (p.is_string()) texts.push_back(p.as_string());
    for (const json::Value& e : p.is_array() ? p.elements() : std::vector<json::Value>{}) {
      if (!e.is_string()) throw OptionsError(where + ": 'params' must be a pattern or a list of patterns");
      texts.push_back(e.as_string());
    }
    if (texts.empty()) throw OptionsError(where + ": 'params' must be a pattern or a non-empty list of patterns");
    std::vector<Pattern> patterns;
    for (const std::string& t : texts) {
      try {
        patterns.emplace_back(t, where + ": 'params'");
      } catch (const std::invalid_argument& e) {
        throw OptionsError(e.what());  // ACC_ERR_INVALID_CONFIG, as these options' other errors
      }
    }
    out.push_back({what,
                   [patterns](const std::string& name) {
                     return std::any_of(patterns.begin(), patterns.end(),
                                        [&](const Pattern& r) { return r.full_match(name); });
                   },
                   read_hyper(o, top, where),
                   {}});
  }
  return out;
}

}  // namespace

Optimizer::Optimizer(const NamedTensors& params, const char* options_json,
                     const std::function<std::vector<std::string>()>& no_decay_names) {
  Options o(options_json, "optimizer options", with(kHyperKeys, {"type", "fused", "param_groups"}));
  std::string type = o.get_string("type", "", {"sgd", "adam", "adamw"});
  if (type.empty()) throw OptionsError("optimizer options: 'type' is required: \"sgd\", \"adam\" or \"adamw\"");
  Hyper defaults;
  if (type == "adamw") defaults.weight_decay = 0.01;
  const Hyper top = read_hyper(o, defaults, "optimizer options");

  // The groups: those the options list, in their order, then the parameters no group selects (the top-level
  // options); or the Trainer's split: what decays (the top-level options), then biases and norms without decay.
  std::vector<GroupSpec> listed;
  bool preset = false;
  if (o.has("param_groups")) {
    const json::Value g = o.root().get("param_groups");
    if (g.is_string() && g.as_string() == "transformers" && no_decay_names) {
      const std::vector<std::string> names = no_decay_names();
      Hyper off = top;
      off.weight_decay = 0;
      listed.push_back({"param_groups \"transformers\"",
                        [no_decay = std::set<std::string>(names.begin(), names.end())](const std::string& n) {
                          return no_decay.count(n) > 0;
                        },
                        off,
                        {}});
      preset = true;
    } else if (g.is_array()) {
      listed = explicit_groups(g, top);
    } else {
      throw OptionsError("optimizer options: 'param_groups' must be a list of groups or \"transformers\" (with a "
                         "model); got " +
                         g.text());
    }
  }
  GroupSpec rest{"", nullptr, top, {}};
  for (const auto& [name, t] : params) {
    GroupSpec* in = nullptr;
    for (GroupSpec& g : listed) {
      if (!g.selects(name)) continue;
      if (in)
        throw OptionsError("optimizer options: parameter '" + name + "' is in " + in->what + " and " + g.what +
                           "; a parameter belongs to one group");
      in = &g;
    }
    (in ? *in : rest).params.push_back(t);
  }
  for (const GroupSpec& g : listed)
    if (g.params.empty() && !preset) {
      std::string names;
      for (size_t i = 0; i < params.size() && i < 8; ++i) names += (i ? ", " : "") + params[i].first;
      throw OptionsError("optimizer options: " + g.what + " selects no trainable parameter (the model's: " + names +
                         (params.size() > 8 ? ", ..." : "") + ")");
    }
  if (preset) listed.insert(listed.begin(), std::move(rest));
  else listed.push_back(std::move(rest));
  std::vector<torch::optim::OptimizerParamGroup> torch_groups;
  for (GroupSpec& g : listed)
    if (!g.params.empty()) torch_groups.emplace_back(g.params, options_for(type, g.hyper));
  if (torch_groups.empty()) torch_groups.emplace_back(std::vector<at::Tensor>{}, options_for(type, top));

  // ATen's fused kernels take float tensors of one device; fall back to the loop otherwise. (Meta tensors are a
  // zero3_init_flag model's, made on the accelerator's one device at prepare.)
  bool fusable = !params.empty();
  for (const auto& [name, p] : params)
    fusable = fusable && at::isFloatingType(p.scalar_type()) && p.device() == params.front().second.device() &&
              (p.is_cpu() || p.is_cuda() || p.is_meta());
  fused_ = o.get_bool("fused", true) && fusable;
  const std::unique_ptr<torch::optim::OptimizerOptions> top_options = options_for(type, top);
  const auto& d = *top_options;
  if (type == "sgd") {
    const auto& so = static_cast<const torch::optim::SGDOptions&>(d);
    if (fused_) impl_ = std::make_shared<FusedSgd>(torch_groups, so);
    else impl_ = std::make_shared<torch::optim::SGD>(torch_groups, so);
  } else if (type == "adam") {
    const auto& ao = static_cast<const torch::optim::AdamOptions&>(d);
    if (fused_)
      impl_ = std::make_shared<FusedAdam<torch::optim::Adam, torch::optim::AdamParamState, torch::optim::AdamOptions>>(
          torch_groups, ao);
    else impl_ = std::make_shared<torch::optim::Adam>(torch_groups, ao);
  } else {
    const auto& ao = static_cast<const torch::optim::AdamWOptions&>(d);
    if (fused_)
      impl_ =
          std::make_shared<FusedAdam<torch::optim::AdamW, torch::optim::AdamWParamState, torch::optim::AdamWOptions>>(
              torch_groups, ao);
    else impl_ = std::make_shared<torch::optim::AdamW>(torch_groups, ao);
  }
  for (auto& g : impl_->param_groups()) initial_lr_.push_back(g.options().get_lr());
}

namespace {
NamedTensors by_index(const std::vector<at::Tensor>& params) {
  NamedTensors out;
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(i), params[i]);
  return out;
}
}  // namespace

Optimizer::Optimizer(const std::vector<at::Tensor>& params, const char* options_json)
    : Optimizer(by_index(params), options_json) {}

std::unique_ptr<Optimizer> make_optimizer(const Model& model, const char* options_json) {
  NamedTensors params = model.trainable_parameters();
  // torch.optim refuses an empty parameter list; an optimizer that can never step anything is a caller's mistake.
  if (params.empty())
    throw std::invalid_argument(model.named_parameters().empty()
                                    ? "the optimizer has no parameter to train: the model has no parameters"
                                    : "the optimizer has no parameter to train: every parameter of the model is frozen "
                                      "(requires_grad false); unfreeze some (acc_model_set_requires_grad) first");
  return std::make_unique<Optimizer>(std::move(params), options_json,
                                     [&model] { return no_decay_parameter_names(tree_of(model)); });
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
  for (size_t i = 0; i < groups.size() && i < initial_lr_.size(); ++i)
    groups[i].options().set_lr(initial_lr_[i] * factor);
}

std::vector<at::Tensor> Optimizer::params() const {
  std::vector<at::Tensor> v;
  for (auto& g : impl_->param_groups())
    for (auto& p : g.params()) v.push_back(p);
  return v;
}

void Optimizer::rebind(const std::vector<at::Tensor>& params,
                       const std::function<std::vector<at::Tensor>(const at::Tensor&)>& pieces_of) {
  check_rebind(params);
  whole_ = whole_groups();
  for (size_t g = 0; g < whole_.size(); ++g) {
    std::vector<at::Tensor> pieces;
    for (const at::Tensor& p : whole_[g])
      for (at::Tensor& piece : pieces_of(p)) pieces.push_back(std::move(piece));
    impl_->param_groups()[g].params() = std::move(pieces);
  }
}

void Optimizer::keep_only(const std::vector<at::Tensor>& params) {
  std::set<const void*> kept;
  for (const at::Tensor& p : params) kept.insert(p.unsafeGetTensorImpl());
  for (auto& g : impl_->param_groups()) {
    std::vector<at::Tensor> mine;
    for (const at::Tensor& p : g.params())
      if (kept.count(p.unsafeGetTensorImpl())) mine.push_back(p);
    g.params() = std::move(mine);
  }
}

void Optimizer::replace_parameters(const std::function<at::Tensor(const at::Tensor&)>& replacement) {
  for (auto& g : impl_->param_groups())
    for (auto& p : g.params())
      if (at::Tensor r = replacement(p); r.defined()) p = r;
}

std::vector<std::vector<at::Tensor>> Optimizer::whole_groups() const {
  if (!whole_.empty()) return whole_;
  std::vector<std::vector<at::Tensor>> v;
  for (auto& g : impl_->param_groups()) v.push_back(g.params());
  return v;
}

void Optimizer::check_rebind(const std::vector<at::Tensor>& params) const {
  if (!impl_->state().empty())
    throw StateError(
        "a sharded model's optimizer must be prepared before its first step (its state would not match the shards)");
  if (!whole_.empty()) throw StateError("the optimizer already steps a sharded model's pieces");
  std::set<const void*> held, wanted;
  for (const auto& g : impl_->param_groups())
    for (const auto& p : g.params()) held.insert(p.unsafeGetTensorImpl());
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
    return {"sgd",
            {"momentum_buffer"},
            false,
            make_state<SGDParamState>,
            [](OptimizerParamState& s, const std::string&) {
              return &static_cast<SGDParamState&>(s).momentum_buffer();
            },
            nullptr};
  if (dynamic_cast<const RMSprop*>(&opt))
    return {"rmsprop",
            {"square_avg", "momentum_buffer", "grad_avg"},
            true,
            make_state<RMSpropParamState>,
            [](OptimizerParamState& s, const std::string& n) {
              auto& st = static_cast<RMSpropParamState&>(s);
              return n == "square_avg"        ? &st.square_avg()
                     : n == "momentum_buffer" ? &st.momentum_buffer()
                                              : &st.grad_avg();
            },
            [](OptimizerParamState& s) { return &static_cast<RMSpropParamState&>(s).step(); }};
  if (dynamic_cast<const Adagrad*>(&opt))
    return {"adagrad",
            {"sum"},
            true,
            make_state<AdagradParamState>,
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
        .key("lr")
        .value(groups[g].options().get_lr())
        .key("initial_lr")
        .value(g < initial_lr_.size() ? initial_lr_[g] : groups[g].options().get_lr())
        .key("num_params")
        .value(static_cast<int64_t>(groups[g].params().size()))
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
