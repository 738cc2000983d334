// What the attention of the transformer families shares, built-in and Hugging Face: SDPA under a masking (the
// Hugging Face decoders make theirs from attention_mask, models/hf/layers.hpp; the built-in GPT's is causal) and the
// key/value cache of generation.
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <utility>
#include <vector>

namespace acc::core {

// What a decoder's attention needs: an additive mask [B, 1, T, past + T] (hf::causal_mask), or none when nothing is
// padded and no window applies (then `causal` says whether SDPA's own causal masking is needed: several new tokens
// and no past), which lets SDPA take its fused path and saves building [B, 1, T, past + T] masks.
struct Masking {
  at::Tensor mask;
  bool causal = false;
  at::Tensor empty;  // [B, 1, T, 1]: the queries that may see no key (left padding); undefined without padding
  std::optional<at::Tensor> optional() const { return mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt; }
  // SDPA under this masking. A query that may see no key gets an output of zero and no gradient through it, as
  // transformers' default attention, sdpa, gives it (torch's safe softmax): the additive mask alone makes its row
  // uniform over every key (eager attention's answer), and SDPA's backward there is the derivative of neither
  // (docs/hf-models.md, "Fully masked rows").
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout,
                       std::optional<double> scale, bool gqa) const {
    at::Tensor y = at::scaled_dot_product_attention(q, k, v, optional(), dropout, causal, scale, gqa);
    return empty.defined() ? y.masked_fill(empty, 0) : y;
  }
};

// The keys and values of every attention layer for the positions seen so far (transformers' DynamicCache).
struct KvCache {
  std::vector<at::Tensor> keys, values;  // per layer, [batch, kv_heads, length, head_dim]
  int64_t length = 0;
  // Appends a step's keys and values [batch, kv_heads, new, head_dim] of `layer` and returns all of them, the
  // past first.
  std::pair<at::Tensor, at::Tensor> append(size_t layer, const at::Tensor& k, const at::Tensor& v) {
    if (keys.size() <= layer) keys.resize(layer + 1), values.resize(layer + 1);
    keys[layer] = keys[layer].defined() ? at::cat({keys[layer], k}, 2) : k;
    values[layer] = values[layer].defined() ? at::cat({values[layer], v}, 2) : v;
    return {keys[layer], values[layer]};
  }
};

}  // namespace acc::core
