// TorchScript modules (torch.jit.save files): the route for architectures the built-ins don't cover.
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <fstream>

#include "models/model.hpp"
#include "util/options.hpp"

namespace acc {
namespace {

class TorchScriptModel final : public Model {
 public:
  TorchScriptModel(torch::jit::Module m, std::string loss) : m_(std::move(m)), loss_(std::move(loss)) {
    m_.train(true);
  }
  ForwardResult forward(const at::Tensor& input, const at::Tensor& targets) override {
    c10::IValue out = m_.forward({input});
    if (!out.isTensor())
      throw std::invalid_argument("TorchScript module: forward must return one tensor; it returned " +
                                  out.tagKind());
    ForwardResult r{out.toTensor(), {}};
    if (targets.defined()) r.loss = compute_loss(loss_, r.output, targets);
    return r;
  }
  NamedTensors named_parameters() const override {
    NamedTensors v;
    for (const auto& p : m_.named_parameters(/*recurse=*/true)) v.emplace_back(p.name, p.value);
    return v;
  }
  NamedTensors named_buffers() const override {
    NamedTensors v;
    for (const auto& b : m_.named_buffers(/*recurse=*/true)) v.emplace_back(b.name, b.value);
    return v;
  }
  void set_training(bool on) override {
    Model::set_training(on);
    m_.train(on);
  }

 private:
  torch::jit::Module m_;
  std::string loss_;
};

}  // namespace

std::unique_ptr<Model> load_torchscript_model(const std::string& path, const char* options_json) {
  Options o(options_json, "TorchScript options", {"loss"});
  std::string loss = o.get_string("loss", "none", {"mse", "cross_entropy", "none"});
  if (!std::ifstream(path).good())
    throw std::ios_base::failure("cannot open TorchScript file '" + path + "'");
  torch::jit::Module m;
  try {
    m = torch::jit::load(path);
  } catch (const c10::Error& e) {
    throw std::ios_base::failure("'" + path + "' is not a TorchScript module: " +
                                 e.what_without_backtrace());
  }
  return std::make_unique<TorchScriptModel>(std::move(m), loss);
}

}  // namespace acc
