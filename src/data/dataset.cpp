#include "data/dataset.hpp"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <numeric>

#include "runtime/comm.hpp"
#include "util/errors.hpp"
#include "util/options.hpp"
#include "util/trace_phases.hpp"

namespace acc::core {

namespace {

// Every sample (or batch) of a dataset names the same tensors in the same order.
void check_same_names(const Sample& first, const Sample& other, const char* what) {
  bool same = first.size() == other.size();
  for (size_t k = 0; same && k < first.size(); ++k) same = first.items()[k].first == other.items()[k].first;
  if (!same)
    throw std::invalid_argument(std::string("dataset: ") + what + " name different tensors: (" + first.keys() +
                                ") and (" + other.keys() + ")");
}

// Joins the k-th tensor of every part into one, per name: at::stack (a new dim 0, torch's default
// collate) or at::cat (rows). A shape mismatch names the tensor.
template <class Join>
Sample join_parts(const std::vector<Sample>& parts, const char* what, Join join) {
  if (parts.empty()) return {};
  const Sample& first = parts.front();
  if (first.empty()) throw std::invalid_argument(std::string("dataset: ") + what + " hold no tensors");
  for (const Sample& p : parts) check_same_names(first, p, what);
  Sample out;
  std::vector<at::Tensor> column;
  for (size_t k = 0; k < first.size(); ++k) {
    column.clear();
    for (const Sample& p : parts) column.push_back(p.items()[k].second);
    try {
      out.set(first.items()[k].first, join(column));
    } catch (const c10::Error& e) {
      throw std::invalid_argument(std::string("dataset: the '") + first.items()[k].first + "' tensors of " + what +
                                  " cannot be joined: " + e.what_without_backtrace());
    }
  }
  return out;
}

// Stacks samples along a new dim 0 (torch's default collate for tensors).
Sample stack_samples(const std::vector<Sample>& samples) {
  return join_parts(samples, "samples", [](const std::vector<at::Tensor>& c) { return at::stack(c); });
}

// Rows in a batch: dim 0 of its tensors (a dataset's batches agree on it).
int64_t rows_of(const Sample& s) {
  if (s.empty()) return 0;
  const at::Tensor& t = s.items().front().second;
  return t.dim() == 0 ? 1 : t.size(0);
}

// Applies `fn` to every tensor of `s`, keeping the names.
template <class Fn>
Sample map_tensors(const Sample& s, Fn fn) {
  Sample out;
  for (const auto& [name, t] : s.items()) out.set(name, fn(t));
  return out;
}

}  // namespace

Sample Dataset::get_batch(const std::vector<int64_t>& indices) {
  std::vector<Sample> samples;
  for (int64_t i : indices) samples.push_back(get(i));
  return stack_samples(samples);
}

void Dataset::start(int64_t) { throw UnsupportedError("this dataset is indexable, not iterable"); }
bool Dataset::next(Sample&) { throw UnsupportedError("this dataset is indexable, not iterable"); }

namespace {

void check_index(int64_t i, int64_t n) {
  if (i < 0 || i >= n)
    throw std::out_of_range("dataset index " + std::to_string(i) + " outside [0, " + std::to_string(n) + ")");
}

// torch's TensorDataset, with named columns.
class TensorDataset final : public Dataset {
 public:
  explicit TensorDataset(TensorDict columns) : columns_(std::move(columns)) {
    if (columns_.empty()) throw std::invalid_argument("a tensor dataset needs at least one tensor");
    const auto& [first_name, first] = columns_.items().front();
    for (const auto& [name, t] : columns_.items()) {
      if (!t.defined()) throw std::invalid_argument("dataset tensor '" + name + "' is undefined");
      if (t.dim() == 0)
        throw std::invalid_argument("dataset tensor '" + name + "' must have a sample dimension (dim 0)");
      if (t.size(0) != first.size(0))
        throw std::invalid_argument("dataset tensor '" + name + "' has " + std::to_string(t.size(0)) + " rows but '" +
                                    first_name + "' has " + std::to_string(first.size(0)));
    }
  }
  int64_t size() const override { return columns_.items().front().second.size(0); }
  Sample get(int64_t i) override {
    check_index(i, size());
    return map_tensors(columns_, [i](const at::Tensor& t) { return t[i]; });
  }
  Sample get_batch(const std::vector<int64_t>& idx) override {
    for (int64_t i : idx) check_index(i, size());
    at::Tensor index = at::tensor(idx, at::kLong);
    return map_tensors(columns_, [&index](const at::Tensor& t) { return t.index_select(0, index); });
  }

