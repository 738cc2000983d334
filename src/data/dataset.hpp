// Datasets (indexable samples, or iterable streams) and the data loader that batches, shuffles and
// shards them as Accelerate's prepare_data_loader does: BatchSamplerShard (DataLoaderShard),
// IterableDatasetShard, DataLoaderDispatcher, SeedableRandomSampler and skip_first_batches.
#pragma once
#include <acc/config_views.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "data/batch.hpp"
#include "data/sharding.hpp"

namespace acc::core {

class Comm;

// A sample, and a batch of samples: named tensors. Datasets of (input, target) pairs name them "input"
// and "targets" (see kInputKey); every sample of one dataset has the same names in the same order.
using Sample = TensorDict;
inline constexpr const char* kInputKey = "input";
inline constexpr const char* kTargetKey = "targets";
// {"input": input, "targets": target}, without "targets" when `target` is undefined.
Sample pair_sample(at::Tensor input, at::Tensor target);
// A batch seen as (input, target), for the two-tensor calls: its first and second tensors (the second
// undefined for a batch of one). A batch of more tensors is refused: it has to be read by name.
std::pair<at::Tensor, at::Tensor> as_pair(const Sample& batch);

class Dataset {
 public:
  virtual ~Dataset() = default;
  // An iterable dataset (torch's IterableDataset) has no length and no indexing: a loader reads it in
  // order through start() and next().
  virtual bool iterable() const { return false; }
  virtual int64_t size() const = 0;
  virtual Sample get(int64_t index) = 0;
  // A batch of samples stacked along a new dim 0. Datasets with contiguous storage override this.
  virtual Sample get_batch(const std::vector<int64_t>& indices);
  // Iterable datasets: begins a pass over the stream for `epoch` (Accelerate's set_epoch), then next()
  // gives samples until it returns false.
  virtual void start(int64_t epoch);
  virtual bool next(Sample& out);
};

// Samples are the rows (dim 0) of every column; the columns are copied.
std::shared_ptr<Dataset> make_tensor_dataset(const TensorDict& columns);
// {"input": inputs, "targets": targets}, targets omitted when undefined.
std::shared_ptr<Dataset> make_tensor_dataset(at::Tensor inputs, at::Tensor targets);
// Samples {"input_ids": tokens [i*T, i*T+T), "targets": the next token of each}, int64.
std::shared_ptr<Dataset> make_token_file_dataset(const std::string& path, const char* options_json);
// `get` fills a sample or throws; it runs on the thread that asks for the batch.
std::shared_ptr<Dataset> make_callback_dataset(int64_t length, std::function<Sample(int64_t)> get);
// An iterable dataset: `start` (may be empty) rewinds the stream for an epoch; `next` fills a sample
// and returns true, or returns false at the end of the stream.
std::shared_ptr<Dataset> make_iterable_dataset(std::function<void(int64_t)> start, std::function<bool(Sample&)> next);

// Where a prepared loader reports its progress: Accelerate's GradientState (the active loader's
// end_of_dataloader and remainder drive gather_for_metrics).
class LoaderObserver {
 public:
  virtual ~LoaderObserver() = default;
  virtual void loader_begin(const void* loader) = 0;
  virtual void loader_end(const void* loader) = 0;
};

struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  std::optional<uint64_t> seed;  // the loader's generator; unset: torch's default generator seeds each epoch
  bool drop_last = false;
  static LoaderOptions parse(const char* options_json);
};

// What acc_prepare decides for a loader: the arguments Accelerator.prepare_data_loader passes on.
struct LoaderPrepare {
  ShardSpec spec;                        // processes, split_batches, even_batches
  std::optional<bool> dispatch_batches;  // unset: dispatch iterable datasets only (Accelerate's default)
  bool use_seedable_sampler = false;
  std::optional<uint64_t> data_seed;     // unset: the default generator's initial seed
  bool non_blocking = false;
  // Null with one process. Every process of the job (not only the data-parallel ones `spec` counts): its rank 0 reads
  // for dispatch_batches and its generator state is everyone's.
  std::shared_ptr<Comm> comm;
  // dataloader_config.{split_batches, dispatch_batches, even_batches, use_seedable_sampler, data_seed,
  // non_blocking}; the process layout comes from `spec`.
  static LoaderPrepare from_config(const config::AcceleratorSettings::DataloaderConfig& c, ShardSpec spec,
                                   std::shared_ptr<Comm> comm);
};

