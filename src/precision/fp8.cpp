#include "precision/fp8.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace acc::core {
namespace {

thread_local bool t_fp8 = false;
constexpr double kE4M3Max = 448.0;

// Per-tensor scale so that amax maps to the largest e4m3 value; never zero.
at::Tensor scale_of(const at::Tensor& t) {
  return (t.detach().abs().amax().to(at::kFloat) / kE4M3Max).clamp_min(1e-12);
}

// Row-major whatever t's layout: cuBLASLt multiplies a row-major by a column-major matrix only, and the layers
// that keep their weight transposed (GPT-2's Conv1D: [in, out]) hand over a transposed view.
at::Tensor quantize(const at::Tensor& t, const at::Tensor& scale) {
  return (t.detach().to(at::kFloat) / scale).clamp(-kE4M3Max, kE4M3Max).to(at::kFloat8_e4m3fn).contiguous();
}

struct Fp8Linear : public torch::autograd::Function<Fp8Linear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = b.defined();
    const auto out_dtype = at::isReducedFloatingType(x.scalar_type()) ? x.scalar_type() : at::kFloat;
    at::Tensor x2 = x.reshape({-1, x.size(-1)});
    at::Tensor sx = scale_of(x2), sw = scale_of(w);
    // mat2 must be column-major: the transpose of the row-major [out, in] weight is.
    at::Tensor y = at::_scaled_mm(quantize(x2, sx), quantize(w, sw).t(), sx, sw, std::nullopt, std::nullopt, out_dtype);
    if (b.defined()) y = y + b.to(out_dtype);
    auto shape = x.sizes().vec();
    shape.back() = w.size(0);
    return y.view(shape);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    at::Tensor g = grads[0].reshape({-1, w.size(0)});
    at::Tensor gx = g.matmul(w.to(g.scalar_type())).view(x.sizes()).to(x.scalar_type());
    at::Tensor gw = g.t().matmul(x.reshape({-1, x.size(-1)}).to(g.scalar_type())).to(w.scalar_type());
    at::Tensor gb = ctx->saved_data["has_bias"].toBool() ? g.sum(0).to(w.scalar_type()) : at::Tensor();
    return {gx, gw, gb};
  }
};

}  // namespace

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t rows = x.numel() / std::max<int64_t>(1, x.size(-1));
  if (x.size(-1) % 16 != 0 || weight.size(0) % 16 != 0 || rows % 16 != 0) return at::linear(x, weight, bias);
  return Fp8Linear::apply(x, weight, bias);
}

Fp8Scope::Fp8Scope() : prev_(t_fp8) { t_fp8 = true; }
Fp8Scope::~Fp8Scope() { t_fp8 = prev_; }
bool Fp8Scope::active() { return t_fp8; }

at::Tensor model_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return t_fp8 ? fp8_linear(x, weight, bias) : at::linear(x, weight, bias);
}

}  // namespace acc::core
