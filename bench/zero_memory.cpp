// Peak tensor memory of one rank training libacc's GPT with AdamW under the strategy its Accelerate config
// chooses (DDP, ZeRO-1/2/3, FSDP), driven by bench/zero_memory.py. Bytes are counted by a reporting CPU allocator
// installed before anything is allocated: every tensor's storage (parameters, gradients, optimizer state,
// activations, communication buffers) is allocated through it, so its peak is the tensors' high-water mark.
// Usage: zero_memory LAYERS EMBD HEADS VOCAB SEQ BATCH STEPS
// With ZERO_MEMORY_AT_PEAK set, it also prints the sizes of the tensors live at its peak (AT_PEAK line).
// Prints one line: MEM {"rank": r, "params": P, "after_prepare": bytes, "peak": bytes, and the peak of each phase:
// "forward", "backward", "step" (with zero_grad)}
#include <acc/acc.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" {
#include "step.h"
}

namespace {

// Wraps the default CPU allocator; data pointers keep being their own context (ATen checks it), so the sizes
// live in a map.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base), base_delete_(base->raw_deleter()) {}
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
  // What was live when the highest peak was set: sizes of allocations >= 1 MB, the rest summed (ZERO_MEMORY_AT_PEAK).
  void print_at_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    std::sort(at_peak_.begin(), at_peak_.end(), std::greater<int64_t>());
    int64_t small = 0;
    std::printf("AT_PEAK %lld MB:", static_cast<long long>(highest_));
    for (int64_t b : at_peak_)
      if (b >= 1000000)
        std::printf(" %.1f", static_cast<double>(b) / 1e6);
      else
        small += b;
    std::printf(" + %.1f in smaller ones\n", static_cast<double>(small) / 1e6);
  }
  // Peaks before this (building the whole model before sharding it) are not what the AT_PEAK line shows.
  void forget_highest() {
    std::lock_guard<std::mutex> lock(mu_);
    highest_ = now_;
  }
  static CountingAllocator* instance;
  bool record_ = std::getenv("ZERO_MEMORY_AT_PEAK") != nullptr;

 private:
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
  std::mutex mu_;
  std::unordered_map<void*, int64_t> sizes_;
  std::vector<int64_t> at_peak_;
  int64_t highest_ = 0;
  int64_t now_ = 0, peak_ = 0;
};

CountingAllocator* CountingAllocator::instance = nullptr;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: zero_memory LAYERS EMBD HEADS VOCAB SEQ BATCH STEPS\n");
    return 2;
  }
  static CountingAllocator counting(c10::GetCPUAllocator());
  CountingAllocator::instance = &counting;
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  const int layers = std::atoi(argv[1]), embd = std::atoi(argv[2]), heads = std::atoi(argv[3]),
            vocab = std::atoi(argv[4]), seq = std::atoi(argv[5]), batch = std::atoi(argv[6]), steps = std::atoi(argv[7]);
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 1}", &acc));
  char spec[256];
  std::snprintf(spec, sizeof spec,
                "{\"type\": \"gpt\", \"vocab_size\": %d, \"block_size\": %d, \"n_layer\": %d, \"n_head\": %d, "
                "\"n_embd\": %d}",
                vocab, seq, layers, heads, embd);
  acc_model* model;
  CHECK(acc_model_create(spec, &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.0001}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  int64_t params;
  int32_t rank;
  CHECK(acc_model_num_parameters(model, &params));
  CHECK(acc_process_index(acc, &rank));
  const int64_t after_prepare = counting.now();
  counting.take_peak();
  counting.forget_highest();
  int64_t phase_peak[3] = {0, 0, 0};  // forward, backward, optimizer step
  std::vector<int64_t> ids(static_cast<size_t>(batch) * seq), next(ids.size());
  const int64_t shape[2] = {batch, seq};
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const uint32_t k = static_cast<uint32_t>((s * 4 + rank) * ids.size() + i);
      ids[i] = mix(k) % static_cast<uint32_t>(vocab);
      next[i] = mix(k + 1) % static_cast<uint32_t>(vocab);
    }
    acc_tensor *x, *y, *loss;
    CHECK(acc_tensor_from_host(ids.data(), ids.size() * sizeof(int64_t), ACC_INT64, shape, 2, &x));
    CHECK(acc_tensor_from_host(next.data(), next.size() * sizeof(int64_t), ACC_INT64, shape, 2, &y));
    // The peak of each phase (the allocator's peak is reset between them).
    CHECK(acc_model_forward(model, x, y, NULL, &loss));
    phase_peak[0] = std::max(phase_peak[0], counting.take_peak());
    CHECK(acc_backward(acc, loss));
    phase_peak[1] = std::max(phase_peak[1], counting.take_peak());
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    phase_peak[2] = std::max(phase_peak[2], counting.take_peak());
    acc_tensor_destroy(loss);
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
  }
  std::printf("MEM {\"rank\": %d, \"params\": %lld, \"after_prepare\": %lld, \"peak\": %lld, \"forward\": %lld, "
              "\"backward\": %lld, \"step\": %lld}\n",
              rank, static_cast<long long>(params), static_cast<long long>(after_prepare),
              static_cast<long long>(*std::max_element(phase_peak, phase_peak + 3)), static_cast<long long>(phase_peak[0]),
              static_cast<long long>(phase_peak[1]), static_cast<long long>(phase_peak[2]));
  if (counting.record_) counting.print_at_peak();
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
