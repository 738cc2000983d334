/* libacc side of bench/run.py: DDP training steps of the demo's GPT on the demo's corpus, timed after
 * a warm-up. Prints one JSON line from the main process: tokens/s and this process's peak RSS.
 *   acc launch --num_processes 2 gpt_step STEPS */
#define _POSIX_C_SOURCE 200809L
#include <acc/acc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define CHECK(call)                                                               \
  do {                                                                            \
    if ((call) != ACC_OK) {                                                       \
      fprintf(stderr, "%s: %s\n", #call, acc_last_error_message());               \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

enum { BATCH = 16, BLOCK = 64, WARMUP = 10 };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 0}", &acc));
  int32_t rank, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 256, \"block_size\": 64, \"n_layer\": 4,"
                         " \"n_head\": 4, \"n_embd\": 128}", &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.001}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  /* Deterministic pseudo-text: the workload, not the data, is measured. */
  int64_t x[BATCH * BLOCK], y[BATCH * BLOCK], shape[2] = {BATCH, BLOCK};
  unsigned state = 12345u + (unsigned)rank;
  double t0 = 0;
  for (int step = 0; step < WARMUP + steps; ++step) {
    if (step == WARMUP) {
      CHECK(acc_wait_for_everyone(acc));
      t0 = now();
    }
    for (int i = 0; i < BATCH * BLOCK; ++i) {
      state = state * 1103515245u + 12345u;
      x[i] = (state >> 16) % 256;
      y[i] = (x[i] * 7 + 3) % 256;
    }
    acc_tensor *tx, *ty, *loss;
    CHECK(acc_tensor_from_host(x, sizeof x, ACC_INT64, shape, 2, &tx));
    CHECK(acc_tensor_from_host(y, sizeof y, ACC_INT64, shape, 2, &ty));
    CHECK(acc_model_forward(model, tx, ty, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    acc_tensor_destroy(tx);
    acc_tensor_destroy(ty);
    acc_tensor_destroy(loss);
  }
  CHECK(acc_wait_for_everyone(acc));
  double seconds = now() - t0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  if (rank == 0)
    printf("{\"impl\": \"libacc\", \"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f}\n",
           (double)steps * BATCH * BLOCK * world / seconds, ru.ru_maxrss / 1024.0);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
