/* Single-process tests of the training-loop semantics: accumulation sync flags, mixed precision (bf16
 * against fp32, the fp16 loss scaler with injected inf/nan gradients), gradient clipping, process
 * helpers and the batch-size search. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

static acc_dataset* rows(int n, int features) {
  float* x = malloc(sizeof(float) * (size_t)(n * features));
  float* y = malloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int j = 0; j < features; ++j) {
      x[i * features + j] = (float)sin(0.3 * i + j);
      s += (j + 1) * x[i * features + j];
    }
    y[i] = (float)tanh(s);
  }
  int64_t xs[2] = {n, features}, ys[2] = {n, 1};
  acc_tensor *tx = NULL, *ty = NULL;
  acc_dataset* ds = NULL;
  EXPECT_OK(acc_tensor_from_host(x, sizeof(float) * (size_t)(n * features), ACC_FLOAT32, xs, 2, &tx));
  EXPECT_OK(acc_tensor_from_host(y, sizeof(float) * (size_t)n, ACC_FLOAT32, ys, 2, &ty));
  EXPECT_OK(acc_dataset_from_tensors(tx, ty, &ds));
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  free(x);
  free(y);
  return ds;
}

/* The sync flags of every batch of one epoch over `batches` batches with `steps` accumulation. */
static void sync_flags(int steps, int batches, const int* want) {
  char cfg[64];
  snprintf(cfg, sizeof cfg, "{\"gradient_accumulation_steps\": %d}", steps);
  acc_accelerator* acc = NULL;
  EXPECT_OK(acc_accelerator_create(cfg, &acc));
  acc_dataset* ds = rows(batches, 2);
  acc_dataloader* dl = NULL;
  acc_model* m = NULL;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 1}", &dl));
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &m));
  EXPECT_ERR(acc_accumulate_begin(acc, m), ACC_ERR_INVALID_STATE, "prepared model");
  EXPECT_OK(acc_prepare(acc, m, NULL, NULL, dl));
  int i = 0, ok = 1;
  for (;; ++i) {
    acc_tensor *x, *y;
    int32_t has, sync;
    EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
    if (!has) break;
    EXPECT_OK(acc_accumulate_begin(acc, m));
    EXPECT_OK(acc_sync_gradients(acc, &sync));
    ok &= i < batches && sync == want[i];
    EXPECT_OK(acc_accumulate_end(acc, m));
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
  }
  EXPECT(ok && i == batches);
  EXPECT_ERR(acc_accumulate_end(acc, m), ACC_ERR_INVALID_STATE, "without accumulate_begin");
  acc_model_destroy(m);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
}

/* Final training loss of an MLP trained for `steps` steps under `mixed_precision`. */
static double train_loss(const char* mixed_precision, int steps) {
  char cfg[128];
  snprintf(cfg, sizeof cfg, "{\"seed\": 5, \"mixed_precision\": \"%s\"}", mixed_precision);
  acc_accelerator* acc = NULL;
  if (acc_accelerator_create(cfg, &acc) != ACC_OK) return NAN;
  acc_dataset* ds = rows(128, 4);
  acc_dataloader* dl = NULL;
  acc_model* m = NULL;
  acc_optimizer* o = NULL;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 32, \"shuffle\": true, \"seed\": 1}", &dl));
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 64, 64, 1], \"activation\": \"gelu\"}", &m));
  EXPECT_OK(acc_optimizer_create(m, "{\"type\": \"adam\", \"lr\": 0.003}", &o));
  EXPECT_OK(acc_prepare(acc, m, o, NULL, dl));
  double loss_value = NAN;
  for (int step = 0; step < steps;) {
    acc_tensor *x, *y, *loss, *out;
    int32_t has;
    EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
    if (!has) continue;
    EXPECT_OK(acc_model_forward(m, x, y, &out, &loss));
    acc_dtype dt;
    EXPECT_OK(acc_tensor_dtype(out, &dt));
    EXPECT(dt == ACC_FLOAT32); /* outputs come back in fp32 under autocast */
    EXPECT_OK(acc_tensor_item(loss, &loss_value));
    EXPECT_OK(acc_backward(acc, loss));
    EXPECT_OK(acc_optimizer_step(o));
    EXPECT_OK(acc_optimizer_zero_grad(o));
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
    acc_tensor_destroy(out);
    acc_tensor_destroy(loss);
    ++step;
  }
  acc_optimizer_destroy(o);
  acc_model_destroy(m);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
  return loss_value;
}