 private:
  TensorDict columns_;
};

// nanoGPT's train.bin layout: a flat array of token ids, read in place through mmap.
class TokenFileDataset final : public Dataset {
 public:
  TokenFileDataset(const std::string& path, int64_t block, size_t width) : block_(block), width_(width) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::ios_base::failure("cannot open token file '" + path + "': " + std::strerror(errno));
    struct stat st{};
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
    return map_tensors(get_batch({i}), [](const at::Tensor& t) { return t[0]; });
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
    return {{"input_ids", x}, {kTargetKey, y}};
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

// torch's IterableDataset over caller functions: no length, read in order.
class IterableCallbackDataset final : public Dataset {
 public:
  IterableCallbackDataset(std::function<void(int64_t)> start, std::function<bool(Sample&)> next)
      : start_(std::move(start)), next_(std::move(next)) {}
  bool iterable() const override { return true; }
  int64_t size() const override { throw UnsupportedError("an iterable dataset has no length"); }
  Sample get(int64_t) override { throw UnsupportedError("an iterable dataset cannot be indexed"); }
  Sample get_batch(const std::vector<int64_t>&) override {
    throw UnsupportedError("an iterable dataset cannot be indexed");
  }
  void start(int64_t epoch) override {
    if (start_) start_(epoch);
  }
  bool next(Sample& out) override { return next_(out); }

