/* The CUDA path, through the C ABI. Usage: test_gpu MODE [args]
 *   fallback PLUGIN_BUILT   no GPU needed: build info tells the truth, and without a usable GPU the
 *                           accelerator is on the CPU (the plugin's dlopen fails cleanly), and
 *                           ACC_REQUIRE_CUDA=1 turns that into an error that says why
 *   broken NEEDLE           ACC_CUDA_PLUGIN names a file that is no plugin: the accelerator is on the CPU,
 *                           and with ACC_REQUIRE_CUDA=1 the error names NEEDLE
 *   single                  one process on cuda:0 trains an MLP; exits 77 (skip) without a CUDA device
 *   nccl                    two ranks on cuda:0 and cuda:1: collectives on CUDA tensors through NCCL, and
 *                           DDP training equal to one process on the global batch; exits 77 (skip)
 *                           with fewer than two CUDA devices
 *   checkpoint_rng          save_state / load_state restore the CUDA generator (dropout on cuda:0);
 *                           exits 77 (skip) without a CUDA device
 *   precision               a GPT on cuda:0 trained under mixed_precision no, bf16, fp16 and fp8 (FP8 GEMMs
 *                           on compute capability 8.9 and newer, refused naming it below): every curve falls
 *                           and ends near float32's, and fp8's first loss is close to bf16's but not equal
 *                           (its linear layers did run in FP8); exits 77 (skip) without a CUDA device
 *   rank OUT BATCH STEPS    (internal) one rank of `nccl`, or its single-process reference run
 *   probe                   (internal) exits 0 when the accelerator lands on CUDA, 3 otherwise
 * Prints "N passed, N failed". */
#include <acc/acc.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../c/check.h"

static const char* g_self;

static const char* device_of(acc_accelerator* acc) {
  const char* d;
  CHECK(acc_device(acc, &d));
  return d;
}

/* ---- fallback: runs everywhere --------------------------------------------------------------- */

static int fallback(int plugin_built) {
  const char* info = acc_build_info();
  printf("build info: %s\n", info);
  EXPECT(strstr(info, plugin_built ? "\"cuda\": true" : "\"cuda\": false") != NULL);
  EXPECT((strstr(info, "\"nccl\"") != NULL) == (plugin_built != 0));
  EXPECT(strstr(info, "\"gloo\"") != NULL);

  /* An NVIDIA driver shows as /dev/nvidiactl; without it, CUDA cannot be usable. */
  struct stat st;
  const int driver = stat("/dev/nvidiactl", &st) == 0;
  acc_accelerator* acc;
  unsetenv("ACC_REQUIRE_CUDA");
  EXPECT_OK(acc_accelerator_create(NULL, &acc));
  if (acc) {
    const char* dev = device_of(acc);
    printf("default device: %s (NVIDIA driver %s)\n", dev, driver ? "present" : "absent");
    EXPECT(driver ? (!strcmp(dev, "cpu") || !strcmp(dev, "cuda:0")) : !strcmp(dev, "cpu"));
    const char* dt;
    CHECK(acc_distributed_type(acc, &dt));
    EXPECT(!strcmp(dt, "NO"));
    acc_accelerator_destroy(acc);
  }
  /* cpu = true never touches CUDA. */
  EXPECT_OK(acc_accelerator_create("{\"cpu\": true}", &acc));
  if (acc) {
    EXPECT(!strcmp(device_of(acc), "cpu"));
    acc_accelerator_destroy(acc);
  }
  if (!driver) {
    /* Asked for CUDA explicitly: an error that says why, and no accelerator. */
    setenv("ACC_REQUIRE_CUDA", "1", 1);
    EXPECT_ERR(acc_accelerator_create(NULL, &acc), ACC_ERR_UNSUPPORTED, "CUDA is not usable");
    printf("with ACC_REQUIRE_CUDA=1: %s\n", acc_last_error_message());
    EXPECT(acc == NULL);
    /* ... and cpu = true still wins. */
    EXPECT_OK(acc_accelerator_create("{\"cpu\": true}", &acc));
    acc_accelerator_destroy(acc);
    unsetenv("ACC_REQUIRE_CUDA");
  }
  /* The failed load is remembered, not retried into a crash. */
  EXPECT_OK(acc_accelerator_create(NULL, &acc));
  acc_accelerator_destroy(acc);
  return finish();
}

