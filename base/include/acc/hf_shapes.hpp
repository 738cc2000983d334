// A Hugging Face model folder's JSON, torch-free: config.json checked as transformers reads it and the parameter names
// and shapes of the architectures libacc implements (src/models/hf) from it alone, for `acc estimate-memory` and for
// from_pretrained / from_config before they build anything; and model.safetensors.index.json, for from_pretrained and
// `acc merge-weights`. tests/cpp/test_hf checks the shapes against the models libacc builds.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "acc/builtin_models.hpp"  // ParameterShapes

namespace acc::config {

// Checks config.json's values before anything is built from them (strict JSON first, acc/json.hpp): what transformers'
// configuration classes refuse (a size that is not an integer, rope parameters that are not an object or lack a
// required key, LlamaConfig's hidden_size not a multiple of num_attention_heads, BERT's and GPT-2's too, ...) and what
// it accepts but computes garbage from (a negative epsilon, a rope_theta or rope factor <= 0, a probability outside
// [0, 1], a negative max_position_embeddings). Every size is an integer between 1 and limits::kModelSize, the layers
// (times the experts, for Mixtral) at most limits::kModelBlocks. Only the architectures libacc has are checked (another
// is refused by the caller, naming the list). Throws Error "<source>: 'key' ..." naming the key.
void check_hf_config(std::string_view config_json, const std::string& source);

// AutoModelForCausalLM's class for a config.json without "architectures" (transformers'
// MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, for the families libacc has): "llama" -> "LlamaForCausalLM", ...; nullopt for
// another model_type.
std::optional<std::string> causal_lm_class(const std::string& model_type);

// What the decoder families' configuration classes (LlamaConfig, MistralConfig, Qwen2Config, MixtralConfig) give a
// key config.json leaves out; they differ by family. The one table: the shape check here and the models
// (src/models/hf/decoder.cpp) both read it.
struct DecoderDefaults {
  int64_t kv_heads;  // num_key_value_heads; 0: num_attention_heads
  int64_t max_positions, sliding_window;  // sliding_window 0: none (Qwen2's applies with use_sliding_window only)
  double eps, theta;  // rms_norm_eps, rope_theta
};
DecoderDefaults decoder_defaults(const std::string& architecture);

// The state dict's names and shapes, in module order, of config.json's architectures[0] (or causal_lm_class): LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM, GPT2LMHeadModel, BertForSequenceClassification.
// A tied head is not listed. Checks the config first (check_hf_config); throws Error naming the key or the
// architecture.
ParameterShapes hf_parameter_shapes(const std::string& config_json, const std::string& source = "config.json");

// model.safetensors.index.json, as transformers' save_pretrained writes it: {"metadata": {...}, "weight_map":
// {tensor: shard file}}. Every shard is one plain file name in the model folder (child_path: a FileError naming the
// entry otherwise).
struct HfIndex {
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard path (dir/name), the file's order
  std::vector<std::string> shards;  // the distinct shard paths, sorted
};
// The index text of `dir` (strict JSON); errors are Error "<source>: bad index: ...".
HfIndex parse_hf_index(std::string_view index_json, const std::string& dir, const std::string& source);
// dir/model.safetensors.index.json, read as a regular file of at most limits::kHfIndexBytes (FileError otherwise).
HfIndex read_hf_index(const std::string& dir);

inline constexpr const char* kHfIndexName = "model.safetensors.index.json";

}  // namespace acc::config
