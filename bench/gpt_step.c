/* libacc side of bench/run.py: DDP training steps of a built-in GPT on synthetic tokens, timed per
 * phase after a warm-up. Prints one JSON line from the main process: tokens/s, milliseconds per step of
 * each phase (data, forward, backward with the gradient all-reduce, optimizer step + zero_grad) and
 * this process's peak RSS. gpt_step.py takes the same arguments and builds the same model and batches.
 *   acc launch --num_processes 2 gpt_step STEPS WARMUP BATCH SEQ VOCAB LAYERS HEADS EMBD */
#define _POSIX_C_SOURCE 200809L
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "step.h"

enum { DATA, FORWARD, BACKWARD, OPTIMIZER, PHASES };
static const char* const phase_names[PHASES] = {"data", "forward", "backward", "optimizer"};

int main(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: %s STEPS WARMUP BATCH SEQ VOCAB LAYERS HEADS EMBD\n", argv[0]);
    return 2;
  }
  const int steps = atoi(argv[1]), warmup = atoi(argv[2]);
  const int64_t batch = atoll(argv[3]), seq = atoll(argv[4]), vocab = atoll(argv[5]);
  const int64_t n = batch * seq;
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 0}", &acc));
  int32_t rank, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  char spec[256];
  snprintf(spec, sizeof spec,
           "{\"type\": \"gpt\", \"vocab_size\": %s, \"block_size\": %s, \"n_layer\": %s, \"n_head\": %s,"
           " \"n_embd\": %s}",
           argv[5], argv[4], argv[6], argv[7], argv[8]);
  acc_model* model;
  CHECK(acc_model_create(spec, &model));
  int64_t parameters;
  CHECK(acc_model_num_parameters(model, &parameters));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.001, \"weight_decay\": 0.01}", &opt));
  /* BENCH_SAVE_INIT: the initial weights, for the other side to start from (run.py's loss curves). */
  const char* init = getenv("BENCH_SAVE_INIT");
  if (init && rank == 0) CHECK(acc_model_save_safetensors(model, init));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  /* BENCH_LOSSES: rank 0's loss of every step, in the result. */
  const int record = getenv("BENCH_LOSSES") != NULL;
  double* losses = calloc((size_t)(warmup + steps) + 1, sizeof *losses);
  int64_t* x = malloc((size_t)n * sizeof *x);
  int64_t* y = malloc((size_t)n * sizeof *y);
  if (!x || !y) return 1;
  const int64_t shape[2] = {batch, seq};
  acc_tensor *tx = NULL, *ty = NULL;
  double phase[PHASES] = {0}, t0 = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      CHECK(acc_wait_for_everyone(acc));
      t0 = now();
      for (int p = 0; p < PHASES; ++p) phase[p] = 0;
    }
    double t[PHASES + 1];
    t[DATA] = now();
    /* Synthetic tokens: the workload, not the data, is measured. The previous batch is released here,
     * as Python releases it when the next one replaces it. */
    acc_tensor_destroy(tx);
    acc_tensor_destroy(ty);
    const uint32_t base = (uint32_t)(((int64_t)step * world + rank) * n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = (int64_t)(mix(base + (uint32_t)i) % (uint32_t)vocab);
      y[i] = (x[i] * 7 + 3) % vocab;
    }
    CHECK(acc_tensor_from_host(x, (size_t)n * sizeof *x, ACC_INT64, shape, 2, &tx));
    CHECK(acc_tensor_from_host(y, (size_t)n * sizeof *y, ACC_INT64, shape, 2, &ty));
    t[FORWARD] = now();
    acc_tensor* loss;
    CHECK(acc_model_forward(model, tx, ty, NULL, &loss));
    if (record) CHECK(acc_tensor_item(loss, &losses[step]));
    t[BACKWARD] = now();
    CHECK(acc_backward(acc, loss));
    acc_tensor_destroy(loss);
    t[OPTIMIZER] = now();
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    t[PHASES] = now();
    for (int p = 0; p < PHASES; ++p) phase[p] += t[p + 1] - t[p];
  }
  CHECK(acc_wait_for_everyone(acc));
  const double seconds = now() - t0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  if (rank == 0) {
    const char* threads = getenv("OMP_NUM_THREADS");
    printf("{\"impl\": \"libacc\", \"parameters\": %lld, \"threads\": \"%s\", \"tokens_per_s\": %.1f,"
           " \"step_ms\": %.4f, \"peak_rss_mb\": %.1f, \"phase_ms\": {",
           (long long)parameters, threads ? threads : "unset", (double)steps * n * world / seconds,
           1e3 * seconds / steps, ru.ru_maxrss / 1024.0);
    for (int p = 0; p < PHASES; ++p)
      printf("%s\"%s\": %.4f", p ? ", " : "", phase_names[p], 1e3 * phase[p] / steps);
    printf("}");
    if (record) {
      printf(", \"losses\": [");
      for (int i = 0; i < warmup + steps; ++i) printf("%s%.7g", i ? ", " : "", losses[i]);
      printf("]");
    }
    printf("}\n");
  }
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  free(x);
  free(y);
  free(losses);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
