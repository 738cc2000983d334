/* acc-selftest: the program `acc test` launches in every process. It checks, in order, the steps a distributed
 * libacc run depends on, and records each one in $ACC_SELFTEST_DIR/rank<RANK> ("<step> begin", "<step> ok <detail>"
 * or "<step> fail <message>"), so that `acc test` can say exactly where a run breaks:
 *   rendezvous        acc_accelerator_create: the processes meet at MASTER_ADDR:MASTER_PORT (TCPStore, Gloo)
 *   first collective  an all-reduce of every rank's number, checked against the expected sum
 *   ddp step          a small model prepared for DDP, one forward/backward/optimizer step on rank-dependent data,
 *                     then the parameters compared across ranks (DDP keeps them equal)
 * $ACC_SELFTEST_TIMEOUT (seconds, default 60) bounds the rendezvous and every collective; $ACC_SELFTEST_STEPS
 * (default 1) training steps make the DDP step. */
#include <acc/acc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static FILE* status_file;
static const char* current = "start";

static void note(const char* step, const char* what, const char* fmt, ...) {
  char detail[1024] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
  }
  for (char* c = detail; *c; ++c)
    if (*c == '\n') *c = ' ';
  if (status_file) {
    fprintf(status_file, "%s %s%s%s\n", step, what, detail[0] ? " " : "", detail);
    fflush(status_file);
  }
}

static void begin(const char* step) {
  current = step;
  note(step, "begin", NULL);
}

/* A failed call: record it against the current step and leave. */
#define CHECK(call)                                                                                                 \
  do {                                                                                                              \
    acc_status s_ = (call);                                                                                         \
    if (s_ != ACC_OK) {                                                                                             \
      note(current, "fail", "%s: %s", acc_status_name(s_), acc_last_error_message());                               \
      fprintf(stderr, "acc-selftest: %s failed: %s: %s\n", current, acc_status_name(s_), acc_last_error_message()); \
      return 1;                                                                                                     \
    }                                                                                                               \
  } while (0)

static int fail(const char* fmt, double a, double b) {
  note(current, "fail", fmt, a, b);
  fprintf(stderr, "acc-selftest: %s failed: ", current);
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  return 1;
}

/* $ACC_SELFTEST_DIR/rank<RANK>, where the steps are recorded (none without $ACC_SELFTEST_DIR). */
static void open_status_file(void) {
  const char* dir = getenv("ACC_SELFTEST_DIR");
  const char* rank_env = getenv("RANK");
  if (dir && *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%s", dir, rank_env ? rank_env : "0");
    status_file = fopen(path, "w");
  }
}

/* acc_accelerator_create: the processes meet. 0, or 1 after the failure is recorded (as every step below). */
static int rendezvous(acc_accelerator** acc, int32_t* rank, int32_t* world) {
  const char* t = getenv("ACC_SELFTEST_TIMEOUT");
  double timeout = t && *t ? atof(t) : 60.0;
  if (!(timeout > 0)) timeout = 60.0;

  begin("rendezvous");
  /* $ACC_SELFTEST_PROJECT_DIR: the run's project directory (libacc writes its run record there). */
  const char* project = getenv("ACC_SELFTEST_PROJECT_DIR");
  char config[4096];
  snprintf(config, sizeof config, "{\"seed\": 1234, \"init_process_group_kwargs\": {\"timeout\": %g}%s%s%s}", timeout,
           project && *project ? ", \"project_dir\": \"" : "", project && *project ? project : "",
           project && *project ? "\"" : "");
  CHECK(acc_accelerator_create(config, acc));
  const char* device = "?";
  const char* dtype = "?";
  CHECK(acc_process_index(*acc, rank));
  CHECK(acc_num_processes(*acc, world));
  CHECK(acc_device(*acc, &device));
  CHECK(acc_distributed_type(*acc, &dtype));
  note("rendezvous", "ok", "rank %d of %d on %s (%s)", *rank, *world, device, dtype);
  return 0;
}

/* An all-reduce of every rank's number (rank + 1), checked against the expected sum. */
static int first_collective(acc_accelerator* acc, int32_t rank, int32_t world) {
  begin("first collective");
  float mine = (float)(rank + 1);
  int64_t one = 1;
  acc_tensor *x = NULL, *sum = NULL;
  CHECK(acc_tensor_from_host(&mine, sizeof mine, ACC_FLOAT32, &one, 1, &x));
  CHECK(acc_reduce(acc, x, ACC_REDUCE_SUM, &sum));
  double got = 0;
  CHECK(acc_tensor_item(sum, &got));
  double want = (double)world * (world + 1) / 2.0;
  if (fabs(got - want) > 1e-6) return fail("all-reduce sum is %g, expected %g", got, want);
  acc_tensor_destroy(x);
  acc_tensor_destroy(sum);
  note("first collective", "ok", "all-reduce sum %g", got);
  return 0;
}

