// Datasets from files (issue 39 item 4): JSONL, CSV, Parquet and Arrow files read, tokenized, grouped or prepared
// for SFT, and batched by transformers' or TRL's collators (src/data/from_files/files_dataset.hpp, data/prep/pipeline.hpp).
#include <ATen/ATen.h>

#include "acc/json.hpp"
#include "data/from_files/files_dataset.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "util/errors.hpp"

using acc::capi::guarded;
using acc::capi::need;
namespace json = acc::json;

extern "C" {

acc_status acc_dataset_from_files(const char* path, const acc_tokenizer* tok, const char* options_json,
                                  acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    const acc::text::Tokenizer& t = *need(tok, "tok")->tok;
    std::optional<json::Document> doc;
    if (options_json && *options_json) doc.emplace(options_json, "dataset options");
    auto root = doc ? std::optional<json::Value>(doc->root()) : std::nullopt;
    acc::data::PipelineOptions o = acc::data::parse_pipeline_options(root ? &*root : nullptr, "dataset options");
    if (path) {
      if (!o.files.empty())
        throw acc::config::Error("dataset options: 'files' is given and so is path '" + std::string(path) +
                                 "': name the files once");
      o.files = {path};
    } else if (o.files.empty()) {
      throw std::invalid_argument("path is NULL and the options name no \"files\"");
    }
    *out = new acc_dataset{acc::core::make_files_dataset(t, o)};
  });
}

acc_status acc_dataset_from_config(const acc_accelerator* accel, const acc_tokenizer* tok, acc_dataset** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    const acc::text::Tokenizer& t = *need(tok, "tok")->tok;
    const acc::data::PipelineOptions o = acc::data::pipeline_options_from_config(need(accel, "acc")->impl->config());
    *out = new acc_dataset{acc::core::make_files_dataset(t, o)};
  });
}

acc_status acc_dataset_get_batch(const acc_dataset* ds, const int64_t* indices, int64_t count,
                                 acc_batch** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    need(ds, "dataset");
    if (count < 1) throw std::invalid_argument("count must be >= 1; got " + std::to_string(count));
    need(indices, "indices");
    if (ds->ds->iterable()) throw acc::core::UnsupportedError("an iterable dataset has no batches by index");
    auto b = std::make_unique<acc_batch>();
    b->d = ds->ds->get_batch(std::vector<int64_t>(indices, indices + count));
    *out = b.release();
  });
}

}  // extern "C"
