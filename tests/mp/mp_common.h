/* What the multi-process workers share: the check harness (../c/check.h, a failed check ending the worker), their
 * data sets, each a loader with the tensors and dataset behind it, and one plain training step. */
#ifndef ACC_TEST_MP_COMMON_H
#define ACC_TEST_MP_COMMON_H
#include <acc/acc.h>
#include <math.h>
#include <stdlib.h>

/* A failed check ends the worker at once with status 1, after its counts: going on, it would enter collectives its
 * peers do not match and hang them until the test's timeout; they fail on the dead rank instead (and acc launch ends
 * them). */
static inline void mp_stop(void);
#define EXPECT_FAILED() mp_stop()
#include "../c/check.h"

static inline void mp_stop(void) {
  const char* rank = getenv("RANK");
  fflush(stderr);
  printf("rank %s, stopped at its first failed check: ", rank ? rank : "0");
  finish();
  fflush(stdout);
  _Exit(1); /* no atexit handlers or destructors: they could wait on the peers */
}

/* A loader and what it reads from, destroyed together by loader_destroy. */
struct loader {
  acc_tensor *x, *y;
  acc_dataset* ds;
  acc_dataloader* dl;
};

/* The loader (JSON `options`) over inputs x of shape xs and targets y of shape ys, both 2-D float32 or int64. */
static inline struct loader loader_from_host(acc_dtype dtype, const void* x, const int64_t xs[2], const void* y,
                                             const int64_t ys[2], const char* options) {
  const size_t size = dtype == ACC_INT64 ? sizeof(int64_t) : sizeof(float);
  struct loader l;
  CHECK(acc_tensor_from_host(x, size * (size_t)(xs[0] * xs[1]), dtype, xs, 2, &l.x));
  CHECK(acc_tensor_from_host(y, size * (size_t)(ys[0] * ys[1]), dtype, ys, 2, &l.y));
  CHECK(acc_dataset_from_tensors(l.x, l.y, &l.ds));
  CHECK(acc_dataloader_create(l.ds, options, &l.dl));
  return l;
}

static inline void loader_destroy(struct loader* l) {
  acc_dataloader_destroy(l->dl);
  acc_dataset_destroy(l->ds);
  acc_tensor_destroy(l->x);
  acc_tensor_destroy(l->y);
}

/* Regression data, the same on every process: n samples x [n, 3] = cos(0.07 i (j + 2) + j), y [n, 1] = x0 x1 -
 * sin(2 x2). */
static inline struct loader regression_loader(int64_t n, const char* options) {
  float* x = malloc(sizeof(float) * 3 * (size_t)n);
  float* y = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) x[3 * i + j] = (float)cos(0.07 * i * (j + 2) + j);
    y[i] = (float)(x[3 * i] * x[3 * i + 1] - sin(2 * x[3 * i + 2]));
  }
  const int64_t xs[2] = {n, 3}, ys[2] = {n, 1};
  struct loader l = loader_from_host(ACC_FLOAT32, x, xs, y, ys, options);
  free(x);
  free(y);
  return l;
}

enum { TOKENS_T = 8, TOKENS_VOCAB = 37 };

/* Token data for the language models (vocabulary TOKENS_VOCAB): n sequences of TOKENS_T ids [n, T] and as targets
 * a function of each id and its position [n, T]. */
static inline struct loader token_loader(int64_t n, const char* options) {
  int64_t* ids = malloc(sizeof(int64_t) * TOKENS_T * (size_t)n);
  int64_t* next = malloc(sizeof(int64_t) * TOKENS_T * (size_t)n);
  for (int64_t i = 0; i < n; ++i)
    for (int t = 0; t < TOKENS_T; ++t) {
      ids[i * TOKENS_T + t] = (i * 7 + t * t * 3 + i * t) % TOKENS_VOCAB;
      next[i * TOKENS_T + t] = (ids[i * TOKENS_T + t] * 5 + t + 1) % TOKENS_VOCAB;
    }
  const int64_t shape[2] = {n, TOKENS_T};
  struct loader l = loader_from_host(ACC_INT64, ids, shape, next, shape, options);
  free(ids);
  free(next);
  return l;
}

/* One training step on the loader's next batch: forward, backward, optimizer step, zero_grad. Returns 0, having done
 * nothing else, when the loader's epoch has ended. */
static inline int train_step(acc_accelerator* acc, acc_model* model, acc_optimizer* opt, acc_dataloader* dl) {
  acc_tensor *bx, *by, *loss;
  int32_t has;
  CHECK(acc_dataloader_next(dl, &bx, &by, &has));
  if (!has) return 0;
  CHECK(acc_model_forward(model, bx, by, NULL, &loss));
  CHECK(acc_backward(acc, loss));
  CHECK(acc_optimizer_step(opt));
  CHECK(acc_optimizer_zero_grad(opt));
  acc_tensor_destroy(loss);
  acc_tensor_destroy(bx);
  acc_tensor_destroy(by);
  return 1;
}
#endif
