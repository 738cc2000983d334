#include "models/deferred.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <mutex>
#include <stdexcept>

#include "formats/safetensors.hpp"
#include "models/layers.hpp"

namespace acc::core {

DeferredParameters::DeferredParameters(std::shared_ptr<torch::nn::Module> root) : root_(std::move(root)) {
  for (const auto& item : root_->named_modules("", /*include_self=*/true))
    if (auto* m = dynamic_cast<InitModule*>(item.value().get())) modules_.emplace_back(item.key(), m);
}

at::Tensor DeferredParameters::adopt(const std::string& name, const at::Tensor& value) {
  const size_t dot = name.rfind('.');
  const std::string module = dot == std::string::npos ? "" : name.substr(0, dot);
  const std::string local = dot == std::string::npos ? name : name.substr(dot + 1);
  for (auto& [prefix, m] : modules_) {
    if (prefix != module) continue;
    at::Tensor& slot = m->param(local.c_str());
    if (!slot.defined()) break;
    // A new leaf on the value's storage, as set_data would make it (a meta tensor cannot take another device's data).
    at::Tensor made = at::empty({0}, value.options());
    made.set_data(value.detach());
    made.requires_grad_(slot.requires_grad());
    replaced_[slot.unsafeGetTensorImpl()] = {slot, made};
    adopted_.emplace_back(m, local, slot);
    slot = made;
    return made;
  }
  throw std::logic_error("deferred parameters: the model has no parameter '" + name + "'");
}

void DeferredParameters::revert() {
  for (auto it = adopted_.rbegin(); it != adopted_.rend(); ++it)
    std::get<0>(*it)->param(std::get<1>(*it).c_str()) = std::get<2>(*it);
  adopted_.clear();
  replaced_.clear();
  pending_ = true;
}

void DeferredParameters::make_whole(c10::Device device) {
  c10::NoGradGuard no_grad;
  // Adopted after make(): while make() runs, each module holds temporaries in place of its parameters.
  std::vector<std::pair<std::string, at::Tensor>> made;
  make([&](const std::string& name, const at::Tensor& value) {
    made.emplace_back(name, value.to(device, value.scalar_type(), /*non_blocking=*/false, /*copy=*/true));
  });
  for (const auto& [name, value] : made) adopt(name, value);
  finish();
}

at::Tensor DeferredParameters::replacement(const at::Tensor& old) const {
  auto it = replaced_.find(old.unsafeGetTensorImpl());
  return it == replaced_.end() ? at::Tensor() : it->second.second;
}

namespace {

// The parameters of one module, by local name, in registration order.
std::vector<std::pair<std::string, at::Tensor>> own_parameters(InitModule& m) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (const auto& item : m.named_parameters(/*recurse=*/false)) v.emplace_back(item.key(), item.value());
  return v;
}

class InitReplay final : public DeferredParameters {
 public:
  explicit InitReplay(std::shared_ptr<torch::nn::Module> root) : DeferredParameters(std::move(root)) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      start_ = gen.get_state().contiguous();
    }
    run(nullptr);  // leaves the generator where construction would
  }

  std::vector<at::Tensor> rank0_state() override { return {start_}; }

  void make(const Place& place) override {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    at::Tensor now;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      now = gen.get_state();
      gen.set_state(start_);
    }
    auto restore = [&] {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(now);
    };
    try {
      run(place);
    } catch (...) {
      restore();
      throw;
    }
    restore();
  }

 private:
  // reset_tree's draws, one module at a time: its meta tensors give way to CPU temporaries while it initialises them,
  // then come back (the temporaries are freed after `place` has seen them).
  void run(const Place& place) {
    c10::NoGradGuard no_grad;
    for (auto& [prefix, m] : modules_) {
      const auto kept = own_parameters(*m);
      for (const auto& [local, t] : kept) m->param(local.c_str()) = at::empty(t.sizes(), t.options().device(c10::kCPU));
      try {
        m->reset();
        if (place)
          for (const auto& [local, t] : kept)
            place(prefix.empty() ? local : prefix + "." + local, m->param(local.c_str()));
      } catch (...) {
        for (const auto& [local, t] : kept) m->param(local.c_str()) = t;
        throw;
      }
      for (const auto& [local, t] : kept) m->param(local.c_str()) = t;
    }
  }

  at::Tensor start_;  // the CPU generator's state before construction's draws
};

class CheckpointLoad final : public DeferredParameters {
 public:
  CheckpointLoad(std::shared_ptr<torch::nn::Module> root, std::map<std::string, std::string> file_of)
      : DeferredParameters(std::move(root)), file_of_(std::move(file_of)) {}

  void make(const Place& place) override {
    c10::NoGradGuard no_grad;
    for (auto& [prefix, m] : modules_) {
      // This module's tensors by file; each file mapped for them and unmapped again (its pages leave the process).
      std::map<std::string, std::vector<std::pair<std::string, at::Tensor>>> by_file;
      for (const auto& [local, meta] : own_parameters(*m)) {
        const std::string name = prefix.empty() ? local : prefix + "." + local;
        auto f = file_of_.find(name);
        if (f == file_of_.end()) throw std::logic_error("deferred loading: no file holds '" + name + "'");
        by_file[f->second].emplace_back(name, meta);
      }
      for (const auto& [file, wanted] : by_file) {
        std::map<std::string, at::Tensor> mapped;
        for (auto& [name, t] : load_safetensors(file)) mapped.emplace(name, t);
        for (const auto& [name, meta] : wanted) {
          auto t = mapped.find(name);
          if (t == mapped.end()) throw std::ios_base::failure(file + " no longer holds '" + name + "'");
          if (!t->second.sizes().equals(meta.sizes()))
            throw std::ios_base::failure(file + ": '" + name + "' has changed shape since the model was built");
          place(name, t->second.scalar_type() == meta.scalar_type() ? t->second : t->second.to(meta.scalar_type()));
        }
      }
    }
  }

 private:
  std::map<std::string, std::string> file_of_;
};

}  // namespace

std::shared_ptr<DeferredParameters> defer_initialisation(std::shared_ptr<torch::nn::Module> root) {
  return std::make_shared<InitReplay>(std::move(root));
}

std::shared_ptr<DeferredParameters> defer_loading(std::shared_ptr<torch::nn::Module> root,
                                                  std::map<std::string, std::string> file_of) {
  return std::make_shared<CheckpointLoad>(std::move(root), std::move(file_of));
}

}  // namespace acc::core
