// Index logic of data loading, identical to Accelerate's (data_loader.py): batch sampling,
// BatchSamplerShard, IterableDatasetShard and DataLoaderDispatcher's slicing. Torch-free, so it is cheap
// to test exhaustively against Accelerate's expected index lists.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace acc::core {

using Batch = std::vector<int64_t>;

// Batches of `batch_size` over `order`, the last one short unless drop_last (torch's BatchSampler).
std::vector<Batch> make_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last);

struct ShardSpec {
  int num_processes = 1;
  int process_index = 0;
  bool split_batches = false;
  bool even_batches = true;
  bool drop_last = false;
  // The batch sampler's batch size. 0: batches of varying size (a batch sampler without a batch size,
  // Accelerate's batch_size=None): every batch counts as full.
  int64_t batch_size = 1;
};

// Throws std::invalid_argument for a process index outside the job, or split_batches with a batch size
// that is not a multiple of the number of processes (or that varies).
void check_shard_spec(const ShardSpec& spec);

// The batches process `process_index` yields (BatchSamplerShard.__iter__): whole batches in turn, or
// slices of each batch with split_batches; with even_batches the last round is completed by cycling
// from the first samples (or the first batches, for varying sizes), so every process yields the same
// number of batches.
std::vector<Batch> shard_batches(const std::vector<Batch>& batches, const ShardSpec& spec);

// How many samples of the last global step (the last round of num_processes batches, or the last
// split batch) are real when shard_batches padded it with repeated samples; 0 when nothing was padded.
// Gathered in rank order, the real samples of a step always come first.
int64_t shard_padded_real(const std::vector<Batch>& batches, const ShardSpec& spec);

// IterableDatasetShard over a stream whose elements are numbered 0, 1, 2, ... in arrival order. Every
// process reads the whole stream; global batches hold batch_size x num_processes elements (batch_size
// with split_batches) and each process takes its slice. Without drop_last, the last global batch is
// completed by cycling the first global batch.
class IterableShard {
 public:
  explicit IterableShard(const ShardSpec& spec);
  int64_t global_batch_size() const { return global_; }
  int64_t process_batch_size() const { return per_process_; }
  // The next element arrived: this process's batch when it completes a global batch.
  std::optional<Batch> push(int64_t element);
  // The stream ended: this process's part of the padded last global batch, if there is one.
  std::optional<Batch> finish();
  // After finish(): real elements in the padded last global batch; 0 when none was padded.
  int64_t padded_real() const { return padded_real_; }

 private:
  ShardSpec spec_;
  int64_t global_ = 1, per_process_ = 1;
  int64_t seen_ = 0;            // elements pushed
  int64_t first_size_ = 0;      // elements of the first global batch (ordinals 0..first_size_-1)
  int64_t padded_real_ = 0;
};

// DataLoaderDispatcher: rank 0 reads base batches (the loader's own batches, unsharded) and each step
// broadcasts one of them (split_batches) or the concatenation of num_processes of them; a last step
// with fewer is dropped with drop_last.
std::vector<Batch> dispatch_steps(const std::vector<Batch>& base, const ShardSpec& spec);

// The rows of a broadcast step of `observed` rows that process `process_index` keeps: rows at and past
// `observed` are the first rows of the epoch's first step (padding; only on the last step, without
// drop_last, when observed is not a multiple of num_processes).
struct DispatchSlice {
  int64_t start = 0, length = 0;
  bool padded = false;  // the step was completed from the first step
};
DispatchSlice dispatch_slice(int64_t observed, bool is_last, const ShardSpec& spec);

// The index lists each step of dispatch_steps gives process `process_index` (for tests and lengths).
std::vector<Batch> dispatch_shard(const std::vector<Batch>& base, const ShardSpec& spec);

// Context parallelism: the positions of a sequence of `seq_len` tokens that rank `cp_rank` of a context-parallel
// group of `cp_size` holds, in order, as torch's context_parallel shards its buffers (_context_parallel_buffers with
// the default load balancer): when seq_len is a multiple of 2 x cp_size, the head-tail balance, chunks cp_rank and
// 2 cp_size - 1 - cp_rank of 2 cp_size equal chunks (so causal attention costs every rank the same); otherwise
// torch.chunk's part cp_rank (ceil(seq_len / cp_size) tokens each, the last ones fewer or none).
// Throws std::invalid_argument for cp_size < 1, cp_rank outside it, or seq_len < 0.
std::vector<int64_t> context_parallel_positions(int64_t seq_len, int cp_size, int cp_rank);

}  // namespace acc::core
