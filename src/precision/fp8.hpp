// FP8 matrix multiplies for mixed_precision "fp8": the forward GEMMs of linear layers run in
// float8_e4m3fn with dynamic per-tensor scales (amax / 448, "current scaling") through at::_scaled_mm;
// the backward GEMMs run in the activations' precision. Other ops run under bf16 autocast.
#pragma once
#include <ATen/core/Tensor.h>

namespace acc::core {

// y = x W^T + b with both GEMM operands quantized to FP8. Differentiable. Shapes whose GEMM dims are
// not multiples of 16 (a constraint of the FP8 kernels) fall back to a plain linear.
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// While a scope is alive on this thread, the built-in models' linear layers use fp8_linear.
class Fp8Scope {
 public:
  Fp8Scope();
  ~Fp8Scope();
  Fp8Scope(const Fp8Scope&) = delete;
  Fp8Scope& operator=(const Fp8Scope&) = delete;
  static bool active();

 private:
  bool prev_;
};

// The linear layer of the built-in models: fp8_linear inside an Fp8Scope, at::linear otherwise.
at::Tensor model_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

}  // namespace acc::core
