// The reporting CPU allocator of the C++ benchmarks (bench/zero_memory.cpp, bench/tp_step.cpp): installed before
// anything is allocated, every tensor's storage (parameters, gradients, optimizer state, activations, communication
// buffers) goes through it, so its peak is the tensors' high-water mark.
#pragma once
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace bench {

// Wraps the default CPU allocator; data pointers keep being their own context (ATen checks it), so the sizes live in
// a map. One per process: install() makes it the CPU allocator.
class CountingAllocator final : public c10::Allocator {
 public:
  // record_at_peak: also keep the sizes of what is live at the highest peak (print_at_peak), at the cost of a copy
  // of the map at every new high.
  static CountingAllocator& install(bool record_at_peak) {
    static CountingAllocator self(c10::GetCPUAllocator(), record_at_peak);
    instance = &self;
    c10::SetCPUAllocator(&self, /*priority=*/100);
    return self;
  }
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    inner.release_context();
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[data] = static_cast<int64_t>(n);
    now_ += static_cast<int64_t>(n);
    peak_ = std::max(peak_, now_);
    if (record_ && now_ > highest_) {
      highest_ = now_;
      at_peak_.clear();
      for (const auto& [ptr, bytes] : sizes_) at_peak_.push_back(bytes);
    }
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  int64_t now() {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  // The peak since the last call; the next one starts from what is allocated now.
  int64_t take_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t p = peak_;
    peak_ = now_;
    return p;
  }
  bool recording() const { return record_; }
  // What was live when the highest peak was set: sizes of allocations >= 1 MB, the rest summed (record_at_peak).
  void print_at_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    std::sort(at_peak_.begin(), at_peak_.end(), std::greater<int64_t>());
    int64_t small = 0;
    std::printf("AT_PEAK %.1f MB:", static_cast<double>(highest_) / 1e6);
    for (int64_t b : at_peak_)
      if (b >= 1000000) std::printf(" %.1f", static_cast<double>(b) / 1e6);
      else small += b;
    std::printf(" + %.1f in smaller ones\n", static_cast<double>(small) / 1e6);
  }
  // Peaks before this (building the whole model before sharding it) are not what the AT_PEAK line shows.
  void forget_highest() {
    std::lock_guard<std::mutex> lock(mu_);
    highest_ = now_;
  }

 private:
  CountingAllocator(c10::Allocator* base, bool record_at_peak)
      : base_(base), base_delete_(base->raw_deleter()), record_(record_at_peak) {}
  // The deleter is a plain function pointer, hence the one instance it finds its map through.
  static inline CountingAllocator* instance = nullptr;
  static void release(void* data) {
    CountingAllocator& self = *instance;
    {
      std::lock_guard<std::mutex> lock(self.mu_);
      auto it = self.sizes_.find(data);
      if (it != self.sizes_.end()) {
        self.now_ -= it->second;
        self.sizes_.erase(it);
      }
    }
    self.base_delete_(data);
  }
  c10::Allocator* base_;
  c10::DeleterFnPtr base_delete_;
  const bool record_;
  std::mutex mu_;
  std::unordered_map<void*, int64_t> sizes_;
  std::vector<int64_t> at_peak_;
  int64_t highest_ = 0;
  int64_t now_ = 0, peak_ = 0;
};

}  // namespace bench