 private:
  std::function<void(int64_t)> start_;
  std::function<bool(Sample&)> next_;
};

}  // namespace

std::shared_ptr<Dataset> make_tensor_dataset(const TensorDict& columns) {
  return std::make_shared<TensorDataset>(map_tensors(columns,
                                                     [](const at::Tensor& t) { return t.defined() ? t.clone() : t; }));
}

Sample pair_sample(at::Tensor input, at::Tensor target) {
  Sample s{{kInputKey, std::move(input)}};
  if (target.defined()) s.set(kTargetKey, std::move(target));
  return s;
}

std::pair<at::Tensor, at::Tensor> as_pair(const Sample& batch) {
  if (batch.empty() || batch.size() > 2)
    throw std::invalid_argument("a batch of " + std::to_string(batch.size()) + " tensors (" + batch.keys() +
                                ") cannot be read as (input, target): read it by name (acc_dataloader_next_batch)");
  const auto& items = batch.items();
  return {items[0].second, items.size() == 2 ? items[1].second : at::Tensor()};
}

std::shared_ptr<Dataset> make_tensor_dataset(at::Tensor inputs, at::Tensor targets) {
  return make_tensor_dataset(pair_sample(std::move(inputs), std::move(targets)));
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

std::shared_ptr<Dataset> make_iterable_dataset(std::function<void(int64_t)> start, std::function<bool(Sample&)> next) {
  if (!next) throw std::invalid_argument("an iterable dataset needs a next function");
  return std::make_shared<IterableCallbackDataset>(std::move(start), std::move(next));
}

LoaderOptions LoaderOptions::parse(const char* options_json) {
  Options o(options_json, "dataloader options", {"batch_size", "shuffle", "seed", "drop_last"});
  LoaderOptions l;
  l.batch_size = o.get_int("batch_size", 1, 1);
  l.shuffle = o.get_bool("shuffle", false);
  if (o.has("seed")) l.seed = static_cast<uint64_t>(o.get_int("seed", 0, 0));
  l.drop_last = o.get_bool("drop_last", false);
  return l;
}

LoaderPrepare LoaderPrepare::from_config(const config::AcceleratorSettings::DataloaderConfig& c, ShardSpec spec,
                                         std::shared_ptr<Comm> comm) {
  LoaderPrepare p;
  p.spec = spec;
  p.spec.split_batches = c.split_batches;
  p.spec.even_batches = c.even_batches;
  p.dispatch_batches = c.dispatch_batches;
  p.use_seedable_sampler = c.use_seedable_sampler;
  if (c.data_seed) p.data_seed = static_cast<uint64_t>(*c.data_seed);
  p.non_blocking = c.non_blocking;
  if (c.use_stateful_dataloader)
    throw UnsupportedError("dataloader_config.use_stateful_dataloader: torchdata's StatefulDataLoader is not part of "
                           "libacc; resume with skip_first_batches (acc_dataloader_skip_first_batches) instead");
  p.comm = std::move(comm);
  return p;
}

// ------------------------------------------------------------------------------------------------------
// Passes: one epoch of iteration, in the three ways Accelerate iterates.

struct DataLoader::Pass {
  virtual ~Pass() = default;
  // This process's next batch, on the CPU; false at the end of the pass.
  virtual bool next(Sample& out) = 0;
  bool at_end = false;       // the batch next() returned last is the pass's last (end_of_dataloader)
  int64_t padded_real = 0;   // then: real samples of the padded last global batch, 0 if none was padded
};

namespace {

Sample narrow_rows(const Sample& s, int64_t start, int64_t length) {
  const int64_t n = rows_of(s);
  const int64_t lo = std::min(start, n), hi = std::min(std::max(start + length, lo), n);
  return map_tensors(s, [&](const at::Tensor& t) { return t.narrow(0, lo, hi - lo); });
}

Sample cat_rows(const std::vector<Sample>& parts) {
  try {
    return join_parts(parts, "the batches of one step", [](const std::vector<at::Tensor>& c) { return at::cat(c); });
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("dispatch_batches: ") + e.what() +
                                " (they must agree in every dim but the first; give split_batches, or turn "
                                "dispatch_batches off)");
  }
}

// A map-style pass: this process's batches are known up front (BatchSamplerShard's plan).
struct IndexPass final : DataLoader::Pass {
  IndexPass(std::shared_ptr<Dataset> ds, std::vector<Batch> plan, int64_t real)
      : ds(std::move(ds)), plan(std::move(plan)), real(real) {}
  bool next(Sample& out) override {
    if (pos == plan.size()) return false;
    const Batch& b = plan[pos++];
    at_end = pos == plan.size();
    padded_real = at_end ? real : 0;
    out = ds->get_batch(b);
    return true;
  }
  std::shared_ptr<Dataset> ds;
  std::vector<Batch> plan;
  int64_t real;
  size_t pos = 0;
};

// Batches of `batch_size` samples read from an iterable dataset, the last short unless drop_last.
struct StreamBatcher {
  StreamBatcher(std::shared_ptr<Dataset> ds, int64_t batch_size, bool drop_last)
      : ds(std::move(ds)), batch_size(batch_size), drop_last(drop_last) {}
  bool read(Sample& out) {
    std::vector<Sample> v;
    while (!done && static_cast<int64_t>(v.size()) < batch_size) {
      Sample s;
      if (!ds->next(s)) {
        done = true;
        break;
      }
      v.push_back(std::move(s));
    }
    if (v.empty() || (drop_last && static_cast<int64_t>(v.size()) < batch_size)) return false;
    out = stack_samples(v);
    return true;
  }
  std::shared_ptr<Dataset> ds;
  int64_t batch_size;
  bool drop_last;
  bool done = false;
};

// An iterable dataset read by every process: plain batching with one process, IterableDatasetShard's
// slices with several. One batch is read ahead, as DataLoaderShard does, to know which is the last.
struct StreamPass final : DataLoader::Pass {
  StreamPass(std::shared_ptr<Dataset> dataset, int64_t epoch, const ShardSpec& spec, bool shard_it, int64_t skip)
      : ds(std::move(dataset)), plain(ds, spec.batch_size, spec.drop_last), skip(skip) {
    if (shard_it) shard.emplace(spec);
    ds->start(epoch);
  }

  bool read(Sample& out, int64_t& real) {
    real = 0;
    if (!shard) return plain.read(out);
    if (finished) return false;
    const int64_t global = shard->global_batch_size();
    Sample s;
    while (ds->next(s)) {
      const int64_t e = seen++;
      if (e < global) first.push_back(s);
      cur.push_back(std::move(s));
      s = {};
      if (auto b = shard->push(e)) {
        out = collect(*b);
        cur.clear();
        cur_start = seen;
        return true;
      }
    }
    finished = true;
    auto b = shard->finish();
    if (!b) return false;
    out = collect(*b);
    real = shard->padded_real();
    return true;
  }

  Sample collect(const Batch& elements) const {
    std::vector<Sample> v;
    for (int64_t e : elements)
      v.push_back(e >= cur_start ? cur[static_cast<size_t>(e - cur_start)] : first[static_cast<size_t>(e)]);
    return stack_samples(v);
  }

  bool next(Sample& out) override {
    if (!primed) {
      primed = true;
      Sample skipped;
      int64_t r;
      for (; skip > 0; --skip)
        if (!read(skipped, r)) break;
      have = skip == 0 && read(pending, pending_real);
    }
    if (!have) return false;
    out = std::move(pending);
    const int64_t real = pending_real;
    pending = {};
    have = read(pending, pending_real);
    at_end = !have;
    padded_real = at_end ? real : 0;
    return true;
  }

  std::shared_ptr<Dataset> ds;
  StreamBatcher plain;
  std::optional<IterableShard> shard;
  std::vector<Sample> first, cur;  // the first global batch; the current one (elements cur_start...)
  int64_t seen = 0, cur_start = 0;
  bool finished = false;
  int64_t skip;
  bool primed = false, have = false;
  Sample pending;
  int64_t pending_real = 0;
};

// DataLoaderDispatcher's reading on rank 0: one step = one base batch (split_batches) or num_processes
// of them concatenated; `is_last` tells whether another step follows.
struct StepSource {
  virtual ~StepSource() = default;
  virtual bool next(Sample& step, bool& is_last) = 0;
};

struct IndexSteps final : StepSource {
  // `preamble`: rows sent ahead of the steps (the first step's first rows, when steps were skipped).
  IndexSteps(std::shared_ptr<Dataset> ds, std::vector<Batch> steps, std::optional<Batch> preamble)
      : ds(std::move(ds)), steps(std::move(steps)), preamble(std::move(preamble)) {}
  bool next(Sample& step, bool& is_last) override {
    if (preamble) {
      step = ds->get_batch(*preamble);
      preamble.reset();
      is_last = steps.empty();
      return true;
    }
    if (pos == steps.size()) return false;
    const Batch& b = steps[pos++];
    is_last = pos == steps.size();
    step = ds->get_batch(b);
    return true;
  }
  std::shared_ptr<Dataset> ds;
  std::vector<Batch> steps;
  std::optional<Batch> preamble;
  size_t pos = 0;
};

struct StreamSteps final : StepSource {
  StreamSteps(std::shared_ptr<Dataset> dataset, int64_t epoch, const ShardSpec& spec)
      : base(dataset, spec.batch_size, spec.drop_last),
        per_step(spec.split_batches ? 1 : spec.num_processes),
        drop_last(spec.drop_last) {
    dataset->start(epoch);
  }
  bool read_step(Sample& step) {
    std::vector<Sample> parts;
    Sample b;
    while (static_cast<int64_t>(parts.size()) < per_step && base.read(b)) parts.push_back(std::move(b));
    if (parts.empty() || (drop_last && static_cast<int64_t>(parts.size()) < per_step)) return false;
    step = parts.size() == 1 ? parts[0] : cat_rows(parts);
    return true;
  }
  bool next(Sample& step, bool& is_last) override {
    if (!primed) {
      primed = true;
      have = read_step(pending);
    }
    if (!have) return false;
    step = std::move(pending);
    pending = {};
    have = read_step(pending);
    is_last = !have;
    return true;
  }
  StreamBatcher base;
  int64_t per_step;
  bool drop_last;
  bool primed = false, have = false;
  Sample pending;
};

// What rank 0 broadcasts before each step, in one fixed-size int64 message: whether there is a step,
// and the names, dtypes and shapes of the tensors to receive (their names packed as bytes at the end).
constexpr int kMaxDims = 8, kMaxTensors = 16, kNameBytes = 1024;
constexpr int kPerTensor = 2 + kMaxDims;  // type, ndim, shape
enum Header : int64_t {
  kStatus,
  kIsLast,
  kCount,
  kTensors,
  kNames = kTensors + kMaxTensors * kPerTensor,
  kHeaderSize = kNames + kNameBytes / 8
};

void describe(const Sample& step, int64_t* h) {
  if (step.size() > kMaxTensors)
    throw std::invalid_argument("dispatch_batches: a batch of more than " + std::to_string(kMaxTensors) +
                                " tensors cannot be dispatched; it has " + std::to_string(step.size()));
  std::string names;
  for (const auto& [name, t] : step.items()) names += name + '\0';
  if (names.size() > kNameBytes)
    throw std::invalid_argument("dispatch_batches: the batch's tensor names (" + step.keys() + ") exceed " +
                                std::to_string(kNameBytes) + " bytes");
  h[kCount] = static_cast<int64_t>(step.size());
  int64_t* d = h + kTensors;
  for (const auto& [name, t] : step.items()) {
    if (t.dim() > kMaxDims)
      throw std::invalid_argument("dispatch_batches: tensor '" + name + "' has " + std::to_string(t.dim()) +
                                  " dims; at most " + std::to_string(kMaxDims) + " can be dispatched");
    d[0] = static_cast<int64_t>(t.scalar_type());
    d[1] = t.dim();
    for (int64_t k = 0; k < t.dim(); ++k) d[2 + k] = t.size(k);
    d += kPerTensor;
  }
  std::memcpy(h + kNames, names.data(), names.size());
}

// Gloo has no bool: it travels as uint8.
at::Tensor wire(const at::Tensor& t) { return t.scalar_type() == at::kBool ? t.to(at::kByte) : t.contiguous(); }

void broadcast_tensor(Comm& comm, at::Tensor& t, at::ScalarType type) {
  at::Tensor w = wire(t);
  if (w.numel() > 0) comm.broadcast(w, 0);
  t = type == at::kBool ? w.to(at::kBool) : w;
}

// The empty batch `describe` announced, allocated for receiving (bool as uint8, as it travels).
Sample allocate(const int64_t* h) {
  Sample step;
  const char* name = reinterpret_cast<const char*>(h + kNames);
  const int64_t* d = h + kTensors;
  for (int64_t i = 0; i < h[kCount]; ++i, d += kPerTensor) {
    auto type = static_cast<at::ScalarType>(d[0]);
    step.set(name, at::empty(std::vector<int64_t>(d + 2, d + 2 + d[1]),
                             at::TensorOptions().dtype(type == at::kBool ? at::kByte : type)));
    name += std::strlen(name) + 1;
  }
  return step;
}

// DataLoaderDispatcher: rank 0 reads each step and broadcasts it; every process keeps its slice, the
// last step completed from the first rows of the first step. Skipped steps are either read and
// dropped (`skip`: iterable datasets), or never read, the first step's first rows sent ahead instead
// (`preamble`), so a skipping loader pads exactly as the full one does.
struct DispatchPass final : DataLoader::Pass {
  DispatchPass(std::unique_ptr<StepSource> source, std::shared_ptr<Comm> comm, const ShardSpec& spec, int64_t skip,
               bool preamble)
      : source(std::move(source)), comm(std::move(comm)), spec(spec), skip(skip), preamble(preamble) {}

  bool receive(Sample& step, bool& is_last) {
    at::Tensor header = at::zeros({kHeaderSize}, at::kLong);
    int64_t* h = header.data_ptr<int64_t>();
    if (reader()) {
      try {
        if (source->next(step, is_last)) {
          h[kStatus] = 1;
          h[kIsLast] = is_last;
          describe(step, h);
        }
      } catch (...) {
        // Tell the others, so they fail now rather than wait for a batch that never comes.
        h[kStatus] = -1;
        if (comm) comm->broadcast(header, 0);
        throw;
      }
    }
    if (!comm) return h[kStatus] == 1;
    comm->broadcast(header, 0);
    if (h[kStatus] == -1) throw DistributedError("dispatch_batches: the main process failed to read the next batch");
    if (h[kStatus] == 0) return false;
    is_last = h[kIsLast] != 0;
    if (!reader()) step = allocate(h);
    Sample received;
    const int64_t* d = h + kTensors;
    for (const auto& [name, t] : step.items()) {
      at::Tensor buffer = t;
      broadcast_tensor(*comm, buffer, static_cast<at::ScalarType>(d[0]));
      received.set(name, std::move(buffer));
      d += kPerTensor;
    }
    step = std::move(received);
    return true;
  }

  // The group's rank 0 reads and sends; the shard spec only says which rows this process keeps (processes of one
  // data-parallel rank, tensor- or context-parallel peers, keep the same rows).
  bool reader() const { return !comm || comm->rank() == 0; }

  bool next(Sample& out) override {
    if (preamble && !finished) {
      preamble = false;
      bool nothing_follows = false;
      if (!receive(first, nothing_follows)) {
        finished = true;
        return false;
      }
      have_first = true;
    }
    while (!finished) {
      Sample step;
      bool is_last = false;
      if (!receive(step, is_last)) {
        finished = true;
        return false;
      }
      const int64_t observed = rows_of(step);
      if (!spec.drop_last && !have_first) {
        first = narrow_rows(step, 0, spec.num_processes);
        have_first = true;
      }
      DispatchSlice d = dispatch_slice(observed, is_last, spec);
      Sample rows = d.padded ? cat_rows({step, first}) : step;
      finished = is_last;
      if (yielded++ < skip) continue;
      out = narrow_rows(rows, d.start, d.length);
      at_end = is_last;
      padded_real = d.padded ? observed : 0;
      return true;
    }
    return false;
  }

  std::unique_ptr<StepSource> source;  // rank 0 only
  std::shared_ptr<Comm> comm;
  ShardSpec spec;
  int64_t skip;
  bool preamble;
  int64_t yielded = 0;
  bool finished = false, have_first = false;
  Sample first;
};

// torch.empty((), dtype=torch.int64).random_(): one draw from the default generator, as torch's
// RandomSampler (and Accelerate's prepare_data_loader) seed their generators.
uint64_t draw_seed() { return static_cast<uint64_t>(at::empty({}, at::kLong).random_().item<int64_t>()); }

}  // namespace

// ------------------------------------------------------------------------------------------------------
// DataLoader

DataLoader::DataLoader(std::shared_ptr<Dataset> ds, LoaderOptions opts) : ds_(std::move(ds)), opts_(opts) {
  if (!ds_) throw std::invalid_argument("dataset is NULL");
  if (ds_->iterable() && opts_.shuffle)
    throw OptionsError("dataloader options: \"shuffle\" is not available for an iterable dataset (its order is "
                       "the stream's)");
  if (opts_.shuffle && opts_.seed) gen_ = at::detail::createCPUGenerator(*opts_.seed);
  how_.spec.batch_size = opts_.batch_size;
  how_.spec.drop_last = opts_.drop_last;
}

DataLoader::DataLoader(std::shared_ptr<Dataset> ds, std::vector<Batch> batches, bool drop_last) : ds_(std::move(ds)) {
  if (!ds_) throw std::invalid_argument("dataset is NULL");
  if (ds_->iterable()) throw std::invalid_argument("explicit batches need an indexable dataset, not an iterable one");
  const int64_t n = ds_->size();
  for (size_t b = 0; b < batches.size(); ++b) {
    if (batches[b].empty()) throw std::invalid_argument("batch " + std::to_string(b) + " is empty");
    for (int64_t i : batches[b])
      if (i < 0 || i >= n)
        throw std::out_of_range("batch " + std::to_string(b) + " holds index " + std::to_string(i) + " outside [0, " +
                                std::to_string(n) + ")");
  }
  opts_.batch_size = 0;
  opts_.drop_last = drop_last;
  explicit_ = std::move(batches);
  how_.spec.batch_size = 0;
  how_.spec.drop_last = drop_last;
}

DataLoader::~DataLoader() {
  if (in_epoch_ && observer_) observer_->loader_end(this);
}

void DataLoader::prepare(const LoaderPrepare& how, c10::Device device, std::shared_ptr<LoaderObserver> observer) {
  LoaderPrepare h = how;
  h.spec.batch_size = opts_.batch_size;
  h.spec.drop_last = opts_.drop_last;
  const bool dispatch = h.dispatch_batches.value_or(ds_->iterable());
  // Check everything first: a refused prepare leaves the loader as it was.
  check_shard_spec(h.spec);
  // The dispatcher slices each step into equal parts (observed // num_processes rows each): steps built
  // from batches of varying size would silently lose rows, as they do in Accelerate.
  if (dispatch && explicit_)
    throw std::invalid_argument("dispatch_batches cannot dispatch batches of varying size (each step is cut into "
                                "equal parts); turn dispatch_batches off for a loader of explicit batches");
  if (h.spec.num_processes > 1 && !h.comm && (dispatch || (opts_.shuffle && !h.use_seedable_sampler)))
    throw StateError("this data loader needs the process group of its " + std::to_string(h.spec.num_processes) +
                     " processes");
  bool seedable = false;
  uint64_t seed = 0;
  at::Generator gen = gen_;
  if (opts_.shuffle) {
    if (h.use_seedable_sampler) {
      // SeedableRandomSampler: data_seed, else torch.initial_seed(); each pass reseeds with seed + epoch.
      seedable = true;
      const at::Generator& def = at::detail::getDefaultCPUGenerator();
      seed = h.data_seed ? *h.data_seed : def.current_seed();
    } else if ((h.spec.num_processes > 1 || (h.comm && h.comm->size() > 1)) && !dispatch) {
      // Every process must draw the same permutation: the sampler's generator (seeded from the default
      // generator when the loader has none) follows rank 0's, as synchronize_rng_states does. Also with one
      // data-parallel rank: its tensor / context-parallel peers read the same batches.
      if (!gen.defined()) gen = at::detail::createCPUGenerator(draw_seed());
      if (h.comm) {
        at::Tensor state;
        {
          std::lock_guard<std::mutex> lock(gen.mutex());
          state = gen.get_state().contiguous();
        }
        h.comm->broadcast(state, 0);
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(state);
      }
    }
  }
  if (in_epoch_ && observer_) observer_->loader_end(this);
  how_ = std::move(h);
  dispatch_ = dispatch;
  device_ = device;
  observer_ = std::move(observer);
  seedable_ = seedable;
  seed_ = seed;
  gen_ = gen;
  prepared_ = true;
  in_epoch_ = false;
  pass_.reset();
}

std::shared_ptr<DataLoader> DataLoader::skip_first_batches(int64_t num_batches) const {
  if (num_batches < 0) throw std::invalid_argument("num_batches must be >= 0; got " + std::to_string(num_batches));
  std::shared_ptr<DataLoader> c(new DataLoader());
  c->ds_ = ds_;
  c->opts_ = opts_;
  c->explicit_ = explicit_;
  c->prepared_ = prepared_;
  c->how_ = how_;
  c->dispatch_ = dispatch_;
  c->device_ = device_;
  c->observer_ = observer_;
  c->seedable_ = seedable_;
  c->seed_ = seed_;
  c->gen_ = gen_;  // shared, as the sampler is shared in Accelerate
  c->skip_ = skip_ + num_batches;
  c->epoch_ = epoch_;
  return c;
}

std::vector<int64_t> DataLoader::order_for_pass(int64_t epoch) {
  const int64_t n = ds_->size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (!opts_.shuffle) {
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  // torch's RandomSampler: randperm(n) from the sampler's generator; SeedableRandomSampler reseeds it
  // with seed + epoch; without a generator, each pass seeds a fresh one from the default generator.
  // A resumed pass draws from the saved state (the generator advances as it did then, and no seed is
  // drawn from the default generator a second time); every pass records its state for the next checkpoint.
  const bool resumed = resume_ && resume_->pass_generator.defined();
  at::Generator gen = seedable_        ? at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch))
                      : gen_.defined() ? gen_
                                       : at::detail::createCPUGenerator(resumed ? 0 : draw_seed());
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    if (resumed) gen.set_state(resume_->pass_generator);
    pass_gen_state_ = gen.get_state().clone();
  }
  at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
  return order;
}

