#include "data/dataset.hpp"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <numeric>

#include "util/options.hpp"

namespace acc {

Sample Dataset::get_batch(const std::vector<int64_t>& indices) {
  std::vector<at::Tensor> in, tg;
  for (int64_t i : indices) {
    Sample s = get(i);
    in.push_back(s.input);
    if (s.target.defined()) tg.push_back(s.target);
  }
  if (!tg.empty() && tg.size() != in.size())
    throw std::invalid_argument("dataset: some samples have a target and some do not");
  return {at::stack(in), tg.empty() ? at::Tensor() : at::stack(tg)};
}

namespace {

void check_index(int64_t i, int64_t n) {
  if (i < 0 || i >= n)
    throw std::out_of_range("dataset index " + std::to_string(i) + " outside [0, " + std::to_string(n) + ")");
}

class TensorDataset final : public Dataset {
 public:
  TensorDataset(at::Tensor in, at::Tensor tg) : in_(std::move(in)), tg_(std::move(tg)) {
    if (in_.dim() == 0) throw std::invalid_argument("dataset inputs must have a sample dimension (dim 0)");
    if (tg_.defined() && (tg_.dim() == 0 || tg_.size(0) != in_.size(0)))
      throw std::invalid_argument("dataset targets have " + std::to_string(tg_.dim() ? tg_.size(0) : 0) +
                                  " rows but inputs have " + std::to_string(in_.size(0)));
  }
  int64_t size() const override { return in_.size(0); }
  Sample get(int64_t i) override {
    check_index(i, size());
    return {in_[i], tg_.defined() ? tg_[i] : at::Tensor()};
  }
  Sample get_batch(const std::vector<int64_t>& idx) override {
    for (int64_t i : idx) check_index(i, size());
    at::Tensor index = at::tensor(idx, at::kLong);
    return {in_.index_select(0, index), tg_.defined() ? tg_.index_select(0, index) : at::Tensor()};
  }

 private:
  at::Tensor in_, tg_;
};

// nanoGPT's train.bin layout: a flat array of token ids, read in place through mmap.
class TokenFileDataset final : public Dataset {
 public:
  TokenFileDataset(const std::string& path, int64_t block, size_t width) : block_(block), width_(width) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::ios_base::failure("cannot open token file '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      throw std::ios_base::failure("token file '" + path + "' is empty or unreadable");
    }
    bytes_ = static_cast<size_t>(st.st_size);
    if (bytes_ % width_ != 0) {
      ::close(fd);
      throw std::ios_base::failure("token file '" + path + "' size " + std::to_string(bytes_) +
                                   " is not a multiple of the token width " + std::to_string(width_));
    }
    data_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (data_ == MAP_FAILED) throw std::ios_base::failure("cannot mmap token file '" + path + "'");
    int64_t tokens = static_cast<int64_t>(bytes_ / width_);
    samples_ = (tokens - 1) / block_;
    if (samples_ < 1) {
      ::munmap(data_, bytes_);
      throw std::invalid_argument("token file '" + path + "' holds " + std::to_string(tokens) +
                                  " tokens: fewer than block_size + 1 = " + std::to_string(block_ + 1));
    }
  }
  ~TokenFileDataset() override { ::munmap(data_, bytes_); }
  int64_t size() const override { return samples_; }
  Sample get(int64_t i) override {
    Sample s = get_batch({i});
    return {s.input[0], s.target[0]};
  }
  Sample get_batch(const std::vector<int64_t>& idx) override {
    const int64_t B = static_cast<int64_t>(idx.size()), T = block_;
    at::Tensor x = at::empty({B, T}, at::kLong), y = at::empty({B, T}, at::kLong);
    int64_t* px = x.data_ptr<int64_t>();
    int64_t* py = y.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      check_index(idx[static_cast<size_t>(b)], samples_);
      int64_t start = idx[static_cast<size_t>(b)] * T;
      for (int64_t t = 0; t <= T; ++t) {
        int64_t tok = token(start + t);
        if (t < T) px[b * T + t] = tok;
        if (t > 0) py[b * T + t - 1] = tok;
      }
    }
    return {x, y};
  }

 private:
  int64_t token(int64_t i) const {
    if (width_ == 2) {
      uint16_t v;
      std::memcpy(&v, static_cast<const char*>(data_) + i * 2, 2);
      return v;
    }
    int32_t v;
    std::memcpy(&v, static_cast<const char*>(data_) + i * 4, 4);
    return v;
  }
  int64_t block_;
  size_t width_, bytes_ = 0;
  void* data_ = nullptr;
  int64_t samples_ = 0;
};

