// The built-in model families' spec (the JSON acc_model_create takes: {"type": "mlp", ...} or {"type": "gpt", ...})
// and their parameter names and shapes. Torch-free, so that libacc (which builds the modules) and `acc
// estimate-memory` (which only counts them) read one definition.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "acc/config.hpp"  // Error

namespace acc::config {

// {"type": "mlp", "sizes": [in, hidden..., out], "activation": "relu", "loss": "mse"}: linear layers with the
// activation between them.
struct MlpSpec {
  std::vector<int64_t> sizes;        // required; at least [in, out], every entry >= 1
  std::string activation = "relu";   // relu | gelu | tanh
  std::string loss = "mse";          // mse | cross_entropy | none
};

// {"type": "gpt", "vocab_size", "block_size", "n_layer", "n_head", "n_embd", "dropout": 0, "bias": true}: a GPT-2
// decoder with Hugging Face's GPT-2 parameter names and the LM head tied to the token embedding.
struct GptSpec {
  int64_t vocab_size = 0, block_size = 0, n_layer = 0, n_head = 0, n_embd = 0;  // required, >= 1
  double dropout = 0;  // [0, 1)
  bool bias = true;    // false: no bias in the linear layers and layer norms
};

struct BuiltinSpec {
  std::string type;  // "mlp" or "gpt": the one of mlp / gpt that is set
  std::optional<MlpSpec> mlp;
  std::optional<GptSpec> gpt;
  std::string device = "cpu";  // "device": cpu | meta (shapes without storage, for big-model work)
};

// Parses and validates a spec. Empty text means {} (and fails: 'type' is required). Throws Error naming the key:
// "gpt spec: 'n_embd' (30) must be a multiple of 'n_head' (4)", "mlp spec: unknown key 'size' (did you mean
// 'sizes'?) ...", "model spec: malformed JSON at line 1, column 9: ...". A null value means "not given".
BuiltinSpec parse_builtin_spec(const std::string& json);

// The model's parameters, named as its state dict names them, in module order.
// mlp [s0, ..., sn]: layers.{i}.weight [s(i+1), s(i)], layers.{i}.bias [s(i+1)].
// gpt (C = n_embd): transformer.wte.weight [V, C], transformer.wpe.weight [T, C], per layer transformer.h.{l}.:
// ln_1.{weight,bias} [C], attn.c_attn.weight [C, 3C] + bias [3C], attn.c_proj.weight [C, C] + bias [C],
// ln_2.{weight,bias} [C], mlp.c_fc.weight [C, 4C] + bias [4C], mlp.c_proj.weight [4C, C] + bias [C]; then
// transformer.ln_f.{weight,bias} [C]. Linear weights are GPT-2's Conv1D layout [in, out]. Without bias no .bias
// entries. lm_head.weight is tied to transformer.wte.weight and not listed.
using ParameterShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;
ParameterShapes builtin_parameter_shapes(const BuiltinSpec& spec);

}  // namespace acc::config
