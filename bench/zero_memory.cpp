// Peak tensor memory of one rank training libacc's GPT with AdamW under the strategy its Accelerate config
// chooses (DDP, ZeRO-1/2/3, FSDP), driven by bench/zero_memory.py. Bytes are counted by a reporting CPU allocator
// (counting_allocator.hpp) installed before anything is allocated: every tensor's storage (parameters, gradients, optimizer state,
// activations, communication buffers) is allocated through it, so its peak is the tensors' high-water mark.
// Usage: zero_memory LAYERS EMBD HEADS VOCAB SEQ BATCH STEPS
// With ZERO_MEMORY_AT_PEAK set, rank 0 also prints the sizes of the tensors live at its peak (AT_PEAK line).
// Prints one line: MEM {"rank": r, "params": P, "after_prepare": bytes, "peak": bytes, and the peak of each phase:
// "forward", "backward", "step" (with zero_grad)}
#include <acc/acc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "counting_allocator.hpp"
extern "C" {
#include "step.h"
}

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: zero_memory LAYERS EMBD HEADS VOCAB SEQ BATCH STEPS\n");
    return 2;
  }
  bench::CountingAllocator& counting = bench::CountingAllocator::install(std::getenv("ZERO_MEMORY_AT_PEAK") != nullptr);
  const int layers = std::atoi(argv[1]), embd = std::atoi(argv[2]), heads = std::atoi(argv[3]),
            vocab = std::atoi(argv[4]), seq = std::atoi(argv[5]), batch = std::atoi(argv[6]),
            steps = std::atoi(argv[7]);
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
              static_cast<long long>(*std::max_element(phase_peak, phase_peak + 3)),
              static_cast<long long>(phase_peak[0]), static_cast<long long>(phase_peak[1]),
              static_cast<long long>(phase_peak[2]));
  if (counting.recording() && rank == 0) counting.print_at_peak();  // zero_memory.py shows rank 0's
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