class CallbackDataset final : public Dataset {
 public:
  CallbackDataset(int64_t n, std::function<Sample(int64_t)> get) : n_(n), get_(std::move(get)) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i) override {
    check_index(i, n_);
    return get_(i);
  }

 private:
  int64_t n_;
  std::function<Sample(int64_t)> get_;
};

}  // namespace

std::shared_ptr<Dataset> make_tensor_dataset(at::Tensor inputs, at::Tensor targets) {
  return std::make_shared<TensorDataset>(inputs.clone(), targets.defined() ? targets.clone() : targets);
}

std::shared_ptr<Dataset> make_token_file_dataset(const std::string& path, const char* options_json) {
  Options o(options_json, "token file options", {"block_size", "dtype"});
  int64_t block = o.get_int("block_size", std::nullopt, 1);
  std::string dtype = o.get_string("dtype", "uint16", {"uint16", "int32"});
  return std::make_shared<TokenFileDataset>(path, block, dtype == "uint16" ? 2 : 4);
}

std::shared_ptr<Dataset> make_callback_dataset(int64_t length, std::function<Sample(int64_t)> get) {
  if (length < 0) throw std::invalid_argument("dataset length must be >= 0; got " + std::to_string(length));
  return std::make_shared<CallbackDataset>(length, std::move(get));
}

LoaderOptions LoaderOptions::parse(const char* options_json) {
  Options o(options_json, "dataloader options", {"batch_size", "shuffle", "seed", "drop_last"});
  LoaderOptions l;
  l.batch_size = o.get_int("batch_size", 1, 1);
  l.shuffle = o.get_bool("shuffle", false);
  l.seed = static_cast<uint64_t>(o.get_int("seed", 0, 0));
  l.drop_last = o.get_bool("drop_last", false);
  return l;
}

DataLoader::DataLoader(std::shared_ptr<Dataset> ds, LoaderOptions opts) : ds_(std::move(ds)), opts_(opts) {
  spec_.batch_size = opts_.batch_size;
  spec_.drop_last = opts_.drop_last;
}

DataLoader::~DataLoader() {
  if (in_epoch_ && observer_) observer_->loader_end(this);
}

void DataLoader::prepare(const ShardSpec& spec, c10::Device device, std::shared_ptr<LoaderObserver> observer) {
  ShardSpec s = spec;
  s.batch_size = opts_.batch_size;
  s.drop_last = opts_.drop_last;
  // Validates split_batches divisibility up front rather than at the first batch.
  shard_batches({}, s);
  spec_ = s;
  device_ = device;
  observer_ = std::move(observer);
  prepared_ = true;
  in_epoch_ = false;
}

std::vector<Batch> DataLoader::plan_epoch(int64_t epoch) const {
  const int64_t n = ds_->size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (opts_.shuffle) {
    // The same permutation on every process: a generator seeded with seed + epoch (Accelerate's
    // SeedableRandomSampler), so shards never overlap.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opts_.seed + static_cast<uint64_t>(epoch));
    at::Tensor perm = at::randperm(n, gen, at::kLong);
    std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
  } else {
    std::iota(order.begin(), order.end(), 0);
  }
  auto batches = make_batches(order, opts_.batch_size, opts_.drop_last);
  return prepared_ ? shard_batches(batches, spec_) : batches;
}

void DataLoader::set_epoch(int64_t epoch) {
  if (in_epoch_ && observer_) observer_->loader_end(this);
  in_epoch_ = false;
  epoch_ = epoch;
}

int64_t DataLoader::length() { return static_cast<int64_t>(plan_epoch(epoch_).size()); }

int64_t DataLoader::remainder() const {
  if (opts_.drop_last) return 0;
  int64_t total = spec_.split_batches ? opts_.batch_size : opts_.batch_size * spec_.num_processes;
  return prepared_ ? ds_->size() % total : 0;
}

bool DataLoader::next(Sample& out) {
  if (!in_epoch_) {
    plan_ = plan_epoch(epoch_);
    pos_ = 0;
    in_epoch_ = true;
    if (observer_) observer_->loader_begin(this);
  }
  if (pos_ == plan_.size()) {
    in_epoch_ = false;
    ++epoch_;
    if (observer_) observer_->loader_end(this);
    return false;
  }
  Sample s = ds_->get_batch(plan_[pos_++]);
  if (device_ != c10::Device(c10::kCPU)) {
    s.input = s.input.to(device_);
    if (s.target.defined()) s.target = s.target.to(device_);
  }
  out = std::move(s);
  return true;
}

}  // namespace acc