static void test_mixed_precision(void) {
  double fp32 = train_loss("no", 200), bf16 = train_loss("bf16", 200), first = train_loss("no", 1);
  printf("MLP loss after 200 steps: fp32 %.5f, bf16 %.5f (start %.5f)\n", fp32, bf16, first);
  EXPECT(bf16 < first * 0.2);                /* bf16 learns */
  EXPECT(fabs(bf16 - fp32) < 0.02 + 0.25 * fp32); /* and stays near fp32 */
  acc_accelerator* acc = (acc_accelerator*)0x1;
  /* fp8 needs a GPU of compute capability 8.9 or newer (tests/gpu trains there); elsewhere it is refused. */
  const acc_status fp8 = acc_accelerator_create("{\"mixed_precision\": \"fp8\"}", &acc);
  if (fp8 == ACC_OK) {
    const char* device;
    EXPECT_OK(acc_device(acc, &device));
    EXPECT(strncmp(device, "cuda", 4) == 0);
    acc_accelerator_destroy(acc);
  } else {
    EXPECT(fp8 == ACC_ERR_UNSUPPORTED && strstr(acc_last_error_message(), "compute capability") != NULL);
    EXPECT(acc == NULL);
  }
  EXPECT_OK(acc_accelerator_create("{\"mixed_precision\": \"bf16\"}", &acc));
  double scale;
  EXPECT_ERR(acc_grad_scaler_state(acc, &scale, NULL), ACC_ERR_INVALID_STATE, "fp16");
  acc_accelerator_destroy(acc);
}

/* One fp16 step on inputs `x` (2 features); returns the skipped flag. */
static int fp16_step(acc_accelerator* acc, acc_model* m, acc_optimizer* o, acc_scheduler* s, float x0) {
  float x[4] = {x0, 0.5f, 0.25f, -0.5f}, y[2] = {1, -1};
  int64_t xs[2] = {2, 2}, ys[2] = {2, 1};
  acc_tensor *tx, *ty, *loss;
  int32_t skipped = -1;
  EXPECT_OK(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx));
  EXPECT_OK(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty));
  EXPECT_OK(acc_model_forward(m, tx, ty, NULL, &loss));
  EXPECT_OK(acc_backward(acc, loss));
  double norm;
  EXPECT_OK(acc_clip_grad_norm(acc, m, 1e9, 2.0, &norm)); /* unscales first; the step must not unscale again */
  EXPECT_OK(acc_optimizer_step(o));
  EXPECT_OK(acc_scheduler_step(s));
  EXPECT_OK(acc_optimizer_step_was_skipped(o, &skipped));
  EXPECT_OK(acc_optimizer_zero_grad(o));
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  acc_tensor_destroy(loss);
  return skipped;
}

static float first_weight(acc_model* m) {
  acc_tensor* w;
  const char* name;
  float v[2] = {0, 0};
  EXPECT_OK(acc_model_state_get(m, 0, &name, &w));
  EXPECT_OK(acc_tensor_to_host(w, v, sizeof v));
  acc_tensor_destroy(w);
  return v[0];
}

static void test_grad_scaler(void) {
  acc_accelerator* acc = NULL;
  EXPECT_OK(acc_accelerator_create("{\"mixed_precision\": \"fp16\", \"seed\": 3,"
                                   " \"grad_scaler_kwargs\": {\"init_scale\": 256, \"growth_interval\": 3}}",
                                   &acc));
  acc_model* m;
  acc_optimizer* o;
  acc_scheduler* s;
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &m));
  EXPECT_OK(acc_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &o));
  EXPECT_OK(acc_scheduler_create(o, "{\"type\": \"linear\", \"total_steps\": 100}", &s));
  EXPECT_OK(acc_prepare(acc, m, o, s, NULL));
  double scale, lr0, lr1;
  int64_t tracker;
  EXPECT_OK(acc_grad_scaler_state(acc, &scale, &tracker));
  EXPECT(scale == 256 && tracker == 0);
  EXPECT(fp16_step(acc, m, o, s, 1.0f) == 0);
  EXPECT_OK(acc_grad_scaler_state(acc, &scale, &tracker));
  EXPECT(scale == 256 && tracker == 1);
  /* an infinite input: inf/nan gradients, so the step and the scheduler step are skipped */
  float w_before = first_weight(m);
  EXPECT_OK(acc_scheduler_last_lr(s, &lr0));
  EXPECT(fp16_step(acc, m, o, s, INFINITY) == 1);
  EXPECT_OK(acc_scheduler_last_lr(s, &lr1));
  EXPECT(first_weight(m) == w_before);
  EXPECT(lr1 == lr0);
  EXPECT_OK(acc_grad_scaler_state(acc, &scale, &tracker));
  EXPECT(scale == 128 && tracker == 0); /* halved */
  EXPECT(fp16_step(acc, m, o, s, NAN) == 1);
  EXPECT_OK(acc_grad_scaler_state(acc, &scale, &tracker));
  EXPECT(scale == 64);
  /* growth after growth_interval clean steps */
  for (int i = 0; i < 3; ++i) EXPECT(fp16_step(acc, m, o, s, 1.0f) == 0);
  EXPECT_OK(acc_grad_scaler_state(acc, &scale, &tracker));
  EXPECT(scale == 128 && tracker == 0);
  EXPECT(first_weight(m) != w_before);
  acc_scheduler_destroy(s);
  acc_optimizer_destroy(o);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
}

