// peft's adapter operations on a model of libacc (models/lora.hpp has LoRA itself): get_peft_model, from_pretrained /
// load_adapter, save_pretrained of the adapter (collective for a prepared model, as save_model), merge_and_unload.
#pragma once
#include <string>

#include "models/lora.hpp"

namespace acc::core {

class Model;
struct PreparedModel;

// What peft reads from the model besides its modules: a transformers model's config.json (model_type, class), a
// tied head.
lora::ModelInfo lora_model_info(const Model& model);

// The module tree of a model (UnsupportedError for a TorchScript model: LoRA needs modules).
torch::nn::Module& lora_root(Model& model);

// get_peft_model(model, LoraConfig(**config_json)): see lora::plan and lora::apply (A drawn from the CPU
// generator). StateError for a prepared model or one with an adapter.
void add_lora(PreparedModel& model, const char* config_json, const lora::HostOf& host_of = lora::default_host_of);

// PeftModel.from_pretrained / load_adapter: dir's adapter_config.json and adapter_model.safetensors. options_json:
// {"is_trainable": false}. Every tensor is checked before anything changes (lora::check_file_tensors).
void load_adapter(PreparedModel& model, const std::string& dir, const char* options_json,
                  const lora::HostOf& host_of = lora::default_host_of);

// PeftModel.save_pretrained: adapter_config.json and adapter_model.safetensors ({"format": "pt"}) into dir (made
// when missing), each atomically; nothing else in dir is touched. Collective for a prepared model (a sharded one
// gathers); the main process writes.
void save_adapter(PreparedModel& model, const std::string& dir, const lora::HostOf& host_of = lora::default_host_of);

// merge_and_unload (lora::merge). StateError for a prepared model or one without an adapter.
void merge_adapter(PreparedModel& model, const lora::HostOf& host_of = lora::default_host_of);

}  // namespace acc::core