/* `steps` forward/backward/optimizer steps; *loss is the last step's loss tensor. */
static int train(acc_accelerator* acc, acc_model* model, acc_optimizer* opt, acc_tensor* input, acc_tensor* targets,
                 int steps, acc_tensor** loss, double* first_loss, double* loss_value) {
  for (int step = 0; step < steps; ++step) {
    CHECK(acc_model_forward(model, input, targets, NULL, loss));
    CHECK(acc_tensor_item(*loss, loss_value));
    if (step == 0) *first_loss = *loss_value;
    CHECK(acc_backward(acc, *loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    if (step + 1 < steps) {
      acc_tensor_destroy(*loss);
      *loss = NULL;
    }
  }
  return 0;
}

/* A checksum of every parameter: equal on every rank when DDP averaged the gradients. */
static int parameter_checksum(acc_model* model, double* checksum) {
  int64_t n = 0;
  CHECK(acc_model_state_size(model, &n));
  *checksum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const char* name = NULL;
    acc_tensor* v = NULL;
    CHECK(acc_model_state_get(model, i, &name, &v));
    int64_t numel = 0;
    CHECK(acc_tensor_numel(v, &numel));
    float* host = malloc((size_t)numel * sizeof(float));
    CHECK(acc_tensor_to_host(v, host, (size_t)numel * sizeof(float)));
    for (int64_t k = 0; k < numel; ++k) *checksum += host[k] * (double)(k % 13 + 1) * (double)(i + 1);
    free(host);
    acc_tensor_destroy(v);
  }
  return 0;
}

/* The checksum's spread across ranks (max - min, from one max-reduce of checksum and -checksum): 0 when equal. */
static int equal_on_all_ranks(acc_accelerator* acc, double checksum) {
  float c32[2] = {(float)checksum, (float)-checksum};
  int64_t two = 2;
  acc_tensor *c = NULL, *cmax = NULL;
  CHECK(acc_tensor_from_host(c32, sizeof c32, ACC_FLOAT32, &two, 1, &c));
  CHECK(acc_reduce(acc, c, ACC_REDUCE_MAX, &cmax));
  float back[2];
  CHECK(acc_tensor_to_host(cmax, back, sizeof back));
  double spread = (double)back[0] + (double)back[1]; /* max - min */
  if (fabs(spread) > 1e-4 * (1 + fabs(checksum)))
    return fail("parameters differ across ranks after one step (checksum spread %g, this rank %g)", spread, checksum);
  acc_tensor_destroy(c);
  acc_tensor_destroy(cmax);
  return 0;
}

/* A small model prepared for DDP, trained on rank-dependent data, then its parameters compared across ranks. */
static int ddp_step(acc_accelerator* acc, int32_t rank, int32_t world, acc_model** model, acc_optimizer** opt) {
  begin("ddp step");
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 8, 1], \"activation\": \"tanh\"}", model));
  CHECK(acc_optimizer_create(*model, "{\"type\": \"sgd\", \"lr\": 0.1}", opt));
  CHECK(acc_prepare(acc, *model, *opt, NULL, NULL));
  float in[8 * 4], target[8];
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) in[i * 4 + j] = (float)((rank + 1) * (i + 1) * (j + 2) % 7) / 7.0f;
    target[i] = (float)(rank + i) / 8.0f;
  }
  int64_t in_shape[2] = {8, 4}, tg_shape[2] = {8, 1};
  acc_tensor *input = NULL, *targets = NULL, *loss = NULL;
  CHECK(acc_tensor_from_host(in, sizeof in, ACC_FLOAT32, in_shape, 2, &input));
  CHECK(acc_tensor_from_host(target, sizeof target, ACC_FLOAT32, tg_shape, 2, &targets));
  const char* steps_env = getenv("ACC_SELFTEST_STEPS");
  int steps = steps_env && atoi(steps_env) > 0 ? atoi(steps_env) : 1;
  double loss_value = 0, first_loss = 0;
  if (train(acc, *model, *opt, input, targets, steps, &loss, &first_loss, &loss_value)) return 1;
  double checksum = 0;
  if (parameter_checksum(*model, &checksum)) return 1;
  if (equal_on_all_ranks(acc, checksum)) return 1;
  acc_tensor_destroy(input);
  acc_tensor_destroy(targets);
  acc_tensor_destroy(loss);
  if (steps > 1)
    note("ddp step", "ok", "%d steps, loss %.4f -> %.4f, parameters equal on all %d ranks", steps, first_loss,
         loss_value, world);
  else note("ddp step", "ok", "loss %.4f, parameters equal on all %d ranks", loss_value, world);
  return 0;
}

int main(void) {
  open_status_file();
  acc_accelerator* acc = NULL;
  int32_t rank = 0, world = 1;
  if (rendezvous(&acc, &rank, &world)) return 1;
  if (first_collective(acc, rank, world)) return 1;
  acc_model* model = NULL;
  acc_optimizer* opt = NULL;
  if (ddp_step(acc, rank, world, &model, &opt)) return 1;

  begin("shutdown");
  CHECK(acc_wait_for_everyone(acc));
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  note("shutdown", "ok", NULL);
  if (status_file) fclose(status_file);
  if (rank == 0) printf("acc-selftest: all steps passed on %d process(es)\n", world);
  return 0;
}
