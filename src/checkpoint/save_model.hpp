// Accelerate's Accelerator.save_model and transformers' save_pretrained for a prepared model: the whole model
// gathered on every process, written by the main process in Hugging Face's layout (formats/hf_weights.hpp).
#pragma once
#include <string>

#include <ATen/core/Tensor.h>

namespace acc::core {

struct PreparedModel;

// Accelerator.save_model: every process calls it (gathering a sharded model is collective); the main process
// writes, the others wait at a barrier; an error on any process fails the call on every process.
// max_shard_size empty: Accelerate's default "10GB".
void save_model(PreparedModel& model, const std::string& dir, const std::string& max_shard_size);

// transformers' save_pretrained for a model from hf::from_pretrained: save_model's files plus config.json (its
// "dtype" set to the weights') and generation_config.json, so that from_pretrained (libacc's or transformers')
// loads the directory. std::invalid_argument for another model.
void save_pretrained(PreparedModel& model, const std::string& dir, const std::string& max_shard_size);

// Accelerate's get_state_dict for one tensor, and the model's state as one safetensors file, for any model: the
// model's own tensors, or, under ZeRO-3 / FSDP (or a mixed-precision policy's float32 masters behind compute-dtype
// copies), gathered from the shards, as save_model writes them: then a collective
// (every process calls it, with the same arguments); save_state_file's main process writes, the others wait.
// load_state_file loads a file every process reads (a collective under ZeRO-3 / FSDP).
at::Tensor state_tensor(const PreparedModel& model, const std::string& name);
void save_state_file(const PreparedModel& model, const std::string& path);
void load_state_file(PreparedModel& model, const std::string& path);

}  // namespace acc::core
