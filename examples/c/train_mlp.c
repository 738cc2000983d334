/*
 * The reference program that every binding reproduces (examples/{rust,go,java} do exactly this):
 * an MLP learns a synthetic regression in several processes started by `acc launch`.
 *
 *   acc launch --num_processes 2 train_mlp OUT.safetensors [STEPS]
 *
 * The recipe (keep it identical in every language; tests/bindings/equivalence.py checks that the
 * final parameters agree to 1e-6 across C, Rust, Go and Java):
 *   accelerator  {"seed": 1234}
 *   data         sample i has 4 features x[i][j] = (((i*4 + j) * 2654435761 mod 2^32) >> 24) - 128) / 64
 *                and the target y[i] = x0*x1 - x2/2 + x3*x3/4. Every value is
 *                exact in float32 (multiples of 1/16384), so every language computes bit-identical data
 *                without libm or rounding.
 *                512 training samples (i = 0..511), 100 evaluation samples (i = 512..611).
 *   model        {"type": "mlp", "sizes": [4, 32, 32, 1], "activation": "tanh", "loss": "mse"}
 *   optimizer    {"type": "adamw", "lr": 0.01, "weight_decay": 0.01}
 *   scheduler    {"type": "cosine", "warmup_steps": 5, "total_steps": STEPS}
 *   train loader {"batch_size": 16, "shuffle": true, "seed": 7}   (per process)
 *   eval loader  {"batch_size": 16}
 *   loop         STEPS optimizer steps (default 100); the loss printed is the mean over processes of
 *                the last step's loss; evaluation gathers predictions and targets with
 *                acc_gather_for_metrics (each of the 100 samples exactly once) and prints their MSE.
 *   output       the main process saves the model with acc_model_save_safetensors(OUT).
 */
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    acc_status st_ = (call);                                                                          \
    if (st_ != ACC_OK) {                                                                              \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, acc_last_error_message(), acc_status_name(st_)); \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

enum { FEATURES = 4, TRAIN = 512, EVAL = 100 };

static float feature(uint32_t i, uint32_t j) {
  uint32_t h = (i * 4u + j) * 2654435761u; /* wraps mod 2^32 */
  return (float)(((double)(h >> 24) - 128.0) / 64.0);
}

/* Samples [first, first + n) as a dataset of inputs [n, 4] and targets [n, 1]. */
static acc_dataset* make_dataset(uint32_t first, uint32_t n) {
  float* x = malloc(sizeof(float) * FEATURES * n);
  float* y = malloc(sizeof(float) * n);
  for (uint32_t k = 0; k < n; ++k) {
    double f[FEATURES];
    for (uint32_t j = 0; j < FEATURES; ++j) {
      f[j] = feature(first + k, j);
      x[FEATURES * k + j] = (float)f[j];
    }
    y[k] = (float)(f[0] * f[1] - f[2] / 2.0 + f[3] * f[3] / 4.0);
  }
  int64_t xs[2] = {n, FEATURES}, ys[2] = {n, 1};
  acc_tensor *tx, *ty;
  acc_dataset* ds;
  CHECK(acc_tensor_from_host(x, sizeof(float) * FEATURES * n, ACC_FLOAT32, xs, 2, &tx));
  CHECK(acc_tensor_from_host(y, sizeof(float) * n, ACC_FLOAT32, ys, 2, &ty));
  CHECK(acc_dataset_from_tensors(tx, ty, &ds));
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  free(x);
  free(y);
  return ds;
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: train_mlp OUT.safetensors [STEPS]\n");
    return 2;
  }
  const char* out_path = argv[1];
  int steps = argc == 3 ? atoi(argv[2]) : 100;

  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 1234}", &acc));
  int32_t is_main, world;
  CHECK(acc_is_main_process(acc, &is_main));
  CHECK(acc_num_processes(acc, &world));

  acc_dataset* train_ds = make_dataset(0, TRAIN);
  acc_dataset* eval_ds = make_dataset(TRAIN, EVAL);
  acc_dataloader *train_dl, *eval_dl;
  CHECK(acc_dataloader_create(train_ds, "{\"batch_size\": 16, \"shuffle\": true, \"seed\": 7}", &train_dl));
  CHECK(acc_dataloader_create(eval_ds, "{\"batch_size\": 16}", &eval_dl));

  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 32, 32, 1], \"activation\": \"tanh\", "
                         "\"loss\": \"mse\"}",
                         &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.01}", &opt));
  char sched_json[128];
  snprintf(sched_json, sizeof sched_json, "{\"type\": \"cosine\", \"warmup_steps\": 5, \"total_steps\": %d}", steps);
  acc_scheduler* sched;
  CHECK(acc_scheduler_create(opt, sched_json, &sched));
  CHECK(acc_prepare(acc, model, opt, sched, train_dl));
  CHECK(acc_prepare(acc, NULL, NULL, NULL, eval_dl));

  /* Train: a fixed number of optimizer steps, starting a new epoch whenever the loader runs out. */
  double last_loss = 0.0;
  for (int step = 0; step < steps;) {
    acc_tensor *x, *y, *loss;
    int32_t has;
    CHECK(acc_dataloader_next(train_dl, &x, &y, &has));
    if (!has) continue;
    CHECK(acc_model_forward(model, x, y, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_scheduler_step(sched));
    CHECK(acc_optimizer_zero_grad(opt));
    if (++step == steps) {
      acc_tensor* mean;
      CHECK(acc_reduce(acc, loss, ACC_REDUCE_MEAN, &mean));
      CHECK(acc_tensor_item(mean, &last_loss));
      acc_tensor_destroy(mean);
    }
    acc_tensor_destroy(loss);
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
  }

  /* Evaluate: every process predicts its shard; gather_for_metrics drops the padding duplicates. */
  CHECK(acc_model_set_training(model, 0));
  double sq_sum = 0.0;
  int64_t seen = 0;
  for (;;) {
    acc_tensor *x, *y, *pred, *all_pred, *all_y;
    int32_t has;
    CHECK(acc_dataloader_next(eval_dl, &x, &y, &has));
    if (!has) break;
    CHECK(acc_model_forward(model, x, NULL, &pred, NULL));
    CHECK(acc_gather_for_metrics(acc, pred, &all_pred));
    CHECK(acc_gather_for_metrics(acc, y, &all_y));
    int64_t n;
    CHECK(acc_tensor_numel(all_pred, &n));
    float* p = malloc(sizeof(float) * (size_t)n);
    float* t = malloc(sizeof(float) * (size_t)n);
    CHECK(acc_tensor_to_host(all_pred, p, sizeof(float) * (size_t)n));
    CHECK(acc_tensor_to_host(all_y, t, sizeof(float) * (size_t)n));
    for (int64_t k = 0; k < n; ++k) sq_sum += ((double)p[k] - t[k]) * ((double)p[k] - t[k]);
    seen += n;
    free(p);
    free(t);
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
    acc_tensor_destroy(pred);
    acc_tensor_destroy(all_pred);
    acc_tensor_destroy(all_y);
  }

  if (is_main) {
    CHECK(acc_model_save_safetensors(model, out_path));
    printf("processes: %d, steps: %d\n", world, steps);
    printf("eval mse: %.6f over %lld samples\n", sq_sum / (double)seen, (long long)seen);
    printf("final loss: %.6f\n", last_loss);
  }
  acc_scheduler_destroy(sched);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_dataloader_destroy(train_dl);
  acc_dataloader_destroy(eval_dl);
  acc_dataset_destroy(train_ds);
  acc_dataset_destroy(eval_ds);
  acc_accelerator_destroy(acc);
  return 0;
}
