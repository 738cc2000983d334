// Gradient accumulation, mixed precision, process control, seeds and batch-size search.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "guard.hpp"
#include "handles.hpp"
#include "util/errors.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;

extern "C" {

acc_status acc_accumulate_begin(acc_accelerator* acc, acc_model* model) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->accumulate_begin(need(model, "model")->slot);
  });
}

acc_status acc_accumulate_end(acc_accelerator* acc, acc_model* model) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->accumulate_end(need(model, "model")->slot);
  });
}

acc_status acc_sync_gradients(const acc_accelerator* acc, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__,
                 [&] { *need(out, "out") = need(acc, "accelerator")->impl->gradient_state().sync_gradients ? 1 : 0; });
}

acc_status acc_optimizer_step_was_skipped(const acc_optimizer* opt, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(opt, "optimizer")->slot->step_was_skipped ? 1 : 0; });
}

acc_status acc_grad_scaler_state(const acc_accelerator* acc, double* out_scale, int64_t* out_growth_tracker) noexcept {
  if (out_scale) *out_scale = 0;
  if (out_growth_tracker) *out_growth_tracker = 0;
  return guarded(__func__, [&] {
    acc::core::GradScaler* s = need(acc, "accelerator")->impl->scaler();
    if (!s)
      throw acc::core::StateError("no loss scaler: mixed_precision is \"" + acc->impl->mixed_precision() +
                                  "\", not \"fp16\"");
    if (out_scale) *out_scale = s->scale();
    if (out_growth_tracker) *out_growth_tracker = s->growth_tracker();
  });
}

acc_status acc_clip_grad_norm(acc_accelerator* acc, acc_model* model, double max_norm, double norm_type,
                              double* out_total_norm) noexcept {
  if (out_total_norm) *out_total_norm = 0;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    HandleLock lm(need(model, "model")->busy, "the model");
    double total = acc->impl->clip_grad_norm(*model->slot, max_norm, norm_type);
    if (out_total_norm) *out_total_norm = total;
  });
}

acc_status acc_clip_grad_value(acc_accelerator* acc, acc_model* model, double clip_value) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    HandleLock lm(need(model, "model")->busy, "the model");
    acc->impl->clip_grad_value(*model->slot, clip_value);
  });
}

acc_status acc_broadcast(acc_accelerator* acc, const acc_tensor* t, int32_t from_process, acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    *out = new acc_tensor{acc->impl->broadcast(need(t, "tensor")->t, from_process)};
  });
}

acc_status acc_pad_across_processes(acc_accelerator* acc, const acc_tensor* t, int32_t dim, double pad_index,
                                    int32_t pad_first, acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    *out = new acc_tensor{acc->impl->pad_across_processes(need(t, "tensor")->t, dim, pad_index, pad_first != 0)};
  });
}

acc_status acc_split_between_processes(const acc_accelerator* acc, int64_t n, int32_t apply_padding, int64_t* out_start,
                                       int64_t* out_count, int64_t* out_padded_count) noexcept {
  if (out_start) *out_start = 0;
  if (out_count) *out_count = 0;
  if (out_padded_count) *out_padded_count = 0;
  return guarded(__func__, [&] {
    auto s = need(acc, "accelerator")->impl->split_between_processes(n, apply_padding != 0);
    *need(out_start, "out_start") = s.start;
    *need(out_count, "out_count") = s.count;
    if (out_padded_count) *out_padded_count = s.padded_count;
  });
}

acc_status acc_split_tensor_between_processes(acc_accelerator* acc, const acc_tensor* t, int32_t apply_padding,
                                              acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new acc_tensor{
        need(acc, "accelerator")->impl->split_tensor_between_processes(need(t, "tensor")->t, apply_padding != 0)};
  });
}

acc_status acc_main_process_first_begin(acc_accelerator* acc, int32_t local) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->main_process_first(local != 0, /*entering=*/true);
  });
}

acc_status acc_main_process_first_end(acc_accelerator* acc, int32_t local) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->main_process_first(local != 0, /*entering=*/false);
  });
}

acc_status acc_set_trigger(acc_accelerator* acc) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    acc->impl->set_trigger();
  });
}

acc_status acc_check_trigger(acc_accelerator* acc, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    *need(out, "out") = acc->impl->check_trigger() ? 1 : 0;
  });
}

acc_status acc_print(const acc_accelerator* acc, const char* text) noexcept {
  return guarded(__func__, [&] { need(acc, "accelerator")->impl->print(need(text, "text")); });
}

acc_status acc_is_local_main_process(const acc_accelerator* acc, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(acc, "accelerator")->impl->state().local_rank == 0; });
}

acc_status acc_is_last_process(const acc_accelerator* acc, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] {
    const auto& st = need(acc, "accelerator")->impl->state();
    *need(out, "out") = st.rank == st.world_size - 1;
  });
}

acc_status acc_set_seed(const acc_accelerator* acc, uint64_t seed, int32_t device_specific,
                        int32_t deterministic) noexcept {
  return guarded(__func__, [&] {
    if (device_specific)
      need(acc, "accelerator (needed by device_specific)")->impl->set_seed(seed, true, deterministic != 0);
    else acc::core::set_seed(seed, deterministic != 0);
  });
}

acc_status acc_find_executable_batch_size(int64_t starting_batch_size, acc_batch_size_fn fn, void* user_data,
                                          int64_t* out_batch_size) noexcept {
  if (out_batch_size) *out_batch_size = 0;
  acc_status last = ACC_OK;
  acc_status st = guarded(__func__, [&] {
    need(fn, "fn");
    need(out_batch_size, "out_batch_size");
    *out_batch_size = acc::core::find_executable_batch_size(starting_batch_size, [&](int64_t bs) {
      last = fn(user_data, bs);
      if (last != ACC_OK && last != ACC_ERR_OUT_OF_MEMORY)
        throw acc::core::CallbackError("the step function returned " + std::to_string(last) + " at batch size " +
                                       std::to_string(bs));
      return last == ACC_OK;
    });
  });
  if (st == ACC_ERR_OUT_OF_MEMORY)
    acc::capi::set_error(ACC_ERR_OUT_OF_MEMORY,
                         "acc_find_executable_batch_size: no executable batch size found, reached zero");
  return st;
}

}  // extern "C"
