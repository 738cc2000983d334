// Mixed precision: an autocast scope around forward and a dynamic loss scaler for fp16, both on
// ATen's own machinery (autocast dispatch keys, the _amp_* kernels), on CPU and GPU alike.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <vector>

namespace acc::core {

// torch.autocast as an RAII guard: saves the thread's autocast state, enables `dtype` for `device`,
// and on exit clears the cast cache (outermost scope only) and restores what was there.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype, bool enabled, bool cache_enabled);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool prev_enabled_, prev_cache_;
  c10::ScalarType prev_dtype_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

// torch.amp.GradScaler: scale the loss, unscale grads (finding inf/nan), skip the step on overflow,
// and grow or back off the scale.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions opts);
  bool enabled() const { return opts_.enabled; }
  at::Tensor scale_loss(const at::Tensor& loss) const;
  // Divides grads by the scale in place; returns true when any was inf or nan.
  bool unscale(const std::vector<at::Tensor>& params);
  void update(bool found_inf);
  double scale() const;
  int64_t growth_tracker() const;
  void load(double scale, int64_t growth_tracker);  // a checkpoint's values

 private:
  GradScalerOptions opts_;
  at::Tensor scale_;           // float32 [1]
  at::Tensor growth_tracker_;  // int32 [1]
};

}  // namespace acc::core
