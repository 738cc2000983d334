// libacc side of bench/tp.py: tensor parallelism (and TP x FSDP2) on a Hugging Face LlamaForCausalLM through the C
// ABI, one process per rank started by `acc launch`; the mesh comes from the parallelism_config in the environment
// (PARALLELISM_CONFIG_TP_SIZE, ..._DP_SHARD_SIZE, as accelerate launch exports it), and acc_prepare splits the model.
// tp_step.py takes the same arguments and does the same with torch's parallelize_module and fully_shard.
//   acc launch ... tp_step MODEL_DIR DP_SHARD TP VOCAB BATCH SEQ WARMUP STEPS LR
// acc_model_from_pretrained(MODEL_DIR), AdamW (lr LR, weight_decay 0.01, PyTorch's other defaults) over it,
// acc_prepare, then per step: the dp rank's tokens (token i is mix(i) % VOCAB from dp_rank * BATCH * SEQ on, the same
// at every step; dp_rank = rank / TP, tp innermost), acc_model_forward(x, labels x: shifted inside), acc_backward,
// acc_optimizer_step, acc_optimizer_zero_grad. WARMUP untimed steps, then STEPS timed between barriers.
// Every rank writes BENCH_OUT/rank<R>.json: tokens/s of the job (each dp rank's tokens once), its ms per phase, peak
// resident memory (VmHWM), resident memory before the load and after prepare, its loss at every step.
// With BENCH_COUNT_BYTES=1 a reporting CPU allocator (bench/counting_allocator.hpp) counts every tensor's bytes:
// "bytes" holds what is allocated after prepare, the peak by the end of prepare and the peak of each phase over the
// steps (forward, backward, optimizer); off for the timed runs (its lock is in every allocation).
#include <acc/acc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "counting_allocator.hpp"
extern "C" {
#include "step.h"
}

