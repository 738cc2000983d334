// A model's weights as Hugging Face lays them out: `model.safetensors`, or shards `model-00001-of-0000N.safetensors`
// plus `model.safetensors.index.json` when it is larger than max_shard_size (huggingface_hub's
// split_torch_state_dict_into_shards). What save_model writes (checkpoint/save_model.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/batch.hpp"

namespace acc::core {

// Accelerate's convert_file_size_to_int: "10GB" = 10 * 10^9, "10GiB" = 10 * 2^30, "500MB", "2KB", "1.5GB",
// "KiB"/"MiB"/"GiB" binary, "KB"/"MB"/"GB"/"TB" decimal (a lowercase final "b", as "5Gb", counts bits: / 8); a
// plain integer counts bytes. Throws std::invalid_argument naming the string.
int64_t parse_shard_size(const std::string& size);

// How the tensors are split: in state order, a tensor that would take the current shard over the limit starts a
// new one; a tensor larger than the limit gets a shard of its own (placed before the shard being filled).
// Tensors sharing storage with an earlier one (tied weights) are dropped.
struct ShardPlan {
  struct File {
    std::string name;             // "model.safetensors" or "model-00001-of-00003.safetensors"
    std::vector<size_t> tensors;  // indices into the state, in state order within the file
  };
  std::vector<File> files;
  int64_t total_size = 0;  // bytes of tensor data
  bool sharded() const { return files.size() != 1; }
};
ShardPlan plan_shards(const NamedTensors& state, int64_t max_shard_size);

// Writes the files into dir (created when missing; a file there is refused), each atomically, the index last,
// then removes what an earlier save left that this one did not write: shards named model-XXXXX-of-YYYYY.safetensors,
// and a stale model.safetensors.index.json (or model.safetensors) of the other layout. Single process.
void write_model_files(const NamedTensors& state, const std::string& dir, int64_t max_shard_size);

}  // namespace acc::core
