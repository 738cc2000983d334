/* Single-process tests of the C ABI, compiled as C: library facts, tensors for every dtype, the
 * bad-config and bad-call corpus, call order, a short training run, data sources and files. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static const char* tmp_dir;

static void test_library(void) {
  EXPECT(strlen(acc_version()) >= 5);
  EXPECT_OK(acc_abi_check(ACC_ABI_VERSION));
  EXPECT_ERR(acc_abi_check(ACC_ABI_VERSION + 1), ACC_ERR_ABI_MISMATCH, "built for ABI 2");
  EXPECT_OK(acc_abi_check(ACC_ABI_VERSION));
  EXPECT(strcmp(acc_last_error_message(), "") == 0); /* cleared by the next call */
  EXPECT(strstr(acc_build_info(), "\"torch\"") != NULL);
  EXPECT(strcmp(acc_status_name(ACC_ERR_INVALID_CONFIG), "ACC_ERR_INVALID_CONFIG") == 0);
  EXPECT(strcmp(acc_status_name(999), "ACC_ERR_UNKNOWN") == 0);
}

static void test_tensors(void) {
  /* Six elements of every dtype, as raw bytes: round trip and metadata. */
  const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1, 1};
  for (acc_dtype d = ACC_FLOAT32; d <= ACC_BOOL; ++d) {
    unsigned char in[48], out[48];
    for (size_t i = 0; i < sizeof in; ++i) in[i] = (unsigned char)(d == ACC_BOOL ? i % 2 : (i * 7 + 3) % 64);
    int64_t shape[2] = {2, 3};
    acc_tensor* t = NULL;
    EXPECT_OK(acc_tensor_from_host(in, 6 * sizes[d], d, shape, 2, &t));
    acc_dtype got;
    int32_t nd;
    int64_t s[2], numel;
    size_t nb;
    EXPECT_OK(acc_tensor_dtype(t, &got));
    EXPECT(got == d);
    EXPECT_OK(acc_tensor_ndim(t, &nd));
    EXPECT(nd == 2);
    EXPECT_OK(acc_tensor_shape(t, s, 2));
    EXPECT(s[0] == 2 && s[1] == 3);
    EXPECT_OK(acc_tensor_numel(t, &numel));
    EXPECT(numel == 6);
    EXPECT_OK(acc_tensor_nbytes(t, &nb));
    EXPECT(nb == 6 * sizes[d]);
    EXPECT_OK(acc_tensor_to_host(t, out, nb));
    EXPECT(memcmp(in, out, nb) == 0);
    acc_tensor_destroy(t);
  }
  double v = 2.5, item;
  acc_tensor* scalar;
  EXPECT_OK(acc_tensor_from_host(&v, sizeof v, ACC_FLOAT64, NULL, 0, &scalar));
  EXPECT_OK(acc_tensor_item(scalar, &item));
  EXPECT(item == 2.5);
  acc_tensor_destroy(scalar);

  float f[4] = {1, 2, 3, 4};
  int64_t shape = 4, small[1];
  acc_tensor* t = (acc_tensor*)0x1;
  EXPECT_ERR(acc_tensor_from_host(f, 12, ACC_FLOAT32, &shape, 1, &t), ACC_ERR_INVALID_ARGUMENT, "nbytes");
  EXPECT(t == NULL); /* out-parameters are zeroed on failure */
  EXPECT_ERR(acc_tensor_from_host(f, 16, 42, &shape, 1, &t), ACC_ERR_INVALID_ARGUMENT, "dtype 42");
  EXPECT_ERR(acc_tensor_from_host(f, 16, ACC_FLOAT32, NULL, 1, &t), ACC_ERR_INVALID_ARGUMENT, "shape is NULL");
  EXPECT_ERR(acc_tensor_from_host(f, 16, ACC_FLOAT32, &shape, 1, NULL), ACC_ERR_INVALID_ARGUMENT, "out is NULL");
  EXPECT_OK(acc_tensor_from_host(f, 16, ACC_FLOAT32, &shape, 1, &t));
  EXPECT_ERR(acc_tensor_to_host(t, f, 8), ACC_ERR_INVALID_ARGUMENT, "nbytes");
  EXPECT_ERR(acc_tensor_item(t, &item), ACC_ERR_INVALID_ARGUMENT, "one-element");
  EXPECT_ERR(acc_tensor_shape(t, small, 0), ACC_ERR_INVALID_ARGUMENT, "capacity");
  int64_t n;
  EXPECT_ERR(acc_tensor_numel(NULL, &n), ACC_ERR_INVALID_ARGUMENT, "tensor is NULL");
  acc_tensor_destroy(t);
  acc_tensor_destroy(NULL);
}

