// The parameter names and shapes of the Hugging Face architectures libacc implements (src/models/hf), from a
// config.json alone. Torch-free, for `acc estimate-memory` on a model's config; tests/cpp/test_hf checks them
// against the models libacc builds.
#pragma once
#include <string>

#include "acc/builtin_models.hpp"  // ParameterShapes

namespace acc::config {

// The state dict's names and shapes, in module order, of config.json's architectures[0]: LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM, GPT2LMHeadModel, BertForSequenceClassification.
// A tied head is not listed. Throws Error naming the key or the architecture.
ParameterShapes hf_parameter_shapes(const std::string& config_json);

}  // namespace acc::config
