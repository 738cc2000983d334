// Models a caller without C++ can train: built-in families (own parameter store + functional forward,
// so parameters can later live on any device, meta included) and TorchScript modules.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace acc {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct ForwardResult {
  at::Tensor output;
  at::Tensor loss;  // undefined when no targets were given
};

class Model {
 public:
  virtual ~Model() = default;
  // targets may be undefined: no loss then.
  virtual ForwardResult forward(const at::Tensor& input, const at::Tensor& targets) = 0;
  virtual NamedTensors named_parameters() const = 0;
  virtual NamedTensors named_buffers() const { return {}; }
  virtual void set_training(bool on) { training_ = on; }
  bool training() const { return training_; }
  // Moves parameters and buffers in place: tensor identities (held by optimizers) survive.
  virtual void to(const c10::Device& device);
  NamedTensors state() const;  // parameters, then buffers

 protected:
  bool training_ = true;
};

// {"type": "mlp" | "gpt", ...}: see acc.h. Throws OptionsError naming the bad key.
std::unique_ptr<Model> make_builtin_model(const char* spec_json);
std::unique_ptr<Model> load_torchscript_model(const std::string& path, const char* options_json);

// The loss named in a spec: "mse", "cross_entropy" or "none".
at::Tensor compute_loss(const std::string& kind, const at::Tensor& output, const at::Tensor& targets);

}  // namespace acc