static int broken(const char* needle) {
  acc_accelerator* acc;
  unsetenv("ACC_REQUIRE_CUDA");
  EXPECT_OK(acc_accelerator_create(NULL, &acc));
  if (acc) EXPECT(!strcmp(device_of(acc), "cpu"));
  acc_accelerator_destroy(acc);
  setenv("ACC_REQUIRE_CUDA", "1", 1);
  EXPECT_ERR(acc_accelerator_create(NULL, &acc), ACC_ERR_UNSUPPORTED, needle);
  const char* plugin = getenv("ACC_CUDA_PLUGIN");
  printf("with ACC_CUDA_PLUGIN=%s: %s\n", plugin ? plugin : "(unset)", acc_last_error_message());
  return finish();
}

/* ---- training, shared by single and rank ------------------------------------------------------ */

static acc_tensor* floats(const float* v, int64_t rows, int64_t cols) {
  acc_tensor* t;
  int64_t shape[2] = {rows, cols};
  CHECK(acc_tensor_from_host(v, (size_t)(rows * cols) * sizeof(float), ACC_FLOAT32, shape, 2, &t));
  return t;
}

/* Rank r's batch of the prepared loader over [1, 2, 3, 4] is [1+2r, 2+2r], on its CUDA device: gather and
 * reduce then run through NCCL (the plain host tensors of tests/mp go through Gloo). */
static void cuda_collectives(acc_accelerator* acc, int rank, int world) {
  const float values[4] = {1, 2, 3, 4};
  acc_tensor* all = floats(values, 4, 1);
  acc_dataset* ds;
  CHECK(acc_dataset_from_tensors(all, NULL, &ds));
  acc_dataloader* dl;
  CHECK(acc_dataloader_create(ds, world == 2 ? "{\"batch_size\": 2}" : "{\"batch_size\": 4}", &dl));
  CHECK(acc_prepare(acc, NULL, NULL, NULL, dl));
  acc_tensor *bx, *out;
  int32_t has;
  CHECK(acc_dataloader_next(dl, &bx, NULL, &has));
  EXPECT(has);
  if (!has) exit(finish());
  const float mine2[2] = {1.0f + 2 * rank, 2.0f + 2 * rank};
  EXPECT(equals(bx, world == 2 ? mine2 : values, world == 2 ? 2 : 4));
  const float gathered[4] = {1, 2, 3, 4}, sum[2] = {4, 6}, mean[2] = {2, 3}, max[2] = {3, 4};
  CHECK(acc_gather(acc, bx, &out));
  EXPECT(equals(out, gathered, 4));
  acc_tensor_destroy(out);
  if (world == 2) {
    CHECK(acc_reduce(acc, bx, ACC_REDUCE_SUM, &out));
    EXPECT(equals(out, sum, 2));
    acc_tensor_destroy(out);
    CHECK(acc_reduce(acc, bx, ACC_REDUCE_MEAN, &out));
    EXPECT(equals(out, mean, 2));
    acc_tensor_destroy(out);
    CHECK(acc_reduce(acc, bx, ACC_REDUCE_MAX, &out));
    EXPECT(equals(out, max, 2));
    acc_tensor_destroy(out);
  }
  acc_tensor_destroy(bx);
  for (;;) { /* finish the epoch */
    CHECK(acc_dataloader_next(dl, &bx, NULL, &has));
    if (!has) break;
    acc_tensor_destroy(bx);
  }
  CHECK(acc_wait_for_everyone(acc));
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tensor_destroy(all);
}

/* MLP regression on y = sin(3 x0) + x1 x2 (256 samples, the same on every process); the main process
 * writes every state tensor, as float32, one after the other, to `out`. Sets the mean loss over the first
 * and over the last epoch's worth of steps (the batches come in order, and one batch's loss says little
 * against another's). */
