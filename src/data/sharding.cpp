#include "data/sharding.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace acc::core {

std::vector<Batch> make_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last) {
  if (batch_size < 1) throw std::invalid_argument("batch_size must be >= 1; got " + std::to_string(batch_size));
  std::vector<Batch> out;
  const size_t bs = static_cast<size_t>(batch_size);
  for (size_t i = 0; i < order.size(); i += bs) {
    size_t end = std::min(order.size(), i + bs);
    if (drop_last && end - i < bs) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i), order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

void check_shard_spec(const ShardSpec& s) {
  if (s.num_processes < 1 || s.process_index < 0 || s.process_index >= s.num_processes)
    throw std::invalid_argument("process index " + std::to_string(s.process_index) + " outside 0.." +
                                std::to_string(s.num_processes - 1));
  if (s.batch_size < 0) throw std::invalid_argument("batch_size must be >= 0 (0: varying)");
  if (s.split_batches && s.batch_size == 0)
    throw std::invalid_argument("split_batches needs a batch size: batches of varying size cannot be split across "
                                "processes");
  if (s.split_batches && s.batch_size % s.num_processes != 0)
    throw std::invalid_argument("split_batches: the batch size (" + std::to_string(s.batch_size) +
                                ") must be a multiple of the number of processes (" + std::to_string(s.num_processes) +
                                ")");
}

namespace {

// Python's seq[lo:hi] on a batch: clamped, never throws.
Batch slice(const Batch& b, size_t lo, size_t hi) {
  lo = std::min(lo, b.size());
  hi = std::min(std::max(hi, lo), b.size());
  return Batch(b.begin() + static_cast<std::ptrdiff_t>(lo), b.begin() + static_cast<std::ptrdiff_t>(hi));
}

std::vector<Batch> with_split(const std::vector<Batch>& batches, const ShardSpec& s) {
  std::vector<Batch> out;
  const size_t per = static_cast<size_t>(s.batch_size / s.num_processes);
  const size_t lo = per * static_cast<size_t>(s.process_index), hi = lo + per;
  for (const Batch& b : batches)
    if (static_cast<int64_t>(b.size()) == s.batch_size) out.push_back(slice(b, lo, hi));
  if (batches.empty()) return out;
  Batch last = batches.back();
  if (!s.drop_last && static_cast<int64_t>(last.size()) < s.batch_size) {
    if (!s.even_batches) {
      if (last.size() > lo) out.push_back(slice(last, lo, hi));
    } else {
      // Degenerate case: fewer samples than one batch; the first batch repeats until it fills one.
      Batch initial = batches.front();
      while (static_cast<int64_t>(initial.size()) < s.batch_size) {
        Batch twice = initial;
        twice.insert(twice.end(), initial.begin(), initial.end());
        initial = std::move(twice);
      }
      last.insert(last.end(), initial.begin(), initial.end());
      out.push_back(slice(last, lo, hi));
    }
  }
  return out;
}

std::vector<Batch> without_split(const std::vector<Batch>& batches, const ShardSpec& s) {
  std::vector<Batch> out;
  const int64_t n = s.num_processes, me = s.process_index;
  const bool varying = s.batch_size == 0;
  auto full = [&](const Batch& b) { return varying || static_cast<int64_t>(b.size()) == s.batch_size; };
  Batch initial;                      // the first num_processes batches' samples (fixed size)
  std::vector<Batch> initial_batches; // ... or the batches themselves (varying size)
  const Batch* to_yield = nullptr;
  int64_t idx = 0;
  for (; idx < static_cast<int64_t>(batches.size()); ++idx) {
    const Batch& b = batches[static_cast<size_t>(idx)];
    if (!s.drop_last && idx < n) {
      if (varying) initial_batches.push_back(b);
      else initial.insert(initial.end(), b.begin(), b.end());
    }
    if (idx % n == me) to_yield = &b;
    if (idx % n == n - 1 && full(b)) {
      out.push_back(*to_yield);
      to_yield = nullptr;
    }
  }
  const bool have_initial = varying ? !initial_batches.empty() : !initial.empty();
  if (s.drop_last || !have_initial) return out;
  // Python's truthiness: an empty batch is never yielded here.
  const bool pending = to_yield && !to_yield->empty();
  if (!s.even_batches) {
    if (pending) out.push_back(*to_yield);
    return out;
  }
  if (pending && full(*to_yield)) out.push_back(*to_yield);
  // Degenerate case: fewer samples (batches) than one round; repeat them until there are enough.
  if (varying) {
    while (static_cast<int64_t>(initial_batches.size()) < n) {
      std::vector<Batch> twice = initial_batches;
      twice.insert(twice.end(), initial_batches.begin(), initial_batches.end());
      initial_batches = std::move(twice);
    }
  } else {
    while (static_cast<int64_t>(initial.size()) < n * s.batch_size) {
      Batch twice = initial;
      twice.insert(twice.end(), initial.begin(), initial.end());
      initial = std::move(twice);
    }
  }
  Batch batch = batches.back();
  --idx;  // Python's loop variable: the index of the last batch seen
  if (full(batch)) {  // it was yielded by its process: move on to the next
    batch.clear();
    ++idx;
  }
  size_t cycle = 0;
  while (idx % n != 0 || !batch.empty()) {
    if (varying) {
      batch = initial_batches[cycle++];
    } else {
      size_t end = cycle + static_cast<size_t>(s.batch_size) - batch.size();
      Batch more = slice(initial, cycle, end);
      batch.insert(batch.end(), more.begin(), more.end());
      cycle = end;
    }
    if (idx % n == me) out.push_back(batch);
    batch.clear();
    ++idx;
  }
  return out;
}

}  // namespace

std::vector<Batch> shard_batches(const std::vector<Batch>& batches, const ShardSpec& s) {
  check_shard_spec(s);
  return s.split_batches ? with_split(batches, s) : without_split(batches, s);
}

int64_t shard_padded_real(const std::vector<Batch>& batches, const ShardSpec& s) {
  check_shard_spec(s);
  if (s.drop_last || !s.even_batches || batches.empty()) return 0;
  const Batch& last = batches.back();
  if (s.split_batches) return static_cast<int64_t>(last.size()) < s.batch_size ? static_cast<int64_t>(last.size()) : 0;
  const size_t nb = batches.size(), n = static_cast<size_t>(s.num_processes);
  const bool padded = nb % n != 0 || (s.batch_size > 0 && static_cast<int64_t>(last.size()) < s.batch_size);
  if (!padded) return 0;
  int64_t real = 0;
  for (size_t i = (nb - 1) / n * n; i < nb; ++i) real += static_cast<int64_t>(batches[i].size());
  return real;
}

IterableShard::IterableShard(const ShardSpec& spec) : spec_(spec) {
  check_shard_spec(spec);
  if (spec.batch_size < 1) throw std::invalid_argument("an iterable dataset needs a batch size >= 1");
  global_ = spec.split_batches ? spec.batch_size : spec.batch_size * spec.num_processes;
  per_process_ = spec.split_batches ? spec.batch_size / spec.num_processes : spec.batch_size;
}

std::optional<Batch> IterableShard::push(int64_t element) {
  if (element != seen_)
    throw std::logic_error("IterableShard: element " + std::to_string(element) + " arrived out of order");
  ++seen_;
  if (seen_ % global_ != 0) return std::nullopt;
  if (first_size_ == 0) first_size_ = global_;
  const int64_t start = seen_ - global_ + spec_.process_index * per_process_;
  Batch b(static_cast<size_t>(per_process_));
  for (int64_t i = 0; i < per_process_; ++i) b[static_cast<size_t>(i)] = start + i;
  return b;
}

std::optional<Batch> IterableShard::finish() {
  padded_real_ = 0;
  const int64_t current = seen_ % global_;
  if (spec_.drop_last || current == 0) return std::nullopt;
  const int64_t start = seen_ - current;
  if (first_size_ == 0) first_size_ = current;  // the stream was shorter than one global batch
  Batch batch;
  for (int64_t e = start; e < seen_; ++e) batch.push_back(e);
  while (static_cast<int64_t>(batch.size()) < global_)
    for (int64_t e = 0; e < first_size_; ++e) batch.push_back(e);
  padded_real_ = current;
  const size_t lo = static_cast<size_t>(spec_.process_index * per_process_);
  return slice(batch, lo, lo + static_cast<size_t>(per_process_));
}

std::vector<Batch> dispatch_steps(const std::vector<Batch>& base, const ShardSpec& s) {
  check_shard_spec(s);
  if (s.split_batches) return base;
  std::vector<Batch> steps;
  const size_t n = static_cast<size_t>(s.num_processes);
  for (size_t i = 0; i < base.size(); i += n) {
    const size_t end = std::min(base.size(), i + n);
    if (end - i < n && s.drop_last) break;
    Batch step;
    for (size_t j = i; j < end; ++j) step.insert(step.end(), base[j].begin(), base[j].end());
    steps.push_back(std::move(step));
  }
  return steps;
}

DispatchSlice dispatch_slice(int64_t observed, bool is_last, const ShardSpec& s) {
  const int64_t n = s.num_processes;
  DispatchSlice d;
  d.length = observed / n;
  d.padded = !s.drop_last && is_last && observed % n != 0;
  if (d.padded) ++d.length;
  d.start = s.process_index * d.length;
  return d;
}

std::vector<Batch> dispatch_shard(const std::vector<Batch>& base, const ShardSpec& s) {
  std::vector<Batch> steps = dispatch_steps(base, s), out;
  if (steps.empty()) return out;
  const Batch first = slice(steps.front(), 0, static_cast<size_t>(s.num_processes));
  for (size_t k = 0; k < steps.size(); ++k) {
    Batch rows = steps[k];
    DispatchSlice d = dispatch_slice(static_cast<int64_t>(rows.size()), k + 1 == steps.size(), s);
    if (d.padded) rows.insert(rows.end(), first.begin(), first.end());
    out.push_back(slice(rows, static_cast<size_t>(d.start), static_cast<size_t>(d.start + d.length)));
  }
  return out;
}

std::vector<int64_t> context_parallel_positions(int64_t seq_len, int cp_size, int cp_rank) {
  if (cp_size < 1 || cp_rank < 0 || cp_rank >= cp_size)
    throw std::invalid_argument("context parallel rank " + std::to_string(cp_rank) + " outside a group of " +
                                std::to_string(cp_size));
  if (seq_len < 0) throw std::invalid_argument("sequence length " + std::to_string(seq_len) + " is negative");
  std::vector<int64_t> out;
  const int64_t n = cp_size, r = cp_rank;
  if (seq_len % (2 * n) == 0) {  // torch's _HeadTailLoadBalancer
    const int64_t chunk = seq_len / (2 * n);
    for (int64_t c : {r, 2 * n - 1 - r})
      for (int64_t i = c * chunk; i < (c + 1) * chunk; ++i) out.push_back(i);
    return out;
  }
  const int64_t part = (seq_len + n - 1) / n;  // torch.chunk
  for (int64_t i = r * part; i < std::min(seq_len, (r + 1) * part); ++i) out.push_back(i);
  return out;
}

}  // namespace acc::core