static acc_accelerator* make_acc(const char* json) {
  acc_accelerator* acc = NULL;
  acc_status st = acc_accelerator_create(json, &acc);
  if (st != ACC_OK) fprintf(stderr, "acc_accelerator_create(%s): %s\n", json, acc_last_error_message());
  return acc;
}

static void test_bad_configs(void) {
  struct {
    const char* json;
    acc_status code;
    const char* culprit;
  } cases[] = {
      {"{\"cpu\": \"yes\"}", ACC_ERR_INVALID_CONFIG, "cpu"},
      {"{\"gradient_acumulation_steps\": 2}", ACC_ERR_INVALID_CONFIG, "gradient_accumulation_steps"},
      {"{\"mixed_precision\": \"fp32\"}", ACC_ERR_INVALID_CONFIG, "bf16"},
      {"{\"gradient_accumulation_steps\": 0}", ACC_ERR_INVALID_CONFIG, "gradient_accumulation_steps"},
      {"{\"dataloader_config\": {\"even_batchs\": true}}", ACC_ERR_INVALID_CONFIG, "even_batches"},
      {"{\"ddp_kwargs\": {\"bucket_cap_mb\": \"big\"}}", ACC_ERR_INVALID_CONFIG, "bucket_cap_mb"},
      {"{\"seed\": 1.5}", ACC_ERR_INVALID_CONFIG, "seed"},
      {"{\"cpu\": true", ACC_ERR_INVALID_CONFIG, "JSON"},
      {"[1, 2]", ACC_ERR_INVALID_CONFIG, "object"},
      /* ParallelismConfig's data-parallel sizes must make the job (Accelerate's _validate_accelerator) */
      {"{\"fsdp_plugin\": {\"fsdp_version\": 2}, \"parallelism_config\": {\"dp_replicate_size\": 2, \"dp_shard_size\": "
       "2}}",
       ACC_ERR_INVALID_CONFIG,
       "sizes multiply to 4 processes ('parallelism_config.dp_replicate_size' (2, acc_accelerator_create), "
       "'parallelism_config.dp_shard_size' (2, acc_accelerator_create)), but the job has 1 process"},
      {"{\"parallelism_config\": {\"dp_shard_size\": 2}}", ACC_ERR_INVALID_CONFIG,
       "sizes multiply to 2 processes ('parallelism_config.dp_shard_size' (2, acc_accelerator_create)), but the job "
       "has 1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    acc_accelerator* acc = (acc_accelerator*)0x1;
    acc_status st = acc_accelerator_create(cases[i].json, &acc);
    const char* msg = acc_last_error_message();
    if (st == cases[i].code && strstr(msg, cases[i].culprit) && acc == NULL) {
      ++g_passed;
    } else {
      ++g_failed;
      fprintf(stderr, "config %s: got %s \"%s\"; expected %s naming %s\n", cases[i].json, acc_status_name(st), msg,
              acc_status_name(cases[i].code), cases[i].culprit);
    }
  }
  acc_accelerator* acc = make_acc(NULL);
  EXPECT(acc != NULL);
  const char *device, *type, *json;
  int32_t rank, world, main_proc;
  EXPECT_OK(acc_device(acc, &device));
  EXPECT(strcmp(device, "cpu") == 0 || strcmp(device, "cuda:0") == 0); /* Accelerate's default: a GPU if usable */
  EXPECT_OK(acc_distributed_type(acc, &type));
  EXPECT(strcmp(type, "NO") == 0);
  EXPECT_OK(acc_process_index(acc, &rank));
  EXPECT_OK(acc_num_processes(acc, &world));
  EXPECT_OK(acc_is_main_process(acc, &main_proc));
  EXPECT(rank == 0 && world == 1 && main_proc == 1);
  EXPECT_OK(acc_config_json(acc, &json));
  EXPECT(strstr(json, "bucket_cap_mb") != NULL);
  acc_accelerator_destroy(acc);
}

static void test_bad_calls(void) {
  int32_t i32;
  acc_tensor* t = NULL;
  acc_model* m = NULL;
  acc_optimizer* o = NULL;
  EXPECT_ERR(acc_process_index(NULL, &i32), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  EXPECT_ERR(acc_backward(NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  EXPECT_ERR(acc_prepare(NULL, NULL, NULL, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  EXPECT_ERR(acc_gather(NULL, NULL, &t), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  EXPECT_ERR(acc_model_forward(NULL, NULL, NULL, &t, NULL), ACC_ERR_INVALID_ARGUMENT, "model is NULL");
  EXPECT_ERR(acc_optimizer_create(NULL, "{\"type\": \"sgd\"}", &o), ACC_ERR_INVALID_ARGUMENT, "model is NULL");
  EXPECT_ERR(acc_optimizer_step(NULL), ACC_ERR_INVALID_ARGUMENT, "optimizer is NULL");
  EXPECT_ERR(acc_scheduler_step(NULL), ACC_ERR_INVALID_ARGUMENT, "scheduler is NULL");
  EXPECT_ERR(acc_dataloader_next(NULL, &t, NULL, &i32), ACC_ERR_INVALID_ARGUMENT, "dataloader is NULL");
  EXPECT_ERR(acc_model_create(NULL, &m), ACC_ERR_INVALID_CONFIG, "type");
  EXPECT_ERR(acc_model_create("{\"type\": \"cnn\"}", &m), ACC_ERR_INVALID_CONFIG, "mlp");
  EXPECT_ERR(acc_model_create("{\"type\": \"mlp\"}", &m), ACC_ERR_INVALID_CONFIG, "sizes");
  EXPECT_ERR(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1], \"layers\": 3}", &m), ACC_ERR_INVALID_CONFIG,
             "unknown key 'layers'");
  EXPECT_ERR(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 16, \"block_size\": 8, \"n_layer\": 1,"
                              " \"n_head\": 3, \"n_embd\": 8}",
                              &m),
             ACC_ERR_INVALID_CONFIG, "n_head");
  EXPECT(m == NULL);
  EXPECT_ERR(acc_model_load_torchscript("/nonexistent/model.pt", NULL, &m), ACC_ERR_IO, "/nonexistent/model.pt");
  acc_dataset* ds = NULL;
  EXPECT_ERR(acc_dataset_from_token_file("/nonexistent/train.bin", "{\"block_size\": 8}", &ds), ACC_ERR_IO,
             "/nonexistent/train.bin");
  EXPECT_ERR(acc_dataset_from_token_file("/nonexistent/train.bin", "{}", &ds), ACC_ERR_INVALID_CONFIG, "block_size");
  EXPECT_ERR(acc_reduce(NULL, NULL, 7, &t), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  /* destroy functions accept NULL */
  acc_accelerator_destroy(NULL);
  acc_model_destroy(NULL);
  acc_optimizer_destroy(NULL);
  acc_scheduler_destroy(NULL);
  acc_dataset_destroy(NULL);
  acc_dataloader_destroy(NULL);
}

/* Handles used after their destroy, or destroyed twice: refused with a message (they crashed before). The check
 * looks the pointer up among the live handles and reads nothing of it, so AddressSanitizer runs this too. */
static void test_dead_handles(void) {
  float v[2] = {1, 2};
  int64_t shape[1] = {2};
  acc_tensor* t = NULL;
  acc_model* m = NULL;
  int32_t ndim = 0;
  CHECK(acc_tensor_from_host(v, sizeof v, ACC_FLOAT32, shape, 1, &t));
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &m));
  acc_tensor_destroy(t);
  acc_model_destroy(m);
  EXPECT_ERR(acc_tensor_ndim(t, &ndim), ACC_ERR_INVALID_ARGUMENT, "tensor is not a live handle");
  EXPECT_ERR(acc_model_set_training(m, 1), ACC_ERR_INVALID_ARGUMENT, "model is not a live handle");
  acc_tensor_destroy(t); /* twice: no double free */
  EXPECT(strstr(acc_last_error_message(), "acc_tensor_destroy: not a live handle") != NULL);
  acc_model_destroy(m);
  EXPECT(strstr(acc_last_error_message(), "acc_model_destroy: not a live handle") != NULL);
}

/* A live handle of one type passed where another is expected (an acc_batch* as an acc_bytes_list*, handles that
 * share a layout like the optimizer and the scheduler): refused naming the type expected (it crashed, or worked
 * on the wrong object). A destroy of the wrong type frees nothing. */
static void test_mismatched_handles(void) {
  float v[2] = {1, 2};
  int64_t shape[1] = {2}, n = -1;
  acc_tensor* t = NULL;
  acc_model* m = NULL;
  acc_optimizer* opt = NULL;
  acc_batch* b = NULL;
  acc_bytes_list* list = NULL;
  acc_dataset* ds = NULL;
  double lr = 0;
  int32_t flag = 0;
  CHECK(acc_tensor_from_host(v, sizeof v, ACC_FLOAT32, shape, 1, &t));
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &m));
  CHECK(acc_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
  CHECK(acc_batch_create(&b));
  CHECK(acc_bytes_list_create(&list));
  CHECK(acc_dataset_from_tensors(t, NULL, &ds));
  EXPECT_ERR(acc_bytes_list_count((const acc_bytes_list*)b, &n), ACC_ERR_INVALID_ARGUMENT,
             "list is not a live handle of type acc_bytes_list");
  EXPECT_ERR(acc_bytes_list_append((acc_bytes_list*)b, "x", 1), ACC_ERR_INVALID_ARGUMENT, "acc_bytes_list");
  EXPECT_ERR(acc_batch_count((const acc_batch*)list, &n), ACC_ERR_INVALID_ARGUMENT,
             "batch is not a live handle of type acc_batch");
  EXPECT_ERR(acc_scheduler_last_lr((const acc_scheduler*)opt, &lr), ACC_ERR_INVALID_ARGUMENT, "acc_scheduler");
  EXPECT_ERR(acc_model_set_training((acc_model*)t, 1), ACC_ERR_INVALID_ARGUMENT, "acc_model");
  EXPECT_ERR(acc_tensor_numel((const acc_tensor*)m, &n), ACC_ERR_INVALID_ARGUMENT, "acc_tensor");
  EXPECT_ERR(acc_dataloader_epoch((const acc_dataloader*)ds, &n), ACC_ERR_INVALID_ARGUMENT, "acc_dataloader");
  EXPECT_ERR(acc_is_main_process((const acc_accelerator*)opt, &flag), ACC_ERR_INVALID_ARGUMENT, "acc_accelerator");
  acc_bytes_list_destroy((acc_bytes_list*)b);
  EXPECT(strstr(acc_last_error_message(), "acc_bytes_list_destroy: not a live handle of type acc_bytes_list") != NULL);
  acc_scheduler_destroy((acc_scheduler*)opt);
  EXPECT(strstr(acc_last_error_message(), "acc_scheduler_destroy: not a live handle") != NULL);
  /* both still live and usable */
  EXPECT_OK(acc_batch_count(b, &n));
  EXPECT(n == 0);
  EXPECT_OK(acc_optimizer_zero_grad(opt));
  acc_dataset_destroy(ds);
  acc_bytes_list_destroy(list);
  acc_batch_destroy(b);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_tensor_destroy(t);
}

/* A checkpoint save callback that destroys the list libacc lends it: the save fails naming it (a double free
 * before). */
static acc_status destroying_save(void* user, acc_bytes_list* out) {
  (void)user;
  acc_status st = acc_bytes_list_append(out, "state", 5);
  acc_bytes_list_destroy(out);
  return st;
}
static acc_status ignoring_load(void* user, const void* data, size_t size) {
  (void)user;
  (void)data;
  (void)size;
  return ACC_OK;
}

static void test_lent_handles(void) {
  acc_accelerator* acc = NULL;
  CHECK(acc_accelerator_create(NULL, &acc));
  EXPECT_OK(acc_register_for_checkpointing(acc, destroying_save, ignoring_load, NULL, NULL));
  char dir[400];
  snprintf(dir, sizeof dir, "%s/lent", tmp_dir);
  EXPECT_ERR(acc_save_state(acc, dir), ACC_ERR_CALLBACK, "acc_bytes_list_destroy on the list libacc lent it");
  acc_accelerator_destroy(acc);
}

/* Paths the system refuses (a name over NAME_MAX, a symlink loop) are file errors naming the path, through every
 * function that takes one (they were ACC_ERR_INTERNAL). */
static void test_bad_paths(void) {
  char long_name[600], loop[400], loop_file[450];
  snprintf(long_name, sizeof long_name, "%s/", tmp_dir);
  size_t n = strlen(long_name);
  memset(long_name + n, 'x', 300); /* one component longer than NAME_MAX (255) */
  long_name[n + 300] = '\0';
  snprintf(loop, sizeof loop, "%s/loop", tmp_dir);
  EXPECT(symlink(loop, loop) == 0);
  snprintf(loop_file, sizeof loop_file, "%s/loop/model.safetensors", tmp_dir);
  const char* paths[3] = {long_name, loop, loop_file};
  const char* culprits[3] = {"xxxxxxxxxxxxxxxx", "/loop", "/loop"};
  acc_accelerator* acc = NULL;
  acc_model* m = NULL;
  CHECK(acc_accelerator_create(NULL, &acc));
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &m));
  for (int i = 0; i < 3; ++i) {
    acc_model* got = NULL;
    acc_dataset* ds = NULL;
    EXPECT_ERR(acc_model_from_pretrained(paths[i], NULL, &got), ACC_ERR_IO, culprits[i]);
    EXPECT_ERR(acc_model_load_torchscript(paths[i], NULL, &got), ACC_ERR_IO, culprits[i]);
    EXPECT_ERR(acc_model_load_safetensors(m, paths[i]), ACC_ERR_IO, culprits[i]);
    EXPECT_ERR(acc_dataset_from_token_file(paths[i], "{\"block_size\": 8}", &ds), ACC_ERR_IO, culprits[i]);
    EXPECT_ERR(acc_save_state(acc, paths[i]), ACC_ERR_IO, culprits[i]);
    EXPECT_ERR(acc_load_state(acc, paths[i]), ACC_ERR_IO, culprits[i]);
    EXPECT_ERR(acc_save_model(m, paths[i], NULL), ACC_ERR_IO, culprits[i]);
  }
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
}