static void train(acc_accelerator* acc, int batch, int steps, const char* out, double* first, double* last) {
  enum { N = 256 };
  static float x[N * 3], y[N];
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < 3; ++j) x[3 * i + j] = (float)sin(0.1 * i * (j + 1) + j);
    y[i] = (float)(sin(3 * x[3 * i]) + x[3 * i + 1] * x[3 * i + 2]);
  }
  acc_tensor *tx = floats(x, N, 3), *ty = floats(y, N, 1);
  acc_dataset* ds;
  CHECK(acc_dataset_from_tensors(tx, ty, &ds));
  char opts[64];
  snprintf(opts, sizeof opts, "{\"batch_size\": %d}", batch);
  acc_dataloader* dl;
  CHECK(acc_dataloader_create(ds, opts, &dl));
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [3, 32, 32, 1], \"activation\": \"gelu\"}", &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, dl));
  *first = *last = NAN;
  int32_t world;
  CHECK(acc_num_processes(acc, &world));
  const int per_epoch = N / (batch * world);
  double* losses = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *losses);
  if (!losses) exit(1);
  for (int step = 0; step < steps;) {
    acc_tensor *bx, *by, *loss, *mean;
    int32_t has;
    CHECK(acc_dataloader_next(dl, &bx, &by, &has));
    if (!has) continue;
    CHECK(acc_model_forward(model, bx, by, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    CHECK(acc_reduce(acc, loss, ACC_REDUCE_MEAN, &mean)); /* a CUDA scalar: NCCL when distributed */
    CHECK(acc_tensor_item(mean, &losses[step]));
    acc_tensor_destroy(mean);
    acc_tensor_destroy(loss);
    acc_tensor_destroy(bx);
    acc_tensor_destroy(by);
    ++step;
  }
  if (steps > 0) {
    const int k = per_epoch < steps ? per_epoch : steps;
    *first = *last = 0;
    for (int i = 0; i < k; ++i) {
      *first += losses[i] / k;
      *last += losses[steps - k + i] / k;
    }
  }
  free(losses);
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  if (is_main && out) {
    FILE* f = fopen(out, "wb");
    EXPECT(f != NULL);
    int64_t n;
    CHECK(acc_model_state_size(model, &n));
    for (int64_t i = 0; f && i < n; ++i) {
      const char* name;
      acc_tensor* t;
      int64_t numel;
      CHECK(acc_model_state_get(model, i, &name, &t));
      CHECK(acc_tensor_numel(t, &numel));
      float* v = malloc((size_t)numel * sizeof(float));
      CHECK(acc_tensor_to_host(t, v, (size_t)numel * sizeof(float)));
      EXPECT(fwrite(v, sizeof(float), (size_t)numel, f) == (size_t)numel);
      free(v);
      acc_tensor_destroy(t);
    }
    if (f) fclose(f);
  }
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
}

static int single(void) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 42}", &acc));
  const char* dev = device_of(acc);
  if (strncmp(dev, "cuda", 4) != 0) {
    printf("no usable CUDA device (device is %s): skipped\n", dev);
    acc_accelerator_destroy(acc);
    return 77;
  }
  EXPECT(!strcmp(dev, "cuda:0"));
  cuda_collectives(acc, 0, 1);
  double first, last;
  train(acc, 16, 64, NULL, &first, &last);
  printf("cuda:0: mean loss over epoch 1 %.4f, over epoch 4 %.4f\n", first, last);
  EXPECT(isfinite(last) && last < first);
  acc_accelerator_destroy(acc);
  return finish();
}

/* Removes a directory of plain files (a checkpoint is flat). */
static void remove_tree(const char* path) {
  DIR* d = opendir(path);
  if (!d) return;
  struct dirent* e;
  char file[512];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(file, sizeof file, "%s/%s", path, e->d_name);
      EXPECT(unlink(file) == 0);
    }
  closedir(d);
  EXPECT(rmdir(path) == 0);
}

