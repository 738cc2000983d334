// What the files of src/data/prep share and nobody else needs.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "data/prep/prep.hpp"

namespace acc::data {

std::string join_names(const std::vector<std::string>& names);

// Runs work(begin, end, chunk) on chunks of [0, n) of kRowsPerChunk rows, which up to `threads` threads take in
// turn, and joins the chunks' examples in row order. Small chunks keep the tokenizer's working memory small (its
// encodings of a whole slice at once took hundreds of MB of fresh pages) and the threads evenly busy (rows differ
// in length). A chunk stops at its first error; no chunk after a failed one is started, and the error of the
// earliest failed chunk is rethrown: the one a single thread would have met first.
inline constexpr size_t kRowsPerChunk = 256;

template <class Work>
Examples run_chunked(size_t n, size_t threads, Work work) {
  const size_t chunks = std::max<size_t>(1, (n + kRowsPerChunk - 1) / kRowsPerChunk);
  threads = std::max<size_t>(1, std::min(threads, chunks));
  std::vector<Examples> parts(chunks);
  std::vector<std::exception_ptr> errors(chunks);
  std::atomic<size_t> next{0}, first_failed{chunks};
  auto run = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks && c < first_failed.load();) {
      try {
        work(c * kRowsPerChunk, std::min(n, (c + 1) * kRowsPerChunk), parts[c]);
      } catch (...) {
        errors[c] = std::current_exception();
        for (size_t f = first_failed.load(); c < f && !first_failed.compare_exchange_weak(f, c);) {
        }
      }
    }
  };
  if (threads == 1) {
    run();
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(run);
    for (auto& th : pool) th.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  Examples out = std::move(parts[0]);
  for (size_t i = 0; i < out.columns.size(); ++i) {  // room for every chunk's rows at once
    size_t values = 0, rows = 0;
    for (const Examples& p : parts)
      if (i < p.columns.size()) values += p.columns[i].values.size(), rows += p.columns[i].rows();
    out.columns[i].values.reserve(values);
    out.columns[i].offsets.reserve(rows + 1);
  }
  for (size_t c = 1; c < chunks; ++c) out.append(parts[c]);
  return out;
}

}  // namespace acc::data
