// Checkpoints: save_state, load_state, register_for_checkpointing.
#include "checkpoint/save_model.hpp"
#include "checkpoint/state.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "util/errors.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;

extern "C" {

acc_status acc_save_state(acc_accelerator* acc, const char* dir) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc::core::save_state(*acc->impl, dir ? dir : "");
  });
}

acc_status acc_load_state(acc_accelerator* acc, const char* dir) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc::core::load_state(*acc->impl, dir ? dir : "");
  });
}

acc_status acc_resume_from_checkpoint(acc_accelerator* acc, int32_t* resumed) noexcept {
  if (resumed) *resumed = 0;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(resumed, "resumed");
    *resumed = acc::core::resume_from_checkpoint(*acc->impl).empty() ? 0 : 1;
  });
}

acc_status acc_register_for_checkpointing(acc_accelerator* acc, acc_checkpoint_save_fn save,
                                          acc_checkpoint_load_fn load, void* user_data,
                                          void (*free_user_data)(void*)) noexcept {
  // The user data is released exactly once: with the accelerator, or right here if registering fails.
  std::shared_ptr<acc::capi::UserData> ud(new acc::capi::UserData{user_data, free_user_data});
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(save, "save");
    need(load, "load");
    acc::core::Accelerator::Checkpointable object;
    object.save = [save, ud] {
      acc_bytes_list out;
      out.live.lend();
      acc_status st = save(ud->data, &out);
      if (out.live.destroy_refused())
        throw acc::core::CallbackError("checkpoint save callback called acc_bytes_list_destroy on the list libacc "
                                       "lent it (append to it, do not destroy it)");
      if (st != ACC_OK) throw acc::core::CallbackError("checkpoint save callback returned " + std::to_string(st));
      std::string bytes;
      for (const auto& item : out.items) bytes += item;
      return bytes;
    };
    object.load = [load, ud](const std::string& bytes) {
      acc_status st = load(ud->data, bytes.data(), bytes.size());
      if (st != ACC_OK) throw acc::core::CallbackError("checkpoint load callback returned " + std::to_string(st));
    };
    acc->impl->register_for_checkpointing(std::move(object));
  });
}

}  // extern "C"

extern "C" acc_status acc_save_model(const acc_model* model, const char* dir, const char* max_shard_size) noexcept {
  return guarded(__func__, [&] {
    need(model, "model");
    acc::core::save_model(*model->slot, need(dir, "dir"), max_shard_size ? max_shard_size : "");
  });
}

extern "C" acc_status acc_model_save_pretrained(const acc_model* model, const char* dir,
                                                const char* max_shard_size) noexcept {
  return guarded(__func__, [&] {
    need(model, "model");
    acc::core::save_pretrained(*model->slot, need(dir, "dir"), max_shard_size ? max_shard_size : "");
  });
}