/* save_state keeps the CUDA generators' states (random_states_0.safetensors, "torch.cuda.0"): a GPT with
 * dropout on cuda:0 gives the same loss on the same batch after load_state as right after the save, and a
 * different one when the generator has moved on (so the check can fail). Exits 77 without a CUDA device. */
static int checkpoint_rng(void) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 3}", &acc));
  if (strncmp(device_of(acc), "cuda", 4) != 0) {
    printf("no usable CUDA device: skipped\n");
    acc_accelerator_destroy(acc);
    return 77;
  }
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 16, \"block_size\": 8, \"n_layer\": 1, \"n_head\": 2, "
                         "\"n_embd\": 16, \"dropout\": 0.5}",
                         &model));
  CHECK(acc_prepare(acc, model, NULL, NULL, NULL));
  int64_t ids[16], shape[2] = {2, 8};
  for (int i = 0; i < 16; ++i) ids[i] = (i * 5) % 16;
  acc_tensor *x, *y;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &x));
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &y));
  char dir[] = "/tmp/acc_gpu_rng_XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  char ckpt[64];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  double loss[3];
  CHECK(acc_save_state(acc, ckpt));
  for (int k = 0; k < 3; ++k) {
    if (k == 2) CHECK(acc_load_state(acc, ckpt));
    acc_tensor* l;
    CHECK(acc_model_forward(model, x, y, NULL, &l)); /* the moved tensors draw dropout masks on cuda:0 */
    CHECK(acc_tensor_item(l, &loss[k]));
    acc_tensor_destroy(l);
  }
  printf("dropout losses: after the save %.6f, next %.6f, after load_state %.6f\n", loss[0], loss[1], loss[2]);
  EXPECT(loss[1] != loss[0]);
  EXPECT(loss[2] == loss[0]);
  remove_tree(ckpt);
  EXPECT(rmdir(dir) == 0);
  acc_tensor_destroy(x);
  acc_tensor_destroy(y);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return finish();
}

/* Trains a 2-layer GPT on cuda:0 under `mode` for `steps` AdamW steps on one fixed batch (8 x 32 tokens of a
 * repeating pattern: every dimension a multiple of 16, as FP8 GEMMs need); sets the first and last loss.
 * Returns the accelerator's status when the mode is refused. */
static acc_status train_gpt(const char* mode, int steps, double* first, double* last) {
  char cfg[96];
  snprintf(cfg, sizeof cfg, "{\"seed\": 0, \"mixed_precision\": \"%s\"}", mode);
  acc_accelerator* acc;
  acc_status st = acc_accelerator_create(cfg, &acc);
  if (st != ACC_OK) return st;
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 64, \"block_size\": 32, \"n_layer\": 2, \"n_head\": 4, "
                         "\"n_embd\": 64, \"dropout\": 0.0}",
                         &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.003}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  enum { B = 8, T = 32 };
  static int64_t ids[B * T], next[B * T];
  for (int i = 0; i < B * T; ++i) {
    ids[i] = (i * 7 + i / T) % 61;
    next[i] = ((i + 1) * 7 + i / T) % 61;
  }
  const int64_t shape[2] = {B, T};
  acc_tensor *x, *y;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &x));
  CHECK(acc_tensor_from_host(next, sizeof next, ACC_INT64, shape, 2, &y));
  for (int step = 0; step < steps; ++step) {
    acc_tensor* loss;
    CHECK(acc_model_forward(model, x, y, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    CHECK(acc_tensor_item(loss, step == 0 ? first : last));
    acc_tensor_destroy(loss);
  }
  acc_tensor_destroy(x);
  acc_tensor_destroy(y);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return ACC_OK;
}

static int precision(void) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{}", &acc));
  const int on_cuda = strncmp(device_of(acc), "cuda", 4) == 0;
  acc_accelerator_destroy(acc);
  if (!on_cuda) {
    printf("no usable CUDA device: skipped\n");
    return 77;
  }
  const char* modes[] = {"no", "bf16", "fp16", "fp8"};
  double first[4], last[4];
  for (int m = 0; m < 4; ++m) {
    const acc_status st = train_gpt(modes[m], 60, &first[m], &last[m]);
    if (m == 3 && st == ACC_ERR_UNSUPPORTED) { /* a GPU before Ada: refused, naming the capability */
      printf("fp8: %s\n", acc_last_error_message());
      EXPECT(strstr(acc_last_error_message(), "compute capability") != NULL);
      return finish();
    }
    EXPECT(st == ACC_OK);
    printf("mixed_precision %-4s: loss %.4f at step 1, %.4f at step 60\n", modes[m], first[m], last[m]);
    EXPECT(isfinite(last[m]) && last[m] < 0.5 * first[m]);
    EXPECT(fabs(first[m] - first[0]) < 0.05);
    EXPECT(fabs(last[m] - last[0]) < 0.25 * first[0]);
  }
  /* FP8 GEMMs round their inputs to 3 mantissa bits: the first loss moves off bf16's, by little. */
  printf("first loss: fp8 - bf16 = %.3g\n", first[3] - first[1]);
  EXPECT(first[3] != first[1]);
  return finish();
}

