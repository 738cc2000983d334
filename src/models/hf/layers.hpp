// The layers of the Hugging Face families, with transformers' parameter names and initialisation
// (`_init_weights`: normal(0, initializer_range) weights, zero biases, unit norms), besides those they share with the
// built-in ones (Conv1D, Embedding, LayerNorm, the activations: models/transformer_layers.hpp), and their masks.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <optional>
#include <string>

#include "models/attention.hpp"
#include "models/layers.hpp"
#include "models/lora.hpp"
#include "models/parallel_forward.hpp"
#include "models/transformer_layers.hpp"
#include <acc/json.hpp>

namespace acc::core::hf {

// nn.Linear: y = x W^T + b, W [out, in]; takes a LoRA adapter (models/lora.hpp) and a tensor-parallel split.
struct Linear : InitModule, lora::Host, SplittableLayer {
  Linear(int64_t in, int64_t out, bool bias, double std, const at::TensorOptions& o) : std_(std) {
    register_parameter("weight", at::empty({out, in}, o));
    if (bias) register_parameter("bias", at::empty({out}, o));
  }
  void reset() override {
    param("weight").normal_(0, std_);
    if (at::Tensor b = bias_or_none(); b.defined()) b.zero_();
  }
  at::Tensor forward(const at::Tensor& x) {
    if (splits_input()) return rowwise_output(at::linear(x, param("weight")), bias_or_none());
    return with_lora(x, at::linear(x, param("weight"), bias_or_none()));
  }
  torch::nn::Module& host_module() override { return *this; }
  at::Tensor host_weight() override { return param("weight"); }
  int64_t output_dim() const override { return 0; }
  double std_;
};

// The padding_idx transformers gives a family's token embedding, nn.Embedding(vocab, hidden, config.pad_token_id):
// config.json's pad_token_id (`absent` where the key is missing: the config class's default, -1 for None), a
// negative one counted from the end as nn.Embedding does; -1 for null. One outside [-vocab, vocab) is
// std::invalid_argument naming `source` (nn.Embedding refuses it).
int64_t padding_idx(const json::Value& config, int64_t vocab, int64_t absent, const std::string& source);

// LlamaRMSNorm: normalised in float32, scaled in the input's dtype.
struct RMSNorm : InitModule {
  RMSNorm(int64_t n, double eps, const at::TensorOptions& o) : eps_(eps) {
    register_parameter("weight", at::empty({n}, o));
  }
  void reset() override { param("weight").fill_(1); }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = x.to(at::kFloat);
    if (!c10::GradMode::is_enabled()) {  // the same arithmetic, fewer temporaries
      at::Tensor scale = h.square().mean(-1, /*keepdim=*/true).add_(eps_).rsqrt_();
      at::Tensor y = (h.data_ptr() == x.data_ptr() ? h * scale : h.mul_(scale)).to(x.scalar_type());
      return y.mul_(param("weight"));
    }
    h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
    return param("weight") * h.to(x.scalar_type());
  }
  double eps_;
};

// std::invalid_argument naming an activation (activation(), models/transformer_layers.hpp) that libacc lacks.
// `key`: the config.json key that named it (GPT-2's is activation_function).
void check_activation(const std::string& name, const std::string& source, const char* key = "hidden_act");
// The class of ACT2FN[name] ("SiLUActivation"): the name of its weightless module in module trees.
std::string activation_class(const std::string& name);

// The additive attention mask of transformers' eager attention, [B, 1, T, past + T]: 0 where query i
// (at absolute position past + i) may see key j (j <= past + i, attention_mask[b, j] == 1 and, with a
// sliding window w > 0, past + i - j < w), the dtype's lowest value elsewhere. attention_mask [B, past + T]
// may be undefined (every key present).
// With `sequences` [B, T] (packed_sequences: past 0), query i sees key j only within its own sequence too.
at::Tensor causal_mask(const at::Tensor& attention_mask, int64_t batch, int64_t past, int64_t t, int64_t window,
                       const at::TensorOptions& o, const at::Tensor& sequences = {});

// transformers 5's find_packed_sequence_indices: position ids [B, T] that do not go up by one start a new sequence
// (TRL's padding-free packing restarts them at 0 for every sample); gives each token's sequence index [B, T], or an
// undefined tensor when every row is one sequence. transformers looks for them only when the forward has position
// ids, no attention_mask and no cache, and then no token attends to another sequence's (one host sync).
at::Tensor packed_sequences(const at::Tensor& position_ids);

// An attention_mask (undefined: none) holds only 0 (padding) and 1 (a token), as transformers' do: a 2 or a -1
// means something different to each implementation, so it is refused (std::invalid_argument naming
// attention_mask and the value). Returns whether the mask holds a 0; one host sync for both.
bool check_attention_mask(const at::Tensor& attention_mask);

// The masking of a decoder's attention (models/attention.hpp): the mask above, or none when nothing is padded and no
// window applies.
Masking decoder_masking(const at::Tensor& attention_mask, int64_t batch, int64_t past, int64_t t, int64_t window,
                        const at::TensorOptions& o, const at::Tensor& sequences = {});

// An encoder's additive mask, [B, 1, 1, T]: 0 for the keys attention_mask [B, T] keeps, the lowest value
// elsewhere (every query sees every present key).
at::Tensor padding_mask(const at::Tensor& attention_mask, const at::TensorOptions& o);

}  // namespace acc::core::hf
