// Model's shared behaviour, and NnModel: the interface over any torch::nn::Module tree.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <map>
#include <set>

#include "models/deferred.hpp"
#include "models/model.hpp"
#include "util/errors.hpp"
#include "util/pattern.hpp"

namespace acc::core {

TensorDict Model::forward(const TensorDict&) {
  throw UnsupportedError("this model has no named forward (a C++ module: call its own forward)");
}

void Model::reset_parameters() {
  throw UnsupportedError("this model cannot initialise its parameters again (only the built-in families can)");
}

void Model::check_made(const std::string& what) const {
  if (deferred_ && deferred_->pending())
    throw StateError(what + ": the model's parameters are made when acc_prepare shards them (DeepSpeed ZeRO-3 with "
                            "zero3_init_flag: no process holds the whole model); prepare it first, or set "
                            "zero3_init_flag to false (deepspeed_config.zero3_init_flag in an Accelerate config file, "
                            "deepspeed_plugin.zero3_init_flag in libacc's)");
}

void Model::to(const c10::Device& device) {
  check_made("moving the model");
  c10::NoGradGuard no_grad;
  for (auto& [name, t] : state()) {
    if (t.is_meta() && !device.is_meta())
      throw std::invalid_argument("'" + name + "' is on the meta device: materialise the model first (to_empty)");
    if (t.device() != device) t.set_data(t.to(device));
  }
}

void Model::to_empty(const c10::Device&) {
  for (auto& [name, t] : state())
    if (t.is_meta())
      throw UnsupportedError("'" + name + "' is on the meta device and this model cannot materialise it");
}

bool dtype_converts(at::ScalarType from, at::ScalarType to) {
  return from == to || (at::isFloatingType(from) && at::isFloatingType(to)) ||
         (at::isComplexType(from) && at::isComplexType(to)) ||
         (at::isIntegralType(from, /*includeBool=*/false) && at::isIntegralType(to, /*includeBool=*/false));
}

void check_dtype_converts(const std::string& name, const at::Tensor& given, const at::Tensor& target,
                          const std::string& source) {
  if (!dtype_converts(given.scalar_type(), target.scalar_type()))
    throw std::invalid_argument("'" + name + "' is " + c10::str(given.scalar_type()) + " in " + source + " but " +
                                c10::str(target.scalar_type()) +
                                " in the model: loading converts floating point into floating point and integers "
                                "into integers, never one into the other");
}

void Model::load_state_dict(const NamedTensors& tensors, const std::string& source) {
  check_made("loading " + source);
  auto state = this->state();
  std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  // Check everything first: a mismatch leaves the model untouched.
  for (auto& [name, t] : state) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::invalid_argument(source + " has no tensor '" + name + "'");
    if (it->second.sizes() != t.sizes())
      throw std::invalid_argument("'" + name + "' has shape " + c10::str(it->second.sizes()) + " in " + source +
                                  " but " + c10::str(t.sizes()) + " in the model");
    check_dtype_converts(name, it->second, t, source);
  }
  if (by_name.size() != state.size()) {
    std::map<std::string, bool> known;
    for (auto& [name, t] : state) known[name] = true;
    for (auto& [name, t] : by_name)
      if (!known.count(name))
        throw std::invalid_argument(source + " holds '" + name + "', which the model does not have");
  }
  c10::NoGradGuard no_grad;
  for (auto& [name, t] : state) t.copy_(by_name[name]);
}

NamedTensors Model::state() const {
  NamedTensors all = named_parameters();
  for (auto& b : named_buffers()) all.push_back(b);
  return all;
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

NamedTensors Model::trainable_parameters() const {
  NamedTensors out;
  std::set<const void*> seen;
  for (const auto& [name, p] : named_parameters())
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.emplace_back(name, p);
  return out;
}

std::vector<at::Tensor> Model::trainable_tensors() const {
  std::vector<at::Tensor> out;
  for (auto& [name, p] : trainable_parameters()) out.push_back(std::move(p));
  return out;
}

int64_t Model::set_requires_grad(const std::string& pattern, bool on) {
  const Pattern re(pattern, "requires_grad pattern");
  std::map<const void*, at::Tensor> matched;
  for (const auto& [name, p] : named_parameters())
    if (re.full_match(name)) matched.emplace(p.unsafeGetTensorImpl(), p);
  if (matched.empty())
    throw std::invalid_argument("requires_grad pattern '" + pattern + "' matches no parameter name (matched against " +
                                "whole dotted names such as '" +
                                (named_parameters().empty() ? std::string("none: the model has no parameters")
                                                            : named_parameters().front().first) +
                                "')");
  for (auto& [impl, p] : matched) p.requires_grad_(on);
  return static_cast<int64_t>(matched.size());
}

NnModel::NnModel(std::shared_ptr<torch::nn::Module> module) : module_(std::move(module)) {
  if (!module_) throw std::invalid_argument("the module is null");
}

NamedTensors NnModel::named_parameters() const {
  NamedTensors v;
  for (const auto& p : module_->named_parameters(/*recurse=*/true)) v.emplace_back(p.key(), p.value());
  return v;
}

NamedTensors NnModel::named_buffers() const {
  NamedTensors v;
  for (const auto& b : module_->named_buffers(/*recurse=*/true)) v.emplace_back(b.key(), b.value());
  return v;
}

std::vector<std::string> NnModel::module_names() const {
  std::vector<std::string> names;
  for (const auto& m : module_->named_modules("", /*include_self=*/true)) names.push_back(m.key());
  return names;
}

void NnModel::train(bool on) { module_->train(on); }

bool NnModel::is_training() const { return module_->is_training(); }

}  // namespace acc::core