static void test_clipping(void) {
  acc_accelerator* acc = NULL;
  EXPECT_OK(acc_accelerator_create(NULL, &acc));
  acc_model* m;
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &m));
  EXPECT_OK(acc_prepare(acc, m, NULL, NULL, NULL));
  float x[2] = {30, 40}, y[1] = {0};
  int64_t xs[2] = {1, 2}, ys[2] = {1, 1};
  acc_tensor *tx, *ty, *loss, *g;
  const char* name;
  EXPECT_OK(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx));
  EXPECT_OK(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty));
  EXPECT_OK(acc_model_forward(m, tx, ty, NULL, &loss));
  EXPECT_OK(acc_backward(acc, loss));
  double norm = 0, norm_after = 0;
  EXPECT_OK(acc_clip_grad_norm(acc, m, 1.0, 2.0, &norm));
  EXPECT(norm > 1.0);
  EXPECT_OK(acc_clip_grad_norm(acc, m, 1e9, 2.0, &norm_after));
  EXPECT(fabs(norm_after - 1.0) < 1e-3); /* clipped to max_norm */
  EXPECT_OK(acc_clip_grad_value(acc, m, 0.01));
  EXPECT_OK(acc_clip_grad_norm(acc, m, 1e9, 2.0, &norm_after));
  EXPECT(norm_after <= 0.01 * sqrt(3.0) + 1e-6);
  EXPECT_ERR(acc_clip_grad_norm(acc, m, -1, 2.0, &norm), ACC_ERR_INVALID_ARGUMENT, "max_norm");
  (void)g;
  (void)name;
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  acc_tensor_destroy(loss);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
}

static acc_status fake_step(void* user, int64_t batch_size) {
  int64_t* seen = user;
  seen[seen[0]++ + 1] = batch_size;
  return batch_size > 8 ? ACC_ERR_OUT_OF_MEMORY : ACC_OK;
}
static acc_status always_oom(void* user, int64_t batch_size) {
  (void)user;
  (void)batch_size;
  return ACC_ERR_OUT_OF_MEMORY;
}

static void test_batch_size_search(void) {
  int64_t seen[64] = {0}, found = 0;
  const int64_t want[] = {128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22, 19, 17, 15, 13, 11, 9, 8};
  EXPECT_OK(acc_find_executable_batch_size(128, fake_step, seen, &found));
  EXPECT(found == 8);
  EXPECT(seen[0] == (int64_t)(sizeof want / sizeof want[0]));
  int same = 1;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) same &= seen[i + 1] == want[i];
  EXPECT(same);
  EXPECT_ERR(acc_find_executable_batch_size(4, always_oom, NULL, &found), ACC_ERR_OUT_OF_MEMORY, "reached zero");
  EXPECT_ERR(acc_find_executable_batch_size(0, fake_step, seen, &found), ACC_ERR_INVALID_ARGUMENT,
             "starting_batch_size");
}

