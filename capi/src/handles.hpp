// What the opaque handles of acc.h hold. Each keeps shared ownership of what it depends on, so
// handles can be destroyed in any order. Each ends with a Live member of its kind (guard.hpp), checked on every entry.
#pragma once
#include <ATen/core/Tensor.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "guard.hpp"
#include "text/tokenizer.hpp"
#include "train/accelerator.hpp"

// Handles are made with brace initialization naming what they hold; the trailing `live` mark takes its default,
// which is what that warning is about.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

struct acc_accelerator {
  std::shared_ptr<acc::core::Accelerator> impl;
  std::atomic<bool> busy{false};
  acc::capi::Live<acc::capi::Kind::accelerator> live;
};
struct acc_tensor {
  at::Tensor t;
  acc::capi::Live<acc::capi::Kind::tensor> live;
};
struct acc_model {
  std::shared_ptr<acc::core::PreparedModel> slot;
  // acc_model_state_get's borrowed names: made at creation, made again when an adapter changes the tree (capi_adapter.cpp)
  std::vector<std::string> state_names;
  std::string last_json;  // the borrowed result of acc_infer_auto_device_map / acc_model_module_sizes
  std::atomic<bool> busy{false};
  acc::capi::Live<acc::capi::Kind::model> live;
};
struct acc_optimizer {
  std::shared_ptr<acc::core::PreparedOptimizer> slot;
  std::atomic<bool> busy{false};
  acc::capi::Live<acc::capi::Kind::optimizer> live;
};
struct acc_scheduler {
  std::shared_ptr<acc::core::PreparedScheduler> slot;
  std::atomic<bool> busy{false};
  acc::capi::Live<acc::capi::Kind::scheduler> live;
};
struct acc_dataset {
  std::shared_ptr<acc::core::Dataset> ds;
  acc::capi::Live<acc::capi::Kind::dataset> live;
};
struct acc_batch {
  acc::core::TensorDict d;
  std::atomic<bool> busy{false};
  acc::capi::Live<acc::capi::Kind::batch> live;
};
struct acc_bytes_list {
  std::vector<std::string> items;
  std::atomic<bool> busy{false};
  acc::capi::Live<acc::capi::Kind::bytes_list> live;
};
struct acc_dataloader {
  std::shared_ptr<acc::core::DataLoader> dl;
  std::atomic<bool> busy{false};
  acc::capi::Live<acc::capi::Kind::dataloader> live;
};
// The tokenizer is thread-safe itself: no busy flag, except around set_special_token (documented: not
// while others use it).
struct acc_tokenizer {
  std::shared_ptr<acc::text::Tokenizer> tok;
  acc::capi::Live<acc::capi::Kind::tokenizer> live;
};