/* y = 3 x0 - 2 x1 + 1 over 64 samples: an MLP regression that must learn. */
static acc_dataset* regression_data(int n) {
  float* x = malloc(sizeof(float) * 2 * (size_t)n);
  float* y = malloc(sizeof(float) * (size_t)n);
  for (int i = 0; i < n; ++i) {
    x[2 * i] = (float)sin(i * 0.37);
    x[2 * i + 1] = (float)cos(i * 0.11);
    y[i] = 3 * x[2 * i] - 2 * x[2 * i + 1] + 1;
  }
  int64_t xs[2] = {n, 2}, ys[2] = {n, 1};
  acc_tensor *tx, *ty;
  acc_dataset* ds = NULL;
  if (acc_tensor_from_host(x, sizeof(float) * 2 * (size_t)n, ACC_FLOAT32, xs, 2, &tx) == ACC_OK &&
      acc_tensor_from_host(y, sizeof(float) * (size_t)n, ACC_FLOAT32, ys, 2, &ty) == ACC_OK) {
    EXPECT_OK(acc_dataset_from_tensors(tx, ty, &ds));
    acc_tensor_destroy(tx);
    acc_tensor_destroy(ty);
  }
  free(x);
  free(y);
  return ds;
}

static void test_training_and_order(void) {
  acc_accelerator* acc = make_acc("{\"seed\": 7}");
  acc_dataset* ds = regression_data(64);
  acc_dataloader* dl;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 16, \"shuffle\": true, \"seed\": 3}", &dl));
  EXPECT_ERR(acc_dataloader_create(ds, "{\"batch_size\": 0}", &dl), ACC_ERR_INVALID_CONFIG, "batch_size");
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 16, \"shuffle\": true, \"seed\": 3}", &dl));
  acc_model *m, *other;
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 16, 1], \"activation\": \"tanh\"}", &m));
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 1]}", &other));
  acc_optimizer *opt, *other_opt;
  acc_scheduler* sched;
  EXPECT_ERR(acc_optimizer_create(m, "{\"type\": \"adamw\", \"betas\": [0.9]}", &opt), ACC_ERR_INVALID_CONFIG, "betas");
  EXPECT_ERR(acc_optimizer_create(m, "{\"lr\": 0.1}", &opt), ACC_ERR_INVALID_CONFIG, "type");
  EXPECT_OK(acc_optimizer_create(m, "{\"type\": \"adam\", \"lr\": 0.05}", &opt));
  EXPECT_OK(acc_optimizer_create(other, "{\"type\": \"sgd\"}", &other_opt));
  EXPECT_ERR(acc_scheduler_create(opt, "{\"type\": \"cosine\"}", &sched), ACC_ERR_INVALID_CONFIG, "total_steps");
  EXPECT_OK(acc_scheduler_create(opt, "{\"type\": \"linear\", \"warmup_steps\": 2, \"total_steps\": 100}", &sched));
  double lr;
  EXPECT_OK(acc_scheduler_last_lr(sched, &lr));
  EXPECT(lr == 0.0); /* LambdaLR: factor(0) of a warmup is 0 */

  /* call order: an optimizer whose model is not prepared, nothing at all, a second prepare */
  EXPECT_ERR(acc_prepare(acc, NULL, other_opt, NULL, NULL), ACC_ERR_INVALID_STATE, "model is not prepared");
  EXPECT_ERR(acc_prepare(acc, NULL, NULL, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "nothing to prepare");
  EXPECT_OK(acc_prepare(acc, m, opt, sched, dl));
  EXPECT_ERR(acc_prepare(acc, m, NULL, NULL, NULL), ACC_ERR_INVALID_STATE, "already prepared");
  EXPECT_ERR(acc_prepare(acc, NULL, NULL, NULL, dl), ACC_ERR_INVALID_STATE, "already prepared");

  double first = -1, last = 0;
  int steps = 0;
  for (int epoch = 0; epoch < 25; ++epoch) {
    for (;;) {
      acc_tensor *x, *y, *loss, *out;
      int32_t has;
      EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
      if (!has) break;
      EXPECT_OK(acc_model_forward(m, x, y, &out, &loss));
      EXPECT_ERR(acc_backward(acc, out), ACC_ERR_INVALID_ARGUMENT, "one element");
      EXPECT_OK(acc_tensor_item(loss, &last));
      if (first < 0) first = last;
      EXPECT_OK(acc_backward(acc, loss));
      EXPECT_OK(acc_optimizer_step(opt));
      EXPECT_OK(acc_scheduler_step(sched));
      EXPECT_OK(acc_optimizer_zero_grad(opt));
      ++steps;
      acc_tensor_destroy(x);
      acc_tensor_destroy(y);
      acc_tensor_destroy(out);
      acc_tensor_destroy(loss);
    }
  }
  EXPECT(steps == 100);
  EXPECT(last < first * 0.05);
  EXPECT_OK(acc_scheduler_last_lr(sched, &lr));
  EXPECT(fabs(lr) < 1e-12); /* linear decay reached 0 after total_steps */
  /* a loss without a graph */
  float v = 1;
  acc_tensor* plain;
  EXPECT_OK(acc_tensor_from_host(&v, sizeof v, ACC_FLOAT32, NULL, 0, &plain));
  EXPECT_ERR(acc_backward(acc, plain), ACC_ERR_INVALID_ARGUMENT, "autograd graph");
  acc_tensor *g, *r;
  EXPECT_OK(acc_gather(acc, plain, &g));
  EXPECT_OK(acc_reduce(acc, plain, ACC_REDUCE_MEAN, &r));
  EXPECT_ERR(acc_reduce(acc, plain, 9, &r), ACC_ERR_INVALID_ARGUMENT, "op 9");
  int64_t n;
  EXPECT_OK(acc_tensor_numel(g, &n));
  EXPECT(n == 1);
  acc_tensor_destroy(g);
  acc_tensor_destroy(r);
  acc_tensor_destroy(plain);

  /* safetensors round trip, and a refused load into a different architecture */
  char path[512];
  snprintf(path, sizeof path, "%s/mlp.safetensors", tmp_dir);
  EXPECT_OK(acc_model_save_safetensors(m, path));
  acc_model* copy;
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 16, 1], \"activation\": \"tanh\"}", &copy));
  EXPECT_OK(acc_model_load_safetensors(copy, path));
  int64_t count;
  EXPECT_OK(acc_model_state_size(copy, &count));
  EXPECT(count == 4);
  for (int64_t i = 0; i < count; ++i) {
    const char *na, *nb;
    acc_tensor *ta, *tb;
    EXPECT_OK(acc_model_state_get(m, i, &na, &ta));
    EXPECT_OK(acc_model_state_get(copy, i, &nb, &tb));
    EXPECT(strcmp(na, nb) == 0);
    size_t bytes;
    EXPECT_OK(acc_tensor_nbytes(ta, &bytes));
    float* a = malloc(bytes);
    float* b = malloc(bytes);
    EXPECT_OK(acc_tensor_to_host(ta, a, bytes));
    EXPECT_OK(acc_tensor_to_host(tb, b, bytes));
    EXPECT(memcmp(a, b, bytes) == 0);
    free(a);
    free(b);
    acc_tensor_destroy(ta);
    acc_tensor_destroy(tb);
  }
  const char* name;
  EXPECT_ERR(acc_model_state_get(m, 4, &name, NULL), ACC_ERR_INVALID_ARGUMENT, "index 4");
  EXPECT_ERR(acc_model_load_safetensors(other, path), ACC_ERR_INVALID_ARGUMENT, "shape");
  EXPECT_ERR(acc_model_load_safetensors(other, "/nonexistent.safetensors"), ACC_ERR_IO, "cannot open");

  /* Handles keep their parents alive: destroy the accelerator and the dataset first. */
  acc_accelerator_destroy(acc);
  acc_dataset_destroy(ds);
  acc_tensor *x, *y;
  int32_t has;
  EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
  EXPECT(has == 1);
  acc_tensor_destroy(x);
  acc_tensor_destroy(y);
  acc_model_destroy(m);
  EXPECT_OK(acc_optimizer_step(opt));
  acc_optimizer_destroy(opt);
  EXPECT_OK(acc_scheduler_step(sched));
  acc_scheduler_destroy(sched);
  acc_dataloader_destroy(dl);
  acc_model_destroy(copy);
  acc_model_destroy(other);
  acc_optimizer_destroy(other_opt);
}