static void test_single_process_helpers(void) {
  acc_accelerator* acc = NULL;
  EXPECT_OK(acc_accelerator_create(NULL, &acc));
  int64_t start, count, padded;
  EXPECT_OK(acc_split_between_processes(acc, 17, 1, &start, &count, &padded));
  EXPECT(start == 0 && count == 17 && padded == 17);
  int32_t flag;
  EXPECT_OK(acc_check_trigger(acc, &flag));
  EXPECT(flag == 0);
  EXPECT_OK(acc_set_trigger(acc));
  EXPECT_OK(acc_check_trigger(acc, &flag));
  EXPECT(flag == 1);
  EXPECT_OK(acc_check_trigger(acc, &flag));
  EXPECT(flag == 0); /* reset by the check */
  EXPECT_OK(acc_main_process_first_begin(acc, 0));
  EXPECT_OK(acc_main_process_first_end(acc, 0));
  EXPECT_OK(acc_is_local_main_process(acc, &flag));
  EXPECT(flag == 1);
  EXPECT_OK(acc_is_last_process(acc, &flag));
  EXPECT(flag == 1);
  EXPECT_OK(acc_print(acc, "printed once, by the main process"));
  EXPECT_ERR(acc_print(acc, NULL), ACC_ERR_INVALID_ARGUMENT, "text is NULL");
  float v[3] = {1, 2, 3};
  int64_t n = 3;
  acc_tensor *t, *out;
  EXPECT_OK(acc_tensor_from_host(v, sizeof v, ACC_FLOAT32, &n, 1, &t));
  EXPECT_OK(acc_broadcast(acc, t, 0, &out));
  acc_tensor_destroy(out);
  EXPECT_ERR(acc_broadcast(acc, t, 1, &out), ACC_ERR_INVALID_ARGUMENT, "from_process 1");
  EXPECT_OK(acc_pad_across_processes(acc, t, 0, 0, 0, &out));
  acc_tensor_destroy(out);
  acc_tensor_destroy(t);
  /* set_seed: the same seed gives the same model */
  acc_model *a, *b;
  EXPECT_OK(acc_set_seed(NULL, 11, 0, 0));
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &a));
  EXPECT_OK(acc_set_seed(acc, 11, 0, 0));
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &b));
  EXPECT(first_weight(a) == first_weight(b));
  EXPECT_ERR(acc_set_seed(NULL, 11, 1, 0), ACC_ERR_INVALID_ARGUMENT, "device_specific");
  acc_model_destroy(a);
  acc_model_destroy(b);
  acc_accelerator_destroy(acc);
}

/* step_scheduler_with_optimizer: true (the default) steps the schedule only when the optimizer steps (every second
 * micro-step under accumulation 2); false steps it at every call, as Accelerate's AcceleratedScheduler. */
static void test_scheduler_with_optimizer(void) {
  for (int linked = 0; linked < 2; ++linked) {
    char cfg[128];
    snprintf(cfg, sizeof cfg, "{\"gradient_accumulation_steps\": 2, \"step_scheduler_with_optimizer\": %s}",
             linked ? "true" : "false");
    acc_accelerator* acc = NULL;
    acc_model* m = NULL;
    acc_optimizer* opt = NULL;
    acc_scheduler* sched = NULL;
    acc_dataset* ds = rows(8, 2);
    acc_dataloader* dl = NULL;
    EXPECT_OK(acc_accelerator_create(cfg, &acc));
    EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 1}", &dl));
    EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &m));
    EXPECT_OK(acc_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 1.0}", &opt));
    EXPECT_OK(acc_scheduler_create(opt, "{\"type\": \"linear\", \"total_steps\": 100}", &sched));
    EXPECT_OK(acc_prepare(acc, m, opt, sched, dl));
    double lr = 0;
    for (int i = 0; i < 6; ++i) {
      acc_tensor *x, *y, *loss;
      int32_t has;
      EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
      EXPECT_OK(acc_accumulate_begin(acc, m));
      EXPECT_OK(acc_model_forward(m, x, y, NULL, &loss));
      EXPECT_OK(acc_backward(acc, loss));
      EXPECT_OK(acc_optimizer_step(opt));
      EXPECT_OK(acc_scheduler_step(sched));
      EXPECT_OK(acc_optimizer_zero_grad(opt));
      EXPECT_OK(acc_accumulate_end(acc, m));
      acc_tensor_destroy(x);
      acc_tensor_destroy(y);
      acc_tensor_destroy(loss);
    }
    EXPECT_OK(acc_scheduler_last_lr(sched, &lr));
    /* 6 micro-steps: 3 scheduler steps when linked, 6 when not (linear decay from 1 over 100 steps). */
    EXPECT(fabs(lr - (linked ? 0.97 : 0.94)) < 1e-9);
    acc_scheduler_destroy(sched);
    acc_optimizer_destroy(opt);
    acc_model_destroy(m);
    acc_dataloader_destroy(dl);
    acc_dataset_destroy(ds);
    acc_accelerator_destroy(acc);
  }
}

int main(void) {
  const int two_of_five[] = {0, 1, 0, 1, 1};
  const int four_of_ten[] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 1};
  sync_flags(2, 5, two_of_five);
  sync_flags(4, 10, four_of_ten);
  test_mixed_precision();
  test_grad_scaler();
  test_clipping();
  test_batch_size_search();
  test_single_process_helpers();
  test_scheduler_with_optimizer();
  return finish();
}