static int rank_main(const char* out, int batch, int steps) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 42}", &acc));
  int32_t rank, local, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_local_process_index(acc, &local));
  CHECK(acc_num_processes(acc, &world));
  char want[32];
  snprintf(want, sizeof want, "cuda:%d", local);
  EXPECT(!strcmp(device_of(acc), want));
  const char* dt;
  CHECK(acc_distributed_type(acc, &dt));
  EXPECT(!strcmp(dt, world > 1 ? "MULTI_GPU" : "NO"));
  cuda_collectives(acc, rank, world);
  double first, last;
  train(acc, batch, steps, out, &first, &last);
  acc_accelerator_destroy(acc);
  if (g_failed) fprintf(stderr, "rank %d: %d checks failed\n", rank, g_failed);
  return finish();
}

/* ---- nccl: the parent starts the ranks -------------------------------------------------------- */

static pid_t spawn(char* const argv[], const char* const env[]) {
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; env[i]; i += 2) setenv(env[i], env[i + 1], 1);
    execv(g_self, argv);
    _exit(127);
  }
  return pid;
}

/* Waits for every pid, killing all of them past `seconds`; returns 0 when all exited 0. */
static int wait_all(pid_t* pids, int n, int seconds) {
  int bad = 0, left = n;
  time_t end = time(NULL) + seconds;
  while (left > 0) {
    for (int i = 0; i < n; ++i) {
      int status;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "child %d ended with status %d\n", (int)pids[i], status);
        bad = 1;
      }
      pids[i] = 0;
      --left;
    }
    if (left > 0 && time(NULL) > end) {
      fprintf(stderr, "children still running after %d s: killed\n", seconds);
      for (int i = 0; i < n; ++i)
        if (pids[i] > 0) kill(pids[i], SIGKILL);
      seconds = 1 << 20;
      bad = 1;
    }
    if (left > 0) usleep(20000);
  }
  return bad;
}

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (s >= 0 && bind(s, (struct sockaddr*)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr*)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (s >= 0) close(s);
  return port;
}

static float* read_floats(const char* path, long* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = ftell(f) / (long)sizeof(float);
  fseek(f, 0, SEEK_SET);
  float* v = malloc((size_t)*n * sizeof(float) + 1);
  if (fread(v, sizeof(float), (size_t)*n, f) != (size_t)*n) *n = -1;
  fclose(f);
  return v;
}

static double max_abs_diff(const char* a, const char* b) {
  long na, nb;
  float *va = read_floats(a, &na), *vb = read_floats(b, &nb);
  double d = INFINITY;
  if (va && vb && na == nb && na > 0) {
    d = 0;
    for (long i = 0; i < na; ++i) d = fmax(d, fabs((double)va[i] - vb[i]));
  }
  free(va);
  free(vb);
  return d;
}