/* The callback dataset: sample i is ([i, i], [2i]); index 5 fails on purpose. */
static int g_freed;
static acc_status get_sample(void* user, int64_t index, acc_tensor** input, acc_tensor** target) {
  int64_t dim = 2;
  float x[2] = {(float)index, (float)index}, y = (float)(2 * index) * *(float*)user;
  if (index == 5) return 42;
  if (acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, &dim, 1, input) != ACC_OK) return 1;
  return acc_tensor_from_host(&y, sizeof y, ACC_FLOAT32, NULL, 0, target);
}
static void free_user(void* user) {
  (void)user;
  ++g_freed;
}

static void test_callback_dataset(void) {
  static float scale = 1.0f;
  acc_dataset* ds;
  EXPECT_OK(acc_dataset_from_callback(8, get_sample, &scale, free_user, &ds));
  int64_t len;
  EXPECT_OK(acc_dataset_length(ds, &len));
  EXPECT(len == 8);
  acc_dataloader* dl;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4}", &dl));
  acc_dataset_destroy(ds); /* the loader keeps it */
  EXPECT(g_freed == 0);
  acc_tensor *x, *y;
  int32_t has;
  EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
  float xs[8], ys[4];
  EXPECT_OK(acc_tensor_to_host(x, xs, sizeof xs));
  EXPECT_OK(acc_tensor_to_host(y, ys, sizeof ys));
  EXPECT(xs[6] == 3 && ys[3] == 6);
  acc_tensor_destroy(x);
  acc_tensor_destroy(y);
  EXPECT_ERR(acc_dataloader_next(dl, &x, &y, &has), ACC_ERR_CALLBACK, "returned 42 for index 5");
  EXPECT(has == 0 && x == NULL);
  acc_dataloader_destroy(dl);
  EXPECT(g_freed == 1);
  EXPECT_ERR(acc_dataset_from_callback(-1, get_sample, &scale, free_user, &ds), ACC_ERR_INVALID_ARGUMENT, "length");
  EXPECT(g_freed == 2); /* released on failure too */
}

