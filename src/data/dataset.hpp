// Datasets (indexable samples) and the data loader that batches, shuffles and shards them.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "data/sharding.hpp"

namespace acc {

struct Sample {
  at::Tensor input;
  at::Tensor target;  // undefined when the dataset has none
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Sample get(int64_t index) = 0;
  // A batch of samples stacked along a new dim 0. Datasets with contiguous storage override this.
  virtual Sample get_batch(const std::vector<int64_t>& indices);
};

std::shared_ptr<Dataset> make_tensor_dataset(at::Tensor inputs, at::Tensor targets);
std::shared_ptr<Dataset> make_token_file_dataset(const std::string& path, const char* options_json);
// `get` fills a sample or throws; it runs on the thread that asks for the batch.
std::shared_ptr<Dataset> make_callback_dataset(int64_t length, std::function<Sample(int64_t)> get);

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
  uint64_t seed = 0;
  bool drop_last = false;
  static LoaderOptions parse(const char* options_json);
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> ds, LoaderOptions opts);
  ~DataLoader();

  // Shards across processes and moves batches to `device` (acc_prepare).
  void prepare(const ShardSpec& spec, c10::Device device, std::shared_ptr<LoaderObserver> observer);
  bool prepared() const { return prepared_; }
  // False at the end of an epoch; the next call starts the next epoch.
  bool next(Sample& out);
  void set_epoch(int64_t epoch);
  int64_t length();  // batches per epoch on this process
  bool end_of_dataloader() const { return in_epoch_ && pos_ == plan_.size(); }
  // Samples of the last global batch that are real, 0 when it is full or with drop_last (Accelerate's
  // GradientState.remainder: dataset length modulo the total batch size).
  int64_t remainder() const;

 private:
  std::vector<Batch> plan_epoch(int64_t epoch) const;
  std::shared_ptr<Dataset> ds_;
  LoaderOptions opts_;
  bool prepared_ = false;
  ShardSpec spec_;
  c10::Device device_{c10::kCPU};
  std::shared_ptr<LoaderObserver> observer_;
  int64_t epoch_ = 0;
  bool in_epoch_ = false;
  std::vector<Batch> plan_;
  size_t pos_ = 0;
};

}  // namespace acc
