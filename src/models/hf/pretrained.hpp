// Hugging Face checkpoints: a directory with config.json and model.safetensors (or shards listed by
// model.safetensors.index.json), as transformers' save_pretrained writes them.
#pragma once
#include <memory>
#include <string>

#include "models/model.hpp"

namespace acc::core::hf {

// transformers' from_pretrained: reads config.json, builds the architecture it names on the meta device (no
// weight memory), then loads every tensor through memory maps into storage of the requested dtype.
// options_json: {"dtype": "auto" | "float32" | "bfloat16" | "float16"}; "auto" (the default, as in
// transformers 5) is the dtype config.json records, float32 when it records none. Every name and shape must
// match: the error lists what is missing, unexpected and mismatched. The model is returned in eval mode.
std::unique_ptr<Model> from_pretrained(const std::string& dir, const char* options_json);

// transformers' from_config: the architecture a config.json text names, with fresh weights initialised as
// transformers does (normal(0, initializer_range), zero biases, unit norms) from the CPU generator. options_json:
// from_pretrained's, and "device": "meta" for Accelerate's init_empty_weights (names and shapes, no memory).
// save_pretrained writes it back with its config.
std::unique_ptr<Model> from_config(const std::string& config_json, const char* options_json);

// The architectures from_pretrained knows, for messages: "LlamaForCausalLM, MistralForCausalLM, ...".
std::string known_architectures();

}  // namespace acc::core::hf