/* A token file: block 4 over tokens 0..20 gives 5 samples, targets shifted by one. */
static void test_token_file(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/tokens.bin", tmp_dir);
  FILE* f = fopen(path, "wb");
  for (uint16_t i = 0; i <= 20; ++i) fwrite(&i, 2, 1, f);
  fclose(f);
  acc_dataset* ds;
  EXPECT_OK(acc_dataset_from_token_file(path, "{\"block_size\": 4, \"dtype\": \"uint16\"}", &ds));
  int64_t len;
  EXPECT_OK(acc_dataset_length(ds, &len));
  EXPECT(len == 5);
  acc_dataloader* dl;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 2}", &dl));
  acc_tensor *x, *y;
  int32_t has;
  int64_t xs[8], ys[8];
  EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
  EXPECT_OK(acc_tensor_to_host(x, xs, sizeof xs));
  EXPECT_OK(acc_tensor_to_host(y, ys, sizeof ys));
  EXPECT(xs[0] == 0 && xs[7] == 7 && ys[0] == 1 && ys[7] == 8);
  acc_tensor_destroy(x);
  acc_tensor_destroy(y);
  int64_t batches;
  EXPECT_OK(acc_dataloader_length(dl, &batches));
  EXPECT(batches == 3);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  EXPECT_ERR(acc_dataset_from_token_file(path, "{\"block_size\": 40}", &ds), ACC_ERR_INVALID_ARGUMENT,
             "fewer than block_size");
}

