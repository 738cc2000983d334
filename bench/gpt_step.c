/* libacc side of bench/run.py: DDP training steps of a built-in GPT on synthetic tokens, timed per
 * phase after a warm-up. Prints one JSON line from the main process: tokens/s, milliseconds per step of
 * each phase (data, forward, backward with the gradient all-reduce, optimizer step + zero_grad), how much
 * of each phase the main thread spent blocked (asleep: waiting for a collective) and runnable without a
 * core, this process's peak RSS and the window of the timed steps on CLOCK_MONOTONIC (one clock for all
 * processes: run.py checks that independent runs overlapped, and cuts perf profiles to the timed steps). gpt_step.py takes the same
 * arguments, builds the same model and batches and measures the same way.
 *   acc launch --num_processes 2 gpt_step STEPS WARMUP BATCH SEQ VOCAB LAYERS HEADS EMBD */
#define _POSIX_C_SOURCE 200809L
#include <acc/acc.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "step.h"

enum { DATA, FORWARD, BACKWARD, OPTIMIZER, PHASES };
static const char* const phase_names[PHASES] = {"data", "forward", "backward", "optimizer"};

/* Where the main thread's time goes: wall clock, its own CPU time (CLOCK_THREAD_CPUTIME_ID, exact for a running
 * thread) and the time it waited runnable for a core (the run delay, /proc/thread-self/schedstat's second field).
 * What a phase's wall time has beyond the two, the thread slept: waiting for a collective (the all-reduce at the
 * end of DDP's backward, FSDP's all-gathers and reduce-scatters). Without schedstat (sched_fd < 0) the run delay
 * reads 0 and counts as blocked. */
typedef struct {
  double wall, cpu, runq;
} clocks;

static clocks read_clocks(int sched_fd) {
  clocks c = {now(), 0, 0};
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  c.cpu = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
  char buf[96];
  ssize_t got = sched_fd >= 0 ? pread(sched_fd, buf, sizeof buf - 1, 0) : -1;
  if (got > 0) {
    buf[got] = 0;
    unsigned long long on_cpu, delay;
    if (sscanf(buf, "%llu %llu", &on_cpu, &delay) == 2) c.runq = (double)delay * 1e-9;
  }
  return c;
}

/* BENCH_START_BARRIER=FILE:N (run.py's bound: processes without a process group, started together): each appends a
 * byte to FILE and waits until it holds N, so that all begin their timed steps at once. */
static void start_barrier(void) {
  const char* spec = getenv("BENCH_START_BARRIER");
  const char* colon = spec ? strrchr(spec, ':') : NULL;
  if (!colon) return;
  char path[4096];
  snprintf(path, sizeof path, "%.*s", (int)(colon - spec), spec);
  const long n = atol(colon + 1);
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, "x", 1) != 1) {
    fprintf(stderr, "BENCH_START_BARRIER: cannot append to %s\n", path);
    exit(1);
  }
  close(fd);
  const double give_up = now() + 600;
  struct stat st;
  while (stat(path, &st) == 0 && st.st_size < n) {
    if (now() > give_up) {
      fprintf(stderr, "BENCH_START_BARRIER: %s still has %lld of %ld processes after 600 s\n", path,
              (long long)st.st_size, n);
      exit(1);
    }
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

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
  const int sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  double phase[PHASES] = {0}, blocked[PHASES] = {0}, runq[PHASES] = {0}, t0 = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      CHECK(acc_wait_for_everyone(acc));
      start_barrier();
      t0 = now();
      for (int p = 0; p < PHASES; ++p) phase[p] = blocked[p] = runq[p] = 0;
    }
    clocks t[PHASES + 1];
    t[DATA] = read_clocks(sched_fd);
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
    t[FORWARD] = read_clocks(sched_fd);
    acc_tensor* loss;
    CHECK(acc_model_forward(model, tx, ty, NULL, &loss));
    if (record) CHECK(acc_tensor_item(loss, &losses[step]));
    t[BACKWARD] = read_clocks(sched_fd);
    CHECK(acc_backward(acc, loss));
    acc_tensor_destroy(loss);
    t[OPTIMIZER] = read_clocks(sched_fd);
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    t[PHASES] = read_clocks(sched_fd);
    for (int p = 0; p < PHASES; ++p) {
      const double wall = t[p + 1].wall - t[p].wall, delay = t[p + 1].runq - t[p].runq;
      phase[p] += wall;
      runq[p] += delay;
      blocked[p] += wall - (t[p + 1].cpu - t[p].cpu) - delay;
    }
  }
  CHECK(acc_wait_for_everyone(acc));
  const double end = now(), seconds = end - t0;
  if (sched_fd >= 0) close(sched_fd);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  if (rank == 0) {
    const char* threads = getenv("OMP_NUM_THREADS");
    printf("{\"impl\": \"libacc\", \"parameters\": %lld, \"threads\": \"%s\", \"tokens_per_s\": %.1f,"
           " \"step_ms\": %.4f, \"peak_rss_mb\": %.1f, \"phase_ms\": {",
           (long long)parameters, threads ? threads : "unset", (double)steps * n * world / seconds,
           1e3 * seconds / steps, ru.ru_maxrss / 1024.0);
    for (int p = 0; p < PHASES; ++p) printf("%s\"%s\": %.4f", p ? ", " : "", phase_names[p], 1e3 * phase[p] / steps);
    printf("}, \"blocked_ms\": {");
    for (int p = 0; p < PHASES; ++p)
      printf("%s\"%s\": %.4f", p ? ", " : "", phase_names[p], 1e3 * (blocked[p] > 0 ? blocked[p] : 0) / steps);
    printf("}, \"runq_ms\": {");
    for (int p = 0; p < PHASES; ++p) printf("%s\"%s\": %.4f", p ? ", " : "", phase_names[p], 1e3 * runq[p] / steps);
    printf("}, \"window\": [%.6f, %.6f]", t0, end);
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