static int nccl(void) {
  /* A second CUDA device? Probe it alone: the second entry of CUDA_VISIBLE_DEVICES (or device 1). */
  char second[64] = "1";
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (visible) {
    const char* comma = strchr(visible, ',');
    if (!comma) strcpy(second, "none");
    else snprintf(second, sizeof second, "%.*s", (int)strcspn(comma + 1, ","), comma + 1);
  }
  char* probe_argv[] = {(char*)g_self, "probe", NULL};
  const char* probe_env[] = {"CUDA_VISIBLE_DEVICES", second, "WORLD_SIZE",       "1", "RANK", "0",
                             "LOCAL_RANK",           "0",    "LOCAL_WORLD_SIZE", "1", NULL};
  pid_t probe = spawn(probe_argv, probe_env);
  int status = 0;
  waitpid(probe, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("fewer than two usable CUDA devices: skipped\n");
    return 77;
  }
  char dir[] = "/tmp/acc-gpu-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char out2[256], out1[256], out0[256], port[16];
  snprintf(out2, sizeof out2, "%s/ddp2.f32", dir);
  snprintf(out1, sizeof out1, "%s/single.f32", dir);
  snprintf(out0, sizeof out0, "%s/init.f32", dir);
  snprintf(port, sizeof port, "%d", free_port());
  /* Two ranks with batch 8 each, against one process with batch 16: the same global batches. */
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {
    char rs[8];
    snprintf(rs, sizeof rs, "%d", r);
    char* argv[] = {(char*)g_self, "rank", out2, "8", "20", NULL};
    const char* env[] = {"RANK",        rs,          "LOCAL_RANK",  rs,   "WORLD_SIZE", "2", "LOCAL_WORLD_SIZE", "2",
                         "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", port, NULL};
    pids[r] = spawn(argv, env);
  }
  EXPECT(wait_all(pids, 2, 300) == 0);
  const char* one[] = {"RANK", "0", "LOCAL_RANK", "0", "WORLD_SIZE", "1", "LOCAL_WORLD_SIZE", "1", NULL};
  char* argv1[] = {(char*)g_self, "rank", out1, "16", "20", NULL};
  pids[0] = spawn(argv1, one);
  EXPECT(wait_all(pids, 1, 300) == 0);
  char* argv0[] = {(char*)g_self, "rank", out0, "16", "0", NULL};
  pids[0] = spawn(argv0, one);
  EXPECT(wait_all(pids, 1, 300) == 0);
  double diff = max_abs_diff(out2, out1), moved = max_abs_diff(out1, out0);
  printf("NCCL DDP, 2 ranks x batch 8 vs 1 process x batch 16, 20 SGD steps: max |diff| = %.3g; "
         "parameters moved by up to %.3g\n",
         diff, moved);
  EXPECT(diff <= 1e-4);
  EXPECT(moved > 1e-3 && isfinite(moved));
  unlink(out2);
  unlink(out1);
  unlink(out0);
  rmdir(dir);
  return finish();
}

int main(int argc, char** argv) {
  static char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  g_self = n > 0 ? (self[n] = 0, self) : argv[0];
  if (argc == 3 && !strcmp(argv[1], "fallback")) return fallback(atoi(argv[2]));
  if (argc == 3 && !strcmp(argv[1], "broken")) return broken(argv[2]);
  if (argc == 2 && !strcmp(argv[1], "single")) return single();
  if (argc == 2 && !strcmp(argv[1], "nccl")) return nccl();
  if (argc == 2 && !strcmp(argv[1], "checkpoint_rng")) return checkpoint_rng();
  if (argc == 2 && !strcmp(argv[1], "precision")) return precision();
  if (argc == 5 && !strcmp(argv[1], "rank")) return rank_main(argv[2], atoi(argv[3]), atoi(argv[4]));
  if (argc == 2 && !strcmp(argv[1], "probe")) {
    acc_accelerator* acc;
    if (acc_accelerator_create("{}", &acc) != ACC_OK) return 3;
    int on_cuda = strncmp(device_of(acc), "cuda", 4) == 0;
    acc_accelerator_destroy(acc);
    return on_cuda ? 0 : 3;
  }
  fprintf(stderr, "usage: test_gpu fallback PLUGIN_BUILT | single | nccl | checkpoint_rng | precision\n");
  return 2;
}
