#include "models/hf/layers.hpp"

#include <limits>
#include <stdexcept>

namespace acc::core::hf {

namespace {
// torch.finfo(dtype).min
double lowest(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case at::kDouble: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

// The names libacc has and the class transformers' ACT2FN makes of each.
const char* const kActivations[][2] = {{"silu", "SiLUActivation"},
                                       {"swish", "SiLU"},
                                       {"gelu", "GELUActivation"},
                                       {"gelu_new", "NewGELUActivation"},
                                       {"gelu_pytorch_tanh", "GELUTanh"},
                                       {"gelu_fast", "FastGELUActivation"},
                                       {"relu", "ReLU"}};
}  // namespace

void check_activation(const std::string& name, const std::string& source, const char* key) {
  for (const auto& a : kActivations)
    if (name == a[0]) return;
  std::string list;
  for (const auto& a : kActivations) list += (list.empty() ? "" : ", ") + std::string(a[0]);
  throw std::invalid_argument(source + ": '" + key + "' '" + name + "' is not one libacc has (" + list + ")");
}

std::string activation_class(const std::string& name) {
  for (const auto& a : kActivations)
    if (name == a[0]) return a[1];
  throw std::invalid_argument("hidden_act '" + name + "' is not one libacc has");
}

int64_t padding_idx(const json::Value& config, int64_t vocab, int64_t absent, const std::string& source) {
  if (!config.has("pad_token_id")) return absent;
  if (!config.has_value("pad_token_id")) return -1;
  const int64_t id = config.get_int("pad_token_id");
  if (id < -vocab || id >= vocab)
    throw std::invalid_argument(source + ": 'pad_token_id' " + std::to_string(id) + " is outside the vocabulary (" +
                                std::to_string(vocab) + " tokens), so it cannot be the embedding's padding_idx");
  return id < 0 ? id + vocab : id;
}

at::Tensor packed_sequences(const at::Tensor& position_ids) {
  if (!position_ids.defined() || position_ids.dim() != 2 || position_ids.size(1) < 2) return {};
  const at::Tensor starts = position_ids.slice(1, 1).sub(position_ids.slice(1, 0, -1)).ne(1);
  if (!starts.any().item<bool>()) return {};
  return at::cat({at::zeros({position_ids.size(0), 1}, position_ids.options().dtype(at::kLong)),
                  starts.to(at::kLong).cumsum(1)},
                 1);
}

at::Tensor causal_mask(const at::Tensor& attention_mask, int64_t batch, int64_t past, int64_t t, int64_t window,
                       const at::TensorOptions& o, const at::Tensor& sequences) {
  const auto idx = at::TensorOptions().dtype(at::kLong).device(o.device());
  at::Tensor q = at::arange(past, past + t, idx).view({t, 1});
  at::Tensor k = at::arange(past + t, idx).view({1, past + t});
  at::Tensor allowed = k.le(q);
  if (window > 0) allowed = allowed.logical_and(q.sub(k).lt(window));
  allowed = allowed.view({1, 1, t, past + t}).expand({batch, 1, t, past + t});
  if (sequences.defined()) {
    const at::Tensor s = sequences.to(o.device());
    allowed = allowed.logical_and(s.view({batch, 1, t, 1}).eq(s.view({batch, 1, 1, t})));
  }
  if (attention_mask.defined()) {
    if (attention_mask.dim() != 2 || attention_mask.size(0) != batch || attention_mask.size(1) != past + t)
      throw std::invalid_argument("attention_mask has shape " + c10::str(attention_mask.sizes()) + "; expected [" +
                                  std::to_string(batch) + ", " + std::to_string(past + t) + "]");
    allowed = allowed.logical_and(attention_mask.to(o.device()).ne(0).view({batch, 1, 1, past + t}));
  }
  return at::where(allowed, at::zeros({}, o), at::full({}, lowest(o.dtype().toScalarType()), o));
}

bool check_attention_mask(const at::Tensor& attention_mask) {
  if (!attention_mask.defined()) return false;
  const at::Tensor zero = attention_mask.eq(0);
  if (attention_mask.scalar_type() == at::kBool) return zero.any().item<bool>();
  const at::Tensor valid = zero.logical_or(attention_mask.eq(1));
  const at::Tensor flags = at::stack({valid.all(), zero.any()}).cpu();
  if (!flags[0].item<bool>())
    throw std::invalid_argument("attention_mask must hold only 0 (padding) and 1 (a token); it holds " +
                                c10::str(attention_mask.masked_select(valid.logical_not())[0].item()));
  return flags[1].item<bool>();
}

Masking decoder_masking(const at::Tensor& attention_mask, int64_t batch, int64_t past, int64_t t, int64_t window,
                        const at::TensorOptions& o, const at::Tensor& sequences) {
  if (attention_mask.defined() &&
      (attention_mask.dim() != 2 || attention_mask.size(0) != batch || attention_mask.size(1) != past + t))
    throw std::invalid_argument("attention_mask has shape " + c10::str(attention_mask.sizes()) + "; expected [" +
                                std::to_string(batch) + ", " + std::to_string(past + t) + "]");
  const bool padded = check_attention_mask(attention_mask);
  const bool windowed = window > 0 && past + t > window;
  if (!padded && !windowed && !sequences.defined() && !(past > 0 && t > 1))
    return {at::Tensor(), past == 0 && t > 1, at::Tensor()};
  at::Tensor mask = causal_mask(attention_mask, batch, past, t, window, o, sequences);
  // Without padding every query sees itself.
  at::Tensor empty = padded ? mask.eq(lowest(o.dtype().toScalarType())).all(-1, /*keepdim=*/true) : at::Tensor();
  return {mask, false, empty};
}

at::Tensor padding_mask(const at::Tensor& attention_mask, const at::TensorOptions& o) {
  const int64_t B = attention_mask.size(0), T = attention_mask.size(1);
  return at::where(attention_mask.to(o.device()).ne(0).view({B, 1, 1, T}), at::zeros({}, o),
                   at::full({}, lowest(o.dtype().toScalarType()), o));
}

}  // namespace acc::core::hf
