// A named batch: tensors by name in insertion order, the dict Accelerate hands to a model
// (`input_ids`, `attention_mask`, `labels`, ...). Datasets, loaders and Model::forward carry these.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace acc::core {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class TensorDict {
 public:
  TensorDict() = default;
  TensorDict(std::initializer_list<std::pair<std::string, at::Tensor>> items);
  // Adds `name`, or replaces its tensor where present (keeping its position).
  void set(const std::string& name, at::Tensor t);
  bool contains(const std::string& name) const;
  // The tensor of `name`; std::invalid_argument naming the key and the keys present when missing.
  const at::Tensor& at(const std::string& name) const;
  // The tensor of `name`, or an undefined tensor.
  at::Tensor get(const std::string& name) const;
  const NamedTensors& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::string keys() const;  // "input_ids, labels": for error messages

 private:
  NamedTensors items_;
};

// Context parallelism: this CP rank's part of every tensor of `batch` along `seq_dim` (a tensor with fewer
// dimensions is kept whole, as a per-sample value), the positions of context_parallel_positions (data/sharding.hpp):
// what torch's context_parallel leaves each rank of its buffers. Every CP rank of one data-parallel rank reads the same
// batch (the loader gives it to them all) and keeps its part. std::invalid_argument for a bad rank or dimension.
at::Tensor context_parallel_shard(const at::Tensor& t, int64_t seq_dim, int cp_size, int cp_rank);
TensorDict context_parallel_shard(const TensorDict& batch, int64_t seq_dim, int cp_size, int cp_rank);

}  // namespace acc::core
