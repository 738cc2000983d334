// transformers' generate for the causal language models: batched, with a key/value cache, greedy or
// sampled (temperature, top-k, top-p), a repetition penalty, stop tokens and a token budget.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace acc::core::hf {

struct GenerationOptions {
  int64_t max_new_tokens = 20;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;  // GenerationConfig's defaults; used when sampling
  double top_p = 1.0;
  double repetition_penalty = 1.0;
  std::vector<int64_t> eos_token_ids;  // a sequence that emits one of these is finished
  int64_t pad_token_id = 0;            // what finished sequences get after that
  std::optional<uint64_t> seed;        // sampling draws from a generator of its own seeded with it
  // Where the token ids came from, for errors: "generation options", or the model's generation_config.json or
  // config.json path.
  std::string eos_source = "the default", pad_source = "the default";
};

// Parses {"max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "repetition_penalty",
// "eos_token_id" (an id or a list), "pad_token_id", "seed"} over `defaults` (the model's own
// generation_config.json). Throws OptionsError naming a bad key.
GenerationOptions parse_generation_options(const char* json, GenerationOptions defaults);

// Called after every step with the B new tokens; return false to stop there.
using TokenCallback = std::function<bool(const at::Tensor& tokens)>;

// Continues input_ids [B, P] (left-padded where attention_mask [B, P] has zeros; undefined: none) and returns
// the whole sequences [B, P + n], n <= max_new_tokens (fewer when every sequence has finished or the callback
// stopped). Throws std::invalid_argument for a model that is not a causal LM or bad shapes or mask values, and
// OptionsError for a pad or eos token id outside the vocabulary (naming the key and where it came from).
at::Tensor generate(Model& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                    const GenerationOptions& options, const TokenCallback& on_tokens = {});
// The same with the options as JSON (parse_generation_options over the model's own generation_config.json): what
// the C and C++ APIs call.
at::Tensor generate(Model& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                    const char* options_json, const TokenCallback& on_tokens = {});

}  // namespace acc::core::hf
