// Accelerate's Accelerator.save_model and transformers' save_pretrained for a prepared model: the whole model
// gathered on every process, written by the main process in Hugging Face's layout (formats/hf_weights.hpp).
#pragma once
#include <string>

namespace acc::core {

struct ModelSlot;

// Accelerator.save_model: every process calls it (gathering a sharded model is collective); the main process
// writes, the others wait at a barrier; an error on any process fails the call on every process.
// max_shard_size empty: Accelerate's default "10GB".
void save_model(ModelSlot& model, const std::string& dir, const std::string& max_shard_size);

// transformers' save_pretrained for a model from hf::from_pretrained: save_model's files plus config.json (its
// "dtype" set to the weights') and generation_config.json, so that from_pretrained (libacc's or transformers')
// loads the directory. std::invalid_argument for another model.
void save_pretrained(ModelSlot& model, const std::string& dir, const std::string& max_shard_size);

}  // namespace acc::core