/* acc_model_set_requires_grad: freezing by pattern, its errors, and a model with nothing left to train. */
static void test_frozen(void) {
  acc_model* m;
  EXPECT_OK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 8, 4, 1], \"activation\": \"tanh\"}", &m));
  int64_t n = -1, total = 0;
  EXPECT_OK(acc_model_set_requires_grad(m, "layers\\.0\\..*", 0, &n));
  EXPECT(n == 2); /* layers.0.weight and layers.0.bias */
  EXPECT_ERR(acc_model_set_requires_grad(m, "nothing.*", 0, &n), ACC_ERR_INVALID_ARGUMENT,
             "'nothing.*' matches no parameter");
  EXPECT(n == 0);
  EXPECT_ERR(acc_model_set_requires_grad(m, "layers.(", 0, NULL), ACC_ERR_INVALID_ARGUMENT, "not a regular expression");
  EXPECT_ERR(acc_model_set_requires_grad(m, NULL, 0, NULL), ACC_ERR_INVALID_ARGUMENT, "pattern");
  EXPECT_ERR(acc_model_set_requires_grad(NULL, ".*", 0, NULL), ACC_ERR_INVALID_ARGUMENT, "model");
  EXPECT_OK(acc_model_set_requires_grad(m, "layers\\.2\\.bias", 1, NULL)); /* already trainable: fine */
  /* The optimizer takes the trainable parameters only: a group naming a frozen one selects nothing. */
  acc_optimizer* opt;
  EXPECT_ERR(acc_optimizer_create(m, "{\"type\": \"sgd\", \"param_groups\": [{\"params\": \"layers\\\\.0\\\\..*\"}]}",
                                  &opt),
             ACC_ERR_INVALID_CONFIG, "param_groups[0]");
  EXPECT_OK(acc_model_num_parameters(m, &total));
  EXPECT_OK(acc_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
  /* Everything frozen: the loss has no graph, and backward says why. */
  EXPECT_OK(acc_model_set_requires_grad(m, ".*", 0, &n));
  EXPECT(n == 6);
  /* An optimizer over nothing trainable is refused, as torch.optim refuses an empty parameter list (issue 36). */
  acc_optimizer* none = NULL;
  EXPECT_ERR(acc_optimizer_create(m, "{\"type\": \"adamw\"}", &none), ACC_ERR_INVALID_ARGUMENT,
             "the optimizer has no parameter to train: every parameter of the model is frozen");
  EXPECT(none == NULL);
  acc_accelerator* acc = make_acc("{}");
  EXPECT_OK(acc_prepare(acc, m, NULL, NULL, NULL));
  EXPECT_ERR(acc_model_set_requires_grad(m, ".*", 1, NULL), ACC_ERR_INVALID_STATE, "before acc_prepare");
  float x[2] = {0.5f, -1.0f}, y[1] = {0.25f};
  int64_t xs[2] = {1, 2}, ys[2] = {1, 1};
  acc_tensor *tx, *ty, *loss;
  EXPECT_OK(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx));
  EXPECT_OK(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty));
  EXPECT_OK(acc_model_forward(m, tx, ty, NULL, &loss));
  EXPECT_ERR(acc_backward(acc, loss), ACC_ERR_INVALID_ARGUMENT, "every parameter of the prepared model is frozen");
  acc_tensor_destroy(loss);
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  acc_optimizer_destroy(opt);
  acc_model_destroy(m);
  acc_accelerator_destroy(acc);
}

int main(void) {
  char tmpl[] = "/tmp/acc-capi-XXXXXX";
  tmp_dir = mkdtemp(tmpl);
  test_library();
  test_tensors();
  test_bad_configs();
  test_bad_calls();
  test_dead_handles();
  test_lent_handles();
  test_bad_paths();
  test_mismatched_handles();
  test_training_and_order();
  test_callback_dataset();
  test_token_file();
  test_frozen();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
  return finish();
}
