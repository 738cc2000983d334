// Data loading beyond the basics: iterable datasets, explicit batches, skip_first_batches, and the
// gather of objects (byte strings) with gather_for_metrics' exactness.
#include <ATen/ATen.h>

#include <numeric>
#include <string>
#include <vector>

#include "guard.hpp"
#include "handles.hpp"
#include "util/errors.hpp"
#include "util/options.hpp"

using acc::capi::guarded;
using acc::capi::HandleLock;
using acc::capi::need;

extern "C" {

acc_status acc_dataset_from_iterator(acc_iterator_start_fn start, acc_iterator_next_fn next, void* user_data,
                                     void (*free_user_data)(void*), acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  // The user data is released exactly once: with the dataset, or right here if creation fails.
  std::shared_ptr<acc::capi::UserData> ud(new acc::capi::UserData{user_data, free_user_data});
  return guarded(__func__, [&] {
    need(out, "out");
    need(next, "next");
    std::function<void(int64_t)> rewind = acc::capi::rewind_function(start, ud);
    auto read = [next, ud](acc::core::Sample& sample) {
      acc_tensor* in = nullptr;
      acc_tensor* tg = nullptr;
      int32_t has = 0;
      acc_status st = next(ud->data, &in, &tg, &has);
      std::unique_ptr<acc_tensor, void (*)(acc_tensor*)> in_owned(in, acc_tensor_destroy),
          tg_owned(tg != in ? tg : nullptr, acc_tensor_destroy);  // one handle as both: freed once
      if (st != ACC_OK) throw acc::core::CallbackError("dataset next callback returned " + std::to_string(st));
      if (!has) return false;
      if (!in) throw acc::core::CallbackError("dataset next callback set has_sample but no input");
      if (!in->live.ok() || (tg && !tg->live.ok()))
        throw acc::core::CallbackError("dataset next callback gave a tensor that is not a live handle");
      sample = acc::core::pair_sample(in->t, tg ? tg->t : at::Tensor());
      return true;
    };
    *out = new acc_dataset{acc::core::make_iterable_dataset(std::move(rewind), std::move(read))};
  });
}

acc_status acc_dataset_is_iterable(const acc_dataset* ds, int32_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(ds, "dataset")->ds->iterable() ? 1 : 0; });
}

acc_status acc_dataloader_create_from_batches(acc_dataset* ds, const int64_t* indices, size_t num_indices,
                                              const int64_t* batch_sizes, int64_t num_batches, const char* options_json,
                                              acc_dataloader** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    need(ds, "dataset");
    if (num_batches < 0) throw std::invalid_argument("num_batches must be >= 0; got " + std::to_string(num_batches));
    acc::core::Options o(options_json, "dataloader options (explicit batches)", {"drop_last"});
    const bool drop_last = o.get_bool("drop_last", false);
    std::vector<acc::core::Batch> batches(static_cast<size_t>(num_batches));
    if (num_batches > 0) need(batch_sizes, "batch_sizes");
    int64_t total = 0;
    for (int64_t b = 0; b < num_batches; ++b) {
      if (batch_sizes[b] < 1)
        throw std::invalid_argument("batch_sizes[" + std::to_string(b) + "] is " + std::to_string(batch_sizes[b]) +
                                    "; every batch needs at least one index");
      total += batch_sizes[b];
    }
    if (static_cast<size_t>(total) != num_indices)
      throw std::invalid_argument("num_indices is " + std::to_string(num_indices) + " but batch_sizes add up to " +
                                  std::to_string(total));
    if (total > 0) need(indices, "indices");
    for (int64_t b = 0, at = 0; b < num_batches; at += batch_sizes[b], ++b)
      batches[static_cast<size_t>(b)].assign(indices + at, indices + at + batch_sizes[b]);
    *out = new acc_dataloader{std::make_shared<acc::core::DataLoader>(ds->ds, std::move(batches), drop_last)};
  });
}

acc_status acc_dataloader_skip_first_batches(acc_dataloader* dl, int64_t num_batches, acc_dataloader** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(dl, "dataloader")->busy, "the dataloader");
    need(out, "out");
    *out = new acc_dataloader{dl->dl->skip_first_batches(num_batches)};
  });
}

acc_status acc_dataloader_epoch(const acc_dataloader* dl, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(dl, "dataloader")->dl->epoch(); });
}

acc_status acc_dataloader_remainder(const acc_dataloader* dl, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = need(dl, "dataloader")->dl->remainder(); });
}

/* ------------------------------------------------------------------ byte strings, gather of objects */

acc_status acc_bytes_list_create(acc_bytes_list** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] { *need(out, "out") = new acc_bytes_list(); });
}

void acc_bytes_list_destroy(acc_bytes_list* list) noexcept { acc::capi::destroy_handle(list, __func__); }

acc_status acc_bytes_list_append(acc_bytes_list* list, const void* data, size_t size) noexcept {
  return guarded(__func__, [&] {
    HandleLock lock(need(list, "list")->busy, "the bytes list");
    if (size > std::string().max_size())  // SIZE_MAX, a negative length cast: no buffer is that large
      throw std::invalid_argument("size " + std::to_string(size) + " is larger than any byte string can be");
    if (size > 0) need(data, "data");
    list->items.emplace_back(static_cast<const char*>(data), size);
  });
}

acc_status acc_bytes_list_count(const acc_bytes_list* list, int64_t* out) noexcept {
  if (out) *out = 0;
  return guarded(__func__, [&] { *need(out, "out") = static_cast<int64_t>(need(list, "list")->items.size()); });
}

acc_status acc_bytes_list_get(const acc_bytes_list* list, int64_t index, const void** out_data,
                              size_t* out_size) noexcept {
  if (out_data) *out_data = nullptr;
  if (out_size) *out_size = 0;
  return guarded(__func__, [&] {
    const auto& items = need(list, "list")->items;
    need(out_data, "out_data");
    need(out_size, "out_size");
    if (index < 0 || index >= static_cast<int64_t>(items.size()))
      throw std::out_of_range("index " + std::to_string(index) + " outside [0, " + std::to_string(items.size()) + ")");
    const std::string& item = items[static_cast<size_t>(index)];
    *out_data = item.data();
    *out_size = item.size();
  });
}

acc_status acc_gather_object(acc_accelerator* acc, const acc_bytes_list* items, acc_bytes_list** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    std::unique_ptr<acc_bytes_list> result(new acc_bytes_list());
    result->items = acc->impl->gather_object(need(items, "items")->items, /*for_metrics=*/false);
    *out = result.release();
  });
}

acc_status acc_broadcast_object(acc_accelerator* acc, const acc_bytes_list* items, int32_t from_process,
                                acc_bytes_list** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    std::unique_ptr<acc_bytes_list> result(new acc_bytes_list());
    result->items = acc->impl->broadcast_object(need(items, "items")->items, from_process);
    *out = result.release();
  });
}

acc_status acc_gather_object_for_metrics(acc_accelerator* acc, const acc_bytes_list* items,
                                         acc_bytes_list** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    HandleLock lock(need(acc, "accelerator")->busy, "the accelerator");
    need(out, "out");
    std::unique_ptr<acc_bytes_list> result(new acc_bytes_list());
    result->items = acc->impl->gather_object(need(items, "items")->items, /*for_metrics=*/true);
    *out = result.release();
  });
}

}  // extern "C"
