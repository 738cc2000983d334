/* One rank of a multi-process test, started by `acc launch`. Usage: mp_worker MODE [args]
 *   collectives                      rank r holds [1+2r, 2+2r]: gather, reduce sum/mean/max
 *   gather_for_metrics N BATCH       every sample of an N-sample set exactly once, in order
 *   train BATCH STEPS OPT OUT        MLP regression; the main process saves the weights to OUT
 *   exit_on_rank RANK STATUS PIDDIR  that rank exits with STATUS; the others block in a barrier
 * Prints "N passed, N failed" and exits non-zero on any failed check. */
#include <acc/acc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../c/check.h"

#define CHECK(call)                                                                        \
  do {                                                                                     \
    acc_status st_ = (call);                                                               \
    if (st_ != ACC_OK) {                                                                   \
      fprintf(stderr, "%s: %s (%s)\n", #call, acc_last_error_message(), acc_status_name(st_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

static acc_tensor* floats(const float* v, int64_t n) {
  acc_tensor* t;
  CHECK(acc_tensor_from_host(v, (size_t)n * sizeof(float), ACC_FLOAT32, &n, 1, &t));
  return t;
}

static int equals(acc_tensor* t, const float* want, int64_t n) {
  int64_t got_n;
  CHECK(acc_tensor_numel(t, &got_n));
  if (got_n != n) return 0;
  float got[64];
  CHECK(acc_tensor_to_host(t, got, (size_t)n * sizeof(float)));
  for (int64_t i = 0; i < n; ++i)
    if (fabsf(got[i] - want[i]) > 1e-6f) return 0;
  return 1;
}

static void collectives(acc_accelerator* acc, int rank) {
  float mine[2] = {1.0f + 2 * rank, 2.0f + 2 * rank};
  acc_tensor* t = floats(mine, 2);
  acc_tensor* out;
  const float gathered[4] = {1, 2, 3, 4}, sum[2] = {4, 6}, mean[2] = {2, 3}, max[2] = {3, 4};
  CHECK(acc_gather(acc, t, &out));
  EXPECT(equals(out, gathered, 4));
  acc_tensor_destroy(out);
  CHECK(acc_reduce(acc, t, ACC_REDUCE_SUM, &out));
  EXPECT(equals(out, sum, 2));
  acc_tensor_destroy(out);
  CHECK(acc_reduce(acc, t, ACC_REDUCE_MEAN, &out));
  EXPECT(equals(out, mean, 2));
  acc_tensor_destroy(out);
  CHECK(acc_reduce(acc, t, ACC_REDUCE_MAX, &out));
  EXPECT(equals(out, max, 2));
  acc_tensor_destroy(out);
  acc_tensor_destroy(t);
  CHECK(acc_wait_for_everyone(acc));
}

static void gather_for_metrics(acc_accelerator* acc, int64_t n, int batch) {
  float* x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
  acc_tensor* inputs = floats(x, n);
  acc_dataset* ds;
  CHECK(acc_dataset_from_tensors(inputs, NULL, &ds));
  acc_dataloader* dl;
  char opts[64];
  snprintf(opts, sizeof opts, "{\"batch_size\": %d}", batch);
  CHECK(acc_dataloader_create(ds, opts, &dl));
  CHECK(acc_prepare(acc, NULL, NULL, NULL, dl));
  int64_t seen = 0, in_order = 1;
  for (int epoch = 0; epoch < 2; ++epoch) { /* twice: the state resets between epochs */
    seen = 0;
    for (;;) {
      acc_tensor *bx, *all;
      int32_t has;
      CHECK(acc_dataloader_next(dl, &bx, NULL, &has));
      if (!has) break;
      CHECK(acc_gather_for_metrics(acc, bx, &all));
      int64_t k;
      CHECK(acc_tensor_numel(all, &k));
      float* v = malloc((size_t)k * sizeof(float));
      CHECK(acc_tensor_to_host(all, v, (size_t)k * sizeof(float)));
      for (int64_t i = 0; i < k; ++i) in_order &= v[i] == (float)(seen + i);
      seen += k;
      free(v);
      acc_tensor_destroy(all);
      acc_tensor_destroy(bx);
    }
    EXPECT(seen == n);
    EXPECT(in_order);
  }
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tensor_destroy(inputs);
  free(x);
}

/* Regression data: y = sin(3 x0) + x1 x2, 256 samples, the same on every process. */
static void train(acc_accelerator* acc, int batch, int steps, const char* opt_type, const char* out) {
  enum { N = 256 };
  static float x[N * 3], y[N];
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < 3; ++j) x[3 * i + j] = (float)sin(0.1 * i * (j + 1) + j);
    y[i] = (float)(sin(3 * x[3 * i]) + x[3 * i + 1] * x[3 * i + 2]);
  }
  int64_t xs[2] = {N, 3}, ys[2] = {N, 1};
  acc_tensor *tx, *ty;
  CHECK(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx));
  CHECK(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty));
  acc_dataset* ds;
  CHECK(acc_dataset_from_tensors(tx, ty, &ds));
  char opts[128];
  snprintf(opts, sizeof opts, "{\"batch_size\": %d}", batch);
  acc_dataloader* dl;
  CHECK(acc_dataloader_create(ds, opts, &dl));
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [3, 32, 32, 1], \"activation\": \"gelu\"}", &model));
  snprintf(opts, sizeof opts, "{\"type\": \"%s\", \"lr\": %s}", opt_type, strcmp(opt_type, "sgd") ? "0.01" : "0.1");
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, opts, &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, dl));
  for (int step = 0; step < steps;) {
    acc_tensor *bx, *by, *loss;
    int32_t has;
    CHECK(acc_dataloader_next(dl, &bx, &by, &has));
    if (!has) continue;
    CHECK(acc_model_forward(model, bx, by, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    acc_tensor_destroy(loss);
    acc_tensor_destroy(bx);
    acc_tensor_destroy(by);
    ++step;
  }
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  if (is_main) CHECK(acc_model_save_safetensors(model, out));
  EXPECT(1);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* mode = argv[1];
  if (!strcmp(mode, "exit_on_rank") && argc == 5) {
    /* Record the pid first, so the test can check that nothing is left behind. */
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.pid", argv[4], getenv("RANK") ? getenv("RANK") : "0");
    FILE* f = fopen(path, "w");
    if (f) {
      fprintf(f, "%d\n", (int)getpid());
      fclose(f);
    }
  }
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(strcmp(mode, "train") ? NULL : "{\"seed\": 42}", &acc));
  int32_t rank, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  if (!strcmp(mode, "collectives")) {
    collectives(acc, rank);
  } else if (!strcmp(mode, "gather_for_metrics") && argc == 4) {
    gather_for_metrics(acc, atoll(argv[2]), atoi(argv[3]));
  } else if (!strcmp(mode, "train") && argc == 6) {
    train(acc, atoi(argv[2]), atoi(argv[3]), argv[4], argv[5]);
  } else if (!strcmp(mode, "exit_on_rank") && argc == 5) {
    if (rank == atoi(argv[2])) exit(atoi(argv[3]));
    CHECK(acc_wait_for_everyone(acc)); /* blocks: the failed rank never arrives */
    sleep(600);
  } else {
    fprintf(stderr, "mp_worker: bad mode or arguments\n");
    return 2;
  }
  acc_accelerator_destroy(acc);
  if (g_failed) fprintf(stderr, "rank %d: %d checks failed\n", rank, g_failed);
  return finish();
}
