#include "data/sharding.hpp"

#include <stdexcept>
#include <string>

namespace acc {

std::vector<Batch> make_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last) {
  std::vector<Batch> out;
  for (size_t i = 0; i < order.size(); i += static_cast<size_t>(batch_size)) {
    size_t end = std::min(order.size(), i + static_cast<size_t>(batch_size));
    if (drop_last && end - i < static_cast<size_t>(batch_size)) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i), order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

namespace {

std::vector<Batch> with_split(const std::vector<Batch>& batches, const ShardSpec& s) {
  std::vector<Batch> out;
  const size_t per = static_cast<size_t>(s.batch_size / s.num_processes);
  const size_t lo = per * static_cast<size_t>(s.process_index), hi = lo + per;
  auto slice = [&](const Batch& b) {
    return Batch(b.begin() + static_cast<std::ptrdiff_t>(std::min(lo, b.size())),
                 b.begin() + static_cast<std::ptrdiff_t>(std::min(hi, b.size())));
  };
  for (const Batch& b : batches)
    if (static_cast<int64_t>(b.size()) == s.batch_size) out.push_back(slice(b));
  if (batches.empty()) return out;
  Batch last = batches.back();
  if (!s.drop_last && static_cast<int64_t>(last.size()) < s.batch_size) {
    if (!s.even_batches) {
      if (last.size() > lo) out.push_back(slice(last));
    } else {
      Batch initial = batches.front();
      while (static_cast<int64_t>(initial.size()) < s.batch_size) {
        Batch twice = initial;
        twice.insert(twice.end(), initial.begin(), initial.end());
        initial = twice;
      }
      last.insert(last.end(), initial.begin(), initial.end());
      out.push_back(slice(last));
    }
  }
  return out;
}

std::vector<Batch> without_split(const std::vector<Batch>& batches, const ShardSpec& s) {
  std::vector<Batch> out;
  const int64_t n = s.num_processes, me = s.process_index;
  Batch initial;
  const Batch* to_yield = nullptr;
  int64_t idx = 0;
  for (; idx < static_cast<int64_t>(batches.size()); ++idx) {
    const Batch& b = batches[static_cast<size_t>(idx)];
    if (!s.drop_last && idx < n) initial.insert(initial.end(), b.begin(), b.end());
    if (idx % n == me) to_yield = &b;
    if (idx % n == n - 1 && static_cast<int64_t>(b.size()) == s.batch_size) {
      out.push_back(*to_yield);
      to_yield = nullptr;
    }
  }
  if (s.drop_last || initial.empty()) return out;
  if (!s.even_batches) {
    if (to_yield) out.push_back(*to_yield);
    return out;
  }
  if (to_yield && static_cast<int64_t>(to_yield->size()) == s.batch_size) out.push_back(*to_yield);
  // Degenerate case: fewer samples than one round of batches.
  while (static_cast<int64_t>(initial.size()) < n * s.batch_size) {
    Batch twice = initial;
    twice.insert(twice.end(), initial.begin(), initial.end());
    initial = twice;
  }
  Batch batch = batches.back();
  --idx;  // the index of the last batch seen
  if (static_cast<int64_t>(batch.size()) == s.batch_size) {
    batch.clear();
    ++idx;
  }
  size_t cycle = 0;
  while (idx % n != 0 || !batch.empty()) {
    size_t end = cycle + static_cast<size_t>(s.batch_size) - batch.size();
    batch.insert(batch.end(), initial.begin() + static_cast<std::ptrdiff_t>(cycle),
                 initial.begin() + static_cast<std::ptrdiff_t>(end));
    if (idx % n == me) out.push_back(batch);
    cycle = end;
    batch.clear();
    ++idx;
  }
  return out;
}

}  // namespace

std::vector<Batch> shard_batches(const std::vector<Batch>& batches, const ShardSpec& s) {
  if (s.num_processes < 1 || s.process_index < 0 || s.process_index >= s.num_processes)
    throw std::invalid_argument("process index " + std::to_string(s.process_index) + " outside 0.." +
                                std::to_string(s.num_processes - 1));
  if (s.split_batches && s.batch_size % s.num_processes != 0)
    throw std::invalid_argument("split_batches: the batch size (" + std::to_string(s.batch_size) +
                                ") must be a multiple of the number of processes (" +
                                std::to_string(s.num_processes) + ")");
  return s.split_batches ? with_split(batches, s) : without_split(batches, s);
}

}  // namespace acc