// Where a loader is, for a checkpoint: enough to continue the interrupted pass with the same batches.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batches = 0;  // batches of the current pass already yielded (0 between passes)
  at::Tensor pass_generator;  // the shuffling generator's state when the current (or next) pass began; may be undefined
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> ds, LoaderOptions opts);
  // A batch sampler of explicit batches of varying size (Accelerate's batch_size=None); drop_last is the
  // sampler's: sharded, an incomplete last round is dropped.
  DataLoader(std::shared_ptr<Dataset> ds, std::vector<Batch> batches, bool drop_last);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Shards across processes (or dispatches from rank 0) and moves batches to `device` (acc_prepare).
  // With several processes, a shuffling loader without the seedable sampler takes rank 0's generator
  // state (a collective: every process prepares its loader).
  void prepare(const LoaderPrepare& how, c10::Device device, std::shared_ptr<LoaderObserver> observer);
  bool prepared() const { return prepared_; }
  // Accelerate's skip_first_batches: a new loader over the same data, prepared the same way and at the
  // same epoch, each pass of which skips its first `num_batches` batches (of this process).
  std::shared_ptr<DataLoader> skip_first_batches(int64_t num_batches) const;

  // False at the end of an epoch; the next call starts the next epoch.
  bool next(Sample& out);
  // Ends the current pass; the next one runs `epoch` (Accelerate's set_epoch / iteration).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  int64_t length();  // batches per epoch on this process; UnsupportedError for an iterable dataset
  bool end_of_dataloader() const;
  // Samples of the last global batch that are real when sharding padded it with repeated samples (the
  // first that many of the gathered batch), 0 when nothing was padded: what gather_for_metrics keeps.
  int64_t remainder() const;
  bool dispatches() const { return dispatch_; }
  // Checkpoints: where the loader is, and continuing from there (the next batch is the one after the
  // saved position's last, the pass's order drawn from the same generator state).
  LoaderPosition position() const;
  void resume(const LoaderPosition& at);
  // The samples of a pass's order that one step of all data-parallel processes takes together (0 for batches of
  // varying size or an iterable dataset): a position in batches means the same samples under another process layout
  // when this divides them (load_state across meshes).
  int64_t samples_per_step() const;
  bool iterable() const { return ds_->iterable(); }

  struct Pass;  // one epoch's iteration (dataset.cpp)

 private:
  DataLoader() = default;
  std::vector<int64_t> order_for_pass(int64_t epoch);  // may advance the shuffle generator
  std::vector<Batch> base_batches(const std::vector<int64_t>& order) const;
  std::unique_ptr<Pass> start_pass(int64_t epoch);

  std::shared_ptr<Dataset> ds_;
  LoaderOptions opts_;
  std::optional<std::vector<Batch>> explicit_;  // explicit batches
  bool prepared_ = false;
  LoaderPrepare how_;
  bool dispatch_ = false;
  c10::Device device_{c10::kCPU};
  std::shared_ptr<LoaderObserver> observer_;
  // Shuffling: the seedable sampler reseeds `gen_` with seed_ + epoch each pass; otherwise `gen_` (when
  // defined) draws one permutation per pass, or each pass seeds a fresh one from the default generator.
  bool seedable_ = false;
  uint64_t seed_ = 0;
  at::Generator gen_;
  int64_t skip_ = 0;
  int64_t epoch_ = 0;
  int64_t yielded_ = 0;  // batches of the current pass given out (resumed ones included)
  at::Tensor pass_gen_state_;  // the shuffling generator's state before this pass drew its order
  std::optional<LoaderPosition> resume_;  // set by resume(): the next pass continues there
  bool in_epoch_ = false;
  std::unique_ptr<Pass> pass_;
};

}  // namespace acc::core