namespace {

enum { FORWARD, BACKWARD, OPTIMIZER, PHASES };
const char* const phase_names[PHASES] = {"forward", "backward", "optimizer"};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: %s MODEL_DIR DP_SHARD TP VOCAB BATCH SEQ WARMUP STEPS LR\n", argv[0]);
    return 2;
  }
  const char* count = std::getenv("BENCH_COUNT_BYTES");
  bench::CountingAllocator* counting = nullptr;
  if (count && std::strcmp(count, "1") == 0) counting = &bench::CountingAllocator::install(/*record_at_peak=*/false);
  const char* model_dir = argv[1];
  const int dp_shard = std::atoi(argv[2]), tp = std::atoi(argv[3]);
  const int64_t vocab = std::atoll(argv[4]), batch = std::atoll(argv[5]), seq = std::atoll(argv[6]);
  const int warmup = std::atoi(argv[7]), steps = std::atoi(argv[8]);
  const double lr = std::atof(argv[9]);
  const char* out_dir = std::getenv("BENCH_OUT");
  if (!out_dir) {
    std::fprintf(stderr, "BENCH_OUT (the directory for each rank's result) is not set\n");
    return 2;
  }
  const int64_t n = batch * seq;

  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 0}", &acc));
  int32_t rank, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  if (dp_shard * tp != world) {
    std::fprintf(stderr, "DP_SHARD %d x TP %d is not the %d processes\n", dp_shard, tp, world);
    return 2;
  }
  const int dp_rank = rank / tp;
  const double rss_before_mb = status_mb("VmRSS");

  acc_model* model;
  CHECK(acc_model_from_pretrained(model_dir, NULL, &model));
  int64_t parameters, local_parameters;
  CHECK(acc_model_num_parameters(model, &parameters));
  CHECK(acc_model_set_training(model, 1));  // from_pretrained gives eval mode, as transformers
  char opt_options[128];
  std::snprintf(opt_options, sizeof opt_options, "{\"type\": \"adamw\", \"lr\": %.9g, \"weight_decay\": 0.01}", lr);
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, opt_options, &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  CHECK(acc_model_num_parameters(model, &local_parameters));
  const double rss_prepared_mb = status_mb("VmRSS");
  const int64_t after_prepare = counting ? counting->now() : 0, prepare_peak = counting ? counting->take_peak() : 0;
  int64_t phase_peak[PHASES] = {0, 0, 0};

  std::vector<double> losses(static_cast<size_t>(warmup + steps));
  std::vector<int64_t> x(static_cast<size_t>(n));
  const uint32_t base = static_cast<uint32_t>(dp_rank * n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<int64_t>(mix(base + static_cast<uint32_t>(i)) % vocab);
  const int64_t shape[2] = {batch, seq};
  acc_tensor* tx;
  CHECK(acc_tensor_from_host(x.data(), x.size() * sizeof(int64_t), ACC_INT64, shape, 2, &tx));
  double phase[PHASES] = {0}, t0 = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      CHECK(acc_wait_for_everyone(acc));
      t0 = now();
      for (double& p : phase) p = 0;
    }
    double t[PHASES + 1];
    t[FORWARD] = now();
    acc_tensor* loss;
    CHECK(acc_model_forward(model, tx, tx, NULL, &loss));
    if (counting) phase_peak[FORWARD] = std::max(phase_peak[FORWARD], counting->take_peak());
    t[BACKWARD] = now();
    CHECK(acc_backward(acc, loss));
    if (counting) phase_peak[BACKWARD] = std::max(phase_peak[BACKWARD], counting->take_peak());
    t[OPTIMIZER] = now();
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    if (counting) phase_peak[OPTIMIZER] = std::max(phase_peak[OPTIMIZER], counting->take_peak());
    t[PHASES] = now();
    CHECK(acc_tensor_item(loss, &losses[static_cast<size_t>(step)]));
    acc_tensor_destroy(loss);
    for (int p = 0; p < PHASES; ++p) phase[p] += t[p + 1] - t[p];
  }
  CHECK(acc_wait_for_everyone(acc));
  const double seconds = now() - t0;

  const std::string path = std::string(out_dir) + "/rank" + std::to_string(rank) + ".json";
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::perror(path.c_str());
    return 1;
  }
  std::fprintf(
      f,
      "{\"impl\": \"libacc\", \"rank\": %d, \"world\": %d, \"dp_shard\": %d, \"tp\": %d, \"parameters\": %lld, "
      "\"local_parameters\": %lld, \"tokens_per_s\": %.3f, \"step_ms\": %.3f, \"peak_rss_mb\": %.1f, "
      "\"rss_before_load_mb\": %.1f, \"rss_prepared_mb\": %.1f, \"phase_ms\": {",
      static_cast<int>(rank), static_cast<int>(world), dp_shard, tp, static_cast<long long>(parameters),
      static_cast<long long>(local_parameters), static_cast<double>(steps) * n * dp_shard / seconds,
      1e3 * seconds / steps, status_mb("VmHWM"), rss_before_mb, rss_prepared_mb);
  for (int p = 0; p < PHASES; ++p)
    std::fprintf(f, "%s\"%s\": %.3f", p ? ", " : "", phase_names[p], 1e3 * phase[p] / steps);
  std::fprintf(f, "}, ");
  if (counting)
    std::fprintf(f,
                 "\"bytes\": {\"after_prepare\": %lld, \"prepare_peak\": %lld, \"forward\": %lld, \"backward\": %lld, "
                 "\"optimizer\": %lld}, ",
                 static_cast<long long>(after_prepare), static_cast<long long>(prepare_peak),
                 static_cast<long long>(phase_peak[FORWARD]), static_cast<long long>(phase_peak[BACKWARD]),
                 static_cast<long long>(phase_peak[OPTIMIZER]));
  std::fprintf(f, "\"losses\": [");
  for (size_t i = 0; i < losses.size(); ++i) std::fprintf(f, "%s%.9g", i ? ", " : "", losses[i]);
  std::fprintf(f, "]}\n");
  if (std::fclose(f) != 0) {
    std::perror(path.c_str());
    return 1;
  }
  acc_tensor_destroy(tx);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
