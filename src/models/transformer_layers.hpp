// The layers the transformer families share, built-in (models/builtin.cpp) and Hugging Face (models/hf/): GPT-2's
// Conv1D, nn.Embedding, nn.LayerNorm and the activations of transformers' ACT2FN, with transformers' parameter names
// and initialisation (`_init_weights`: normal(0, std) weights, zero biases, unit norms).
#pragma once
#include <ATen/ATen.h>

#include <string>

#include "models/layers.hpp"
#include "models/lora.hpp"
#include "models/parallel_forward.hpp"
#include "precision/fp8.hpp"

namespace acc::core {

// transformers' Conv1D: y = x W + b with W [in, out]; takes a LoRA adapter (fan_in_fan_out, as peft's) and a
// tensor-parallel split (a transposed nn.Linear: its output features are dim 1). `fp8`: its GEMM is the built-in
// models' model_linear (FP8 under mixed_precision "fp8", precision/fp8.hpp), at::linear otherwise.
struct Conv1D : InitModule, lora::Host, SplittableLayer {
  Conv1D(int64_t in, int64_t out, bool bias, double std, bool fp8, const at::TensorOptions& o) : std_(std), fp8_(fp8) {
    register_parameter("weight", at::empty({in, out}, o));
    if (bias) register_parameter("bias", at::empty({out}, o));
  }
  void reset() override {
    param("weight").normal_(0, std_);
    if (at::Tensor b = bias_or_none(); b.defined()) b.zero_();
  }
  at::Tensor forward(const at::Tensor& x) {
    if (splits_input()) return rowwise_output(linear(x, param("weight").t(), at::Tensor()), bias_or_none());
    return with_lora(x, linear(x, param("weight").t(), bias_or_none()));
  }
  torch::nn::Module& host_module() override { return *this; }
  at::Tensor host_weight() override { return param("weight"); }
  bool fan_in_fan_out() const override { return true; }
  int64_t output_dim() const override { return 1; }
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
    return fp8_ ? model_linear(x, w, b) : at::linear(x, w, b);
  }
  double std_;
  bool fp8_;
};

// nn.Embedding; `padding_idx` (in [0, n), -1: none) is its padding_idx: that row gets no gradient and starts at zero.
struct Embedding : InitModule, SplittableLayer {
  Embedding(int64_t n, int64_t dim, double std, const at::TensorOptions& o, int64_t padding_idx = -1)
      : std_(std), padding_idx_(padding_idx) {
    register_parameter("weight", at::empty({n, dim}, o));
  }
  void reset() override {
    at::Tensor& w = param("weight");
    w.normal_(0, std_);
    if (const int64_t row = local_row(padding_idx_, w.size(0)); row >= 0) w[row].zero_();
  }
  at::Tensor forward(const at::Tensor& ids) { return embed(param("weight"), ids, padding_idx_); }
  int64_t output_dim() const override { return 0; }
  bool is_embedding() const override { return true; }
  double std_;
  int64_t padding_idx_;
};

// nn.LayerNorm; without `bias` (the built-in GPT's "bias": false) its bias is None.
struct LayerNorm : InitModule {
  LayerNorm(int64_t n, double eps, const at::TensorOptions& o, bool bias = true)
      : InitModule("LayerNorm"), n_(n), eps_(eps) {
    register_parameter("weight", at::empty({n}, o));
    if (bias) register_parameter("bias", at::empty({n}, o));
  }
  void reset() override {
    param("weight").fill_(1);
    if (at::Tensor b = bias_or_none(); b.defined()) b.zero_();
  }
  at::Tensor forward(const at::Tensor& x) { return at::layer_norm(x, {n_}, param("weight"), bias_or_none(), eps_); }
  int64_t n_;
  double eps_;
};

// transformers' ACT2FN for the names these families use (hf::check_activation lists them), and the built-in MLP's
// "tanh".
inline at::Tensor activation(const std::string& name, const at::Tensor& x) {
  if (name == "silu" || name == "swish") return at::silu(x);
  if (name == "gelu") return at::gelu(x);
  if (name == "relu") return at::relu(x);
  if (name == "tanh") return at::tanh(x);
  return at::gelu(x, "tanh");  // gelu_new, gelu_pytorch_tanh, gelu_fast: the tanh approximation
}

}  // namespace acc::core
