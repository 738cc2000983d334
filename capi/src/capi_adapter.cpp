// Adapters (LoRA, as Hugging Face peft): handles and strings in, checkpoint/adapter.hpp does the work.
#include "checkpoint/adapter.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "util/errors.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;

namespace {

// The tree changed (lora_A / lora_B came or went): acc_model_state_get's borrowed names follow it.
void renew_state_names(acc_model* model) {
  std::vector<std::string> names;
  for (auto& [n, t] : model->slot->model->state()) names.push_back(n);
  model->state_names = std::move(names);
}

}  // namespace

extern "C" {

acc_status acc_model_add_lora(acc_model* model, const char* lora_config_json) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    acc::core::add_lora(*model->slot, need(lora_config_json, "lora_config_json"));
    renew_state_names(model);
  });
}

acc_status acc_model_load_adapter(acc_model* model, const char* dir, const char* options_json) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    acc::core::load_adapter(*model->slot, need(dir, "dir"), options_json);
    renew_state_names(model);
  });
}

acc_status acc_model_save_adapter(const acc_model* model, const char* dir) noexcept {
  return guarded(__func__, [&] { acc::core::save_adapter(*need(model, "model")->slot, need(dir, "dir")); });
}

acc_status acc_model_merge_adapter(acc_model* model) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    acc::core::merge_adapter(*model->slot);
    renew_state_names(model);
  });
}

}  // extern "C"
