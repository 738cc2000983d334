// Index logic of data loading, identical to Accelerate's (data_loader.py): batch sampling and
// BatchSamplerShard. Torch-free, so it is cheap to test exhaustively.
#pragma once
#include <cstdint>
#include <vector>

namespace acc {

using Batch = std::vector<int64_t>;

// Batches of `batch_size` over `order`, the last one short unless drop_last (torch's BatchSampler).
std::vector<Batch> make_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last);

struct ShardSpec {
  int num_processes = 1;
  int process_index = 0;
  bool split_batches = false;
  bool even_batches = true;
  bool drop_last = false;
  int64_t batch_size = 1;  // the batch sampler's batch size
};

// The batches process `process_index` yields (BatchSamplerShard.__iter__): whole batches in turn, or
// slices of each batch with split_batches; with even_batches the last round is completed by cycling
// from the first samples, so every process yields the same number of same-size batches.
std::vector<Batch> shard_batches(const std::vector<Batch>& batches, const ShardSpec& spec);

}  // namespace acc