std::vector<Batch> DataLoader::base_batches(const std::vector<int64_t>& order) const {
  return explicit_ ? *explicit_ : make_batches(order, opts_.batch_size, opts_.drop_last);
}

std::unique_ptr<DataLoader::Pass> DataLoader::start_pass(int64_t epoch) {
  const ShardSpec& spec = how_.spec;
  const bool sharded = prepared_ && spec.num_processes > 1;  // Accelerate leaves one process unsharded
  if (prepared_ && dispatch_) {
    std::unique_ptr<StepSource> source;
    const int64_t skip_after = ds_->iterable() ? skip_ : 0;
    const bool preamble = !ds_->iterable() && skip_ > 0 && !spec.drop_last;
    if (!how_.comm || how_.comm->rank() == 0) {  // the reader (DispatchPass::reader)
      if (ds_->iterable()) {
        source = std::make_unique<StreamSteps>(ds_, epoch, spec);
      } else {
        auto steps = dispatch_steps(base_batches(explicit_ ? std::vector<int64_t>{} : order_for_pass(epoch)), spec);
        std::optional<Batch> first_rows;
        if (preamble && !steps.empty())
          first_rows = Batch(steps[0].begin(),
                             steps[0].begin() + std::min<std::ptrdiff_t>(spec.num_processes,
                                                                         static_cast<std::ptrdiff_t>(steps[0].size())));
        steps.erase(steps.begin(), steps.begin() + std::min<int64_t>(skip_, static_cast<int64_t>(steps.size())));
        source = std::make_unique<IndexSteps>(ds_, std::move(steps), std::move(first_rows));
      }
    }
    return std::make_unique<DispatchPass>(std::move(source), how_.comm, spec, skip_after, preamble);
  }
  if (ds_->iterable()) return std::make_unique<StreamPass>(ds_, epoch, spec, sharded, skip_);
  auto base = base_batches(explicit_ ? std::vector<int64_t>{} : order_for_pass(epoch));
  std::vector<Batch> plan = sharded ? shard_batches(base, spec) : base;
  plan.erase(plan.begin(), plan.begin() + std::min<int64_t>(skip_, static_cast<int64_t>(plan.size())));
  return std::make_unique<IndexPass>(ds_, std::move(plan), sharded ? shard_padded_real(base, spec) : 0);
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch < 0) throw std::invalid_argument("epoch must be >= 0");
  if (in_epoch_ && observer_) observer_->loader_end(this);
  in_epoch_ = false;
  pass_.reset();
  epoch_ = epoch;
}

