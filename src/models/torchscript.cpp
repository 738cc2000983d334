// TorchScript modules (torch.jit.save files) behind the same module-tree interface: the route for
// architectures the built-ins don't cover. forward receives the batch's tensors by its argument names
// (model(**batch)); a module whose forward takes one tensor gets the batch's "input".
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>

#include <fstream>

#include "models/model.hpp"
#include "util/options.hpp"

namespace acc::core {
namespace {

class TorchScriptModel final : public Model {
 public:
  TorchScriptModel(torch::jit::Module m, std::string loss) : m_(std::move(m)), loss_(std::move(loss)) {
    m_.train(true);
  }

  TensorDict forward(const TensorDict& batch) override {
    const auto& args = m_.get_method("forward").function().getSchema().arguments();  // [self, ...]
    std::vector<c10::IValue> inputs;
    size_t used = 0;
    if (args.size() == 2 && !batch.contains(args[1].name())) {
      inputs.emplace_back(batch.at("input"));
      used = 1;
    } else {
      for (size_t i = 1; i < args.size(); ++i) {
        if (batch.contains(args[i].name())) {
          inputs.emplace_back(batch.at(args[i].name()));
          ++used;
        } else if (args[i].default_value()) {
          inputs.push_back(*args[i].default_value());
        } else {
          throw std::invalid_argument("TorchScript forward needs '" + args[i].name() + "'; the batch has " +
                                      batch.keys());
        }
      }
    }
    const bool has_targets = batch.contains("targets");
    if (used + (has_targets ? 1 : 0) != batch.size())
      throw std::invalid_argument("TorchScript forward takes " + arg_names(args) + " (and targets); the batch has " +
                                  batch.keys());
    c10::IValue out = m_.forward(inputs);
    TensorDict r;
    if (out.isTensor()) {
      r.set("output", out.toTensor());
    } else if (out.isGenericDict()) {  // Dict[str, Tensor], as Hugging Face models return
      for (const auto& e : out.toGenericDict()) {
        if (!e.key().isString() || !e.value().isTensor())
          throw std::invalid_argument("TorchScript module: a dict returned by forward must map str to Tensor");
        r.set(e.key().toStringRef(), e.value().toTensor());
      }
      if (r.empty()) throw std::invalid_argument("TorchScript module: forward returned an empty dict");
    } else {
      throw std::invalid_argument("TorchScript module: forward must return a tensor or a Dict[str, Tensor]; it "
                                  "returned " +
                                  out.tagKind());
    }
    // A module that computes its own loss (a "loss" entry) keeps it; otherwise the configured loss of the
    // first output against "targets".
    if (has_targets && !r.contains("loss"))
      r.set("loss", compute_loss(loss_, r.items().front().second, batch.at("targets")));
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
  std::vector<std::string> module_names() const override {
    std::vector<std::string> v;
    for (const auto& m : m_.named_modules()) v.push_back(m.name);
    return v;
  }
  void train(bool on) override { m_.train(on); }
  bool is_training() const override { return m_.is_training(); }

 private:
  static std::string arg_names(const std::vector<c10::Argument>& args) {
    std::string s;
    for (size_t i = 1; i < args.size(); ++i) s += (s.empty() ? "" : ", ") + args[i].name();
    return s;
  }
  torch::jit::Module m_;
  std::string loss_;
};

}  // namespace

std::unique_ptr<Model> load_torchscript_model(const std::string& path, const char* options_json) {
  Options o(options_json, "TorchScript options", {"loss"});
  std::string loss = o.get_string("loss", "none", {"mse", "cross_entropy", "none"});
  if (!std::ifstream(path).good()) throw std::ios_base::failure("cannot open TorchScript file '" + path + "'");
  torch::jit::Module m;
  try {
    m = torch::jit::load(path);
  } catch (const c10::Error& e) {
    throw std::ios_base::failure("'" + path + "' is not a TorchScript module: " + e.what_without_backtrace());
  }
  return std::make_unique<TorchScriptModel>(std::move(m), loss);
}

}  // namespace acc::core
