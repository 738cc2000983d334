// The Hugging Face families libacc implements, built from a config.json (see pretrained.hpp for loading).
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bigmodel/offload.hpp"
#include "models/attention.hpp"
#include "models/hf/generate.hpp"
#include "models/model.hpp"
#include "models/parallel_forward.hpp"
#include <acc/json.hpp>

namespace acc::core::hf {

// What from_pretrained read besides the weights, for save_pretrained to write back.
struct Pretrained {
  virtual ~Pretrained() = default;
  std::string config_json;             // config.json as read
  std::string generation_config_json;  // generation_config.json as read ("" when there was none)
  // The checkpoint's tokenizer files (tokenizer.json, tokenizer_config.json, ...; docs/text.md) by path, copied
  // beside the weights by save_pretrained: a checkpoint carries its tokenizer, as a Trainer's does.
  std::vector<std::string> tokenizer_files;
};

// A causal language model, stepped for generation.
class CausalLM {
 public:
  virtual ~CausalLM() = default;
  // Logits [B, T, vocab] of input_ids [B, T] that follow the cache's positions (none without a cache).
  // attention_mask [B, past + T] (undefined: all present); position_ids [B, T] (undefined: past .. past+T-1).
  // Appends the new keys and values to the cache.
  at::Tensor step(const at::Tensor& input_ids, const at::Tensor& attention_mask, const at::Tensor& position_ids,
                  KvCache* cache);
  // The same over this process's slice of the vocabulary when the model is split by tensor parallelism (the
  // whole vocabulary otherwise): step gathers them.
  virtual at::Tensor local_step(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                const at::Tensor& position_ids, KvCache* cache) = 0;
  // The seams parallelism installed in the forward (the whole model's when none).
  virtual const ForwardSplit& forward_seams() const = 0;
  // The output embedding is the input embedding (tie_word_embeddings): no lm_head.weight of its own.
  virtual bool ties_embeddings() const = 0;
  // The input embedding's parameter ("model.embed_tokens.weight"), which a tied head shares.
  virtual std::string input_embedding_name() const = 0;
  // generate's defaults: the model's generation_config.json (or config.json's token ids).
  GenerationOptions generation_defaults;
  // Disk-offloaded weights (from_pretrained with a device map): released after each unit's use.
  std::shared_ptr<bigmodel::DiskOffload> offload;
  void release(const std::string& unit) const {
    if (offload) offload->release(unit);
  }
};

// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM. Parameters are created with
// `options` (dtype, device: meta for no storage), initialised as transformers does unless on meta.
std::unique_ptr<Model> make_decoder(const json::Value& config, const std::string& architecture,
                                    const at::TensorOptions& options, const std::string& source);

// GPT2LMHeadModel (its head tied to wte).
std::unique_ptr<Model> make_gpt2(const json::Value& config, const at::TensorOptions& options,
                                 const std::string& source);
// BertForSequenceClassification: "logits" [B, num_labels] and, with "labels", transformers' loss.
std::unique_ptr<Model> make_bert_classifier(const json::Value& config, const at::TensorOptions& options,
                                            const std::string& source);

// A causal LM's named forward: "input_ids" with "attention_mask", "position_ids", "labels" in; "logits" and, with
// labels, "loss" out. Another name is refused, naming `architecture`. Under context parallelism the logits are this
// rank's tokens' and the loss the whole sequence's token mean.
TensorDict causal_lm_forward(CausalLM& lm, const std::string& architecture, const TensorDict& batch);
// input_ids must be integer token ids [batch, time].
void check_input_ids(const std::string& architecture, const at::Tensor& input_ids);

// transformers' causal-LM loss: float32 logits [B, T, V] against labels [B, T] shifted left, -100 ignored. Under
// tensor parallelism (`split`) the logits are this rank's vocabulary slice [B, T, V / parts].
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels, const ForwardSplit& split);

}  // namespace acc::core::hf