int64_t DataLoader::length() {
  if (ds_->iterable()) throw UnsupportedError("an iterable dataset has no length, so neither has its loader");
  std::vector<int64_t> order;
  if (!explicit_) {
    order.resize(static_cast<size_t>(ds_->size()));
    std::iota(order.begin(), order.end(), 0);
  }
  auto base = base_batches(order);
  size_t n = base.size();
  if (prepared_ && dispatch_) n = dispatch_steps(base, how_.spec).size();
  else if (prepared_ && how_.spec.num_processes > 1) n = shard_batches(base, how_.spec).size();
  return std::max<int64_t>(0, static_cast<int64_t>(n) - skip_);
}

bool DataLoader::end_of_dataloader() const { return in_epoch_ && pass_ && pass_->at_end; }

int64_t DataLoader::remainder() const { return end_of_dataloader() ? pass_->padded_real : 0; }

LoaderPosition DataLoader::position() const {
  LoaderPosition p;
  p.epoch = epoch_;
  p.batches = in_epoch_ ? yielded_ : 0;
  if (in_epoch_) {
    p.pass_generator = pass_gen_state_;
  } else if (gen_.defined()) {
    at::Generator gen = gen_;  // a handle to the same generator (mutex() is not const)
    std::lock_guard<std::mutex> lock(gen.mutex());
    p.pass_generator = gen.get_state().clone();
  }
  return p;
}

