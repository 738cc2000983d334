// What the files of src/data/prep share and nobody else needs.
#pragma once
#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "data/prep/prep.hpp"

namespace acc::data {

std::string join_names(const std::vector<std::string>& names);

// Runs work(begin, end, slice) on contiguous slices of [0, n) on up to `threads` threads and joins the slices'
// examples in row order. Each slice stops at its first error; the error of the earliest slice is rethrown, which
// is the one a single thread would have met first.
template <class Work>
Examples run_sliced(size_t n, size_t threads, Work work) {
  threads = std::max<size_t>(1, std::min(threads, n));
  std::vector<Examples> parts(threads);
  std::vector<std::exception_ptr> errors(threads);
  auto one = [&](size_t t) {
    const size_t begin = n * t / threads, end = n * (t + 1) / threads;
    try {
      work(begin, end, parts[t]);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  if (threads == 1) {
    one(0);
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(one, t);
    for (auto& th : pool) th.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  Examples out = std::move(parts[0]);
  for (size_t t = 1; t < threads; ++t) out.append(parts[t]);
  return out;
}

}  // namespace acc::data
