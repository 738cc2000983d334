#include "precision/precision.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

namespace acc::core {

AutocastScope::AutocastScope(c10::DeviceType device, c10::ScalarType dtype, bool enabled, bool cache_enabled)
    : device_(device),
      prev_enabled_(at::autocast::is_autocast_enabled(device)),
      prev_cache_(at::autocast::is_autocast_cache_enabled()),
      prev_dtype_(at::autocast::get_autocast_dtype(device)) {
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_cache_enabled(cache_enabled);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_, prev_dtype_);
  at::autocast::set_autocast_cache_enabled(prev_cache_);
}

GradScaler::GradScaler(GradScalerOptions opts)
    : opts_(opts), scale_(at::full({1}, opts.init_scale, at::kFloat)), growth_tracker_(at::zeros({1}, at::kInt)) {}

at::Tensor GradScaler::scale_loss(const at::Tensor& loss) const {
  return enabled() ? loss * scale_.to(loss.device()).to(loss.scalar_type()) : loss;
}

bool GradScaler::unscale(const std::vector<at::Tensor>& params) {
  if (!enabled()) return false;
  // As GradScaler.unscale_: the reciprocal in double, then float; one check per device.
  at::Tensor found = at::zeros({1}, at::kFloat);
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return false;
  const c10::Device dev = grads.front().device();
  at::Tensor inv = scale_.to(at::kDouble).reciprocal().to(at::kFloat).to(dev);
  at::Tensor found_dev = found.to(dev);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_dev, inv);
  return found_dev.item<float>() > 0;
}

void GradScaler::update(bool found_inf) {
  if (!enabled()) return;
  at::Tensor found = at::full({1}, found_inf ? 1.0 : 0.0, at::kFloat);
  at::_amp_update_scale_(scale_, growth_tracker_, found, opts_.growth_factor, opts_.backoff_factor,
                         opts_.growth_interval);
}

double GradScaler::scale() const { return scale_.item<double>(); }

int64_t GradScaler::growth_tracker() const { return growth_tracker_.item<int64_t>(); }

void GradScaler::load(double scale, int64_t growth_tracker) {
  if (!(scale > 0))
    throw std::invalid_argument("the gradient scaler's scale must be > 0; got " + std::to_string(scale));
  scale_.fill_(scale);
  growth_tracker_.fill_(growth_tracker);
}

}  // namespace acc::core