int64_t DataLoader::samples_per_step() const {
  if (explicit_ || ds_->iterable()) return 0;
  // Each process takes its own base batch per step, or (split_batches) all of them split one.
  return opts_.batch_size * (prepared_ && !how_.spec.split_batches ? how_.spec.num_processes : 1);
}

void DataLoader::resume(const LoaderPosition& at) {
  if (at.epoch < 0 || at.batches < 0)
    throw std::invalid_argument("data loader position: epoch " + std::to_string(at.epoch) + ", batches " +
                                std::to_string(at.batches) + " (both must be >= 0)");
  set_epoch(at.epoch);
  resume_ = at;
}

bool DataLoader::next(Sample& out) {
  RECORD_USER_SCOPE(kPhaseData);
  if (!in_epoch_) {
    // A resumed pass skips the batches given out before the checkpoint, once (skip_ is the loader's own).
    const int64_t resumed = resume_ ? resume_->batches : 0;
    skip_ += resumed;
    try {
      pass_ = start_pass(epoch_);
    } catch (...) {
      skip_ -= resumed;
      throw;
    }
    skip_ -= resumed;
    resume_.reset();
    yielded_ = resumed;
    in_epoch_ = true;
    if (observer_) observer_->loader_begin(this);
  }
  Sample s;
  if (!pass_->next(s)) {
    in_epoch_ = false;
    pass_.reset();
    ++epoch_;
    if (observer_) observer_->loader_end(this);
    return false;
  }
  ++yielded_;
  if (device_ != c10::Device(c10::kCPU))
    s = map_tensors(s, [this](const at::Tensor& t) { return t.to(device_, how_.non_blocking); });
  out = std::move(s);
  return true;
}

}  // namespace acc::core
