// Named batches: the acc_batch handle, datasets and loaders of named samples, and the named forward.
#include <ATen/ATen.h>

#include "guard.hpp"
#include "handles.hpp"
#include "util/errors.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;

namespace {

// Runs a caller's sample callback on a library-owned batch, lent to it for the call, and returns what it filled in.
template <class Call>
acc::core::Sample fill_sample(Call call, const std::string& what) {
  acc_batch sample;
  sample.live.lend();
  acc_status st = call(&sample);
  if (sample.live.destroy_refused())
    throw acc::core::CallbackError(what + " called acc_batch_destroy on the sample batch, which libacc owns (fill it, "
                                          "do not destroy it)");
  if (st != ACC_OK) throw acc::core::CallbackError(what + " returned " + std::to_string(st));
  return std::move(sample.d);
}

}  // namespace

extern "C" {

acc_status acc_batch_create(acc_batch** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] { *need(out, "out") = new acc_batch(); });
}

void acc_batch_destroy(acc_batch* batch) noexcept { acc::capi::destroy_handle(batch, __func__); }

acc_status acc_batch_set(acc_batch* batch, const char* name, const acc_tensor* t) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(batch, "batch")->busy, "the batch");
    if (!need(name, "name")[0]) throw std::invalid_argument("a batch tensor's name must not be empty");
    batch->d.set(name, need(t, "tensor")->t);
  });
}

acc_status acc_batch_count(const acc_batch* batch, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = static_cast<int64_t>(need(batch, "batch")->d.size()); });
}

acc_status acc_batch_name(const acc_batch* batch, int64_t index, const char** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    const auto& items = need(batch, "batch")->d.items();
    need(out, "out");
    if (index < 0 || index >= static_cast<int64_t>(items.size()))
      throw std::out_of_range("batch index " + std::to_string(index) + " outside [0, " + std::to_string(items.size()) +
                              ")");
    *out = items[static_cast<size_t>(index)].first.c_str();
  });
}

acc_status acc_batch_contains(const acc_batch* batch, const char* name, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(batch, "batch")->d.contains(need(name, "name")) ? 1 : 0; });
}

acc_status acc_batch_get(const acc_batch* batch, const char* name, acc_tensor** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new acc_tensor{need(batch, "batch")->d.at(need(name, "name"))};
  });
}

acc_status acc_dataset_from_batch(const acc_batch* columns, acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    *out = new acc_dataset{acc::core::make_tensor_dataset(need(columns, "columns")->d)};
  });
}

acc_status acc_dataset_from_batch_callback(int64_t length, acc_dataset_get_batch_fn get, void* user_data,
                                           void (*free_user_data)(void*), acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  // The user data is released exactly once: with the dataset, or right here if creation fails.
  std::shared_ptr<acc::capi::UserData> ud(new acc::capi::UserData{user_data, free_user_data});
  return guarded(__func__, [&] {
    need(out, "out");
    need(get, "get");
    auto fetch = [get, ud](int64_t i) {
      acc::core::Sample s = fill_sample([&](acc_batch* b) { return get(ud->data, i, b); },
                                        "dataset callback for index " + std::to_string(i));
      if (s.empty()) throw acc::core::CallbackError("dataset callback set no tensor for index " + std::to_string(i));
      return s;
    };
    *out = new acc_dataset{acc::core::make_callback_dataset(length, fetch)};
  });
}

acc_status acc_dataset_from_batch_iterator(acc_iterator_start_fn start, acc_iterator_next_batch_fn next,
                                           void* user_data, void (*free_user_data)(void*), acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  std::shared_ptr<acc::capi::UserData> ud(new acc::capi::UserData{user_data, free_user_data});
  return guarded(__func__, [&] {
    need(out, "out");
    need(next, "next");
    std::function<void(int64_t)> rewind = acc::capi::rewind_function(start, ud);
    auto read = [next, ud](acc::core::Sample& sample) {
      int32_t has = 0;
      acc::core::Sample s = fill_sample([&](acc_batch* b) { return next(ud->data, b, &has); }, "dataset next callback");
      if (!has) return false;
      if (s.empty()) throw acc::core::CallbackError("dataset next callback set has_sample but no tensor");
      sample = std::move(s);
      return true;
    };
    *out = new acc_dataset{acc::core::make_iterable_dataset(std::move(rewind), std::move(read))};
  });
}

acc_status acc_dataloader_next_batch(acc_dataloader* dl, acc_batch** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(dl, "dataloader")->busy, "the dataloader");
    need(out, "out");
    std::unique_ptr<acc_batch> batch(new acc_batch());
    if (dl->dl->next(batch->d)) *out = batch.release();
  });
}

acc_status acc_model_forward_batch(acc_model* model, const acc_batch* batch, acc_batch** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(model, "model")->busy, "the model");
    need(out, "out");
    std::unique_ptr<acc_batch> result(new acc_batch());
    result->d = model->slot->forward(need(batch, "batch")->d);
    *out = result.release();
  });
}

}  // extern "C"
