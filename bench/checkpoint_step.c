/* libacc side of bench/checkpoint.py: one process builds the built-in MLP of LAYERS square WIDTH x WIDTH
 * linear layers (float32), an AdamW over it, prepares both, takes one optimizer step (so exp_avg and
 * exp_avg_sq exist), then times acc_save_state(DIR) and acc_load_state(DIR): a warm load (the checkpoint
 * still in the page cache from the save) and, when DROP is 1, a cold one after `sync` and dropping the page
 * cache (needs root). Prints one JSON line: parameters, checkpoint bytes and seconds per phase.
 * checkpoint_step.py takes the same arguments and does the same through Accelerate.
 *   checkpoint_step WIDTH LAYERS DIR DROP */
#define _XOPEN_SOURCE 700
#include <acc/acc.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "step.h"

/* Total size of the regular files directly in dir (a checkpoint is flat). */
static long long dir_bytes(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  long long total = 0;
  struct dirent* e;
  char path[4096];
  while ((e = readdir(d))) {
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
  }
  closedir(d);
  return total;
}

static void drop_caches(void) {
  sync();
  FILE* f = fopen("/proc/sys/vm/drop_caches", "w");
  if (!f || fputs("3\n", f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot drop the page cache (not root?)\n");
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s WIDTH LAYERS DIR DROP\n", argv[0]);
    return 2;
  }
  const int64_t width = atoll(argv[1]);
  const int layers = atoi(argv[2]);
  const char* dir = argv[3];
  const int drop = atoi(argv[4]);
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 0}", &acc));
  /* sizes: [WIDTH] * (LAYERS + 1): LAYERS linear layers WIDTH -> WIDTH. */
  size_t cap = 64 + (size_t)(layers + 1) * 24;
  char* spec = malloc(cap);
  if (!spec) return 1;
  size_t len =
      (size_t)snprintf(spec, cap, "{\"type\": \"mlp\", \"activation\": \"relu\", \"loss\": \"mse\", \"sizes\": [");
  for (int i = 0; i <= layers; ++i)
    len += (size_t)snprintf(spec + len, cap - len, "%s%lld", i ? ", " : "", (long long)width);
  snprintf(spec + len, cap - len, "]}");
  acc_model* model;
  CHECK(acc_model_create(spec, &model));
  free(spec);
  int64_t parameters;
  CHECK(acc_model_num_parameters(model, &parameters));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.001, \"weight_decay\": 0.01}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  /* One step on a batch of one: the moments exist and are not zero. */
  float* x = malloc((size_t)width * sizeof *x);
  if (!x) return 1;
  for (int64_t i = 0; i < width; ++i) x[i] = (float)((i * 37 % 101) - 50) / 50.0f;
  const int64_t shape[2] = {1, width};
  acc_tensor *tx, *ty, *loss;
  CHECK(acc_tensor_from_host(x, (size_t)width * sizeof *x, ACC_FLOAT32, shape, 2, &tx));
  CHECK(acc_tensor_from_host(x, (size_t)width * sizeof *x, ACC_FLOAT32, shape, 2, &ty));
  CHECK(acc_model_forward(model, tx, ty, NULL, &loss));
  CHECK(acc_backward(acc, loss));
  CHECK(acc_optimizer_step(opt));
  CHECK(acc_optimizer_zero_grad(opt));
  acc_tensor_destroy(loss);
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  free(x);

  double t = now();
  CHECK(acc_save_state(acc, dir));
  const double save = now() - t;
  sync(); /* libacc fsyncs every file already: this is the same flush the Accelerate side adds */
  const double save_sync = now() - t;
  const long long bytes = dir_bytes(dir);
  t = now();
  CHECK(acc_load_state(acc, dir));
  const double load_warm = now() - t;
  double load_cold = -1;
  if (drop) {
    drop_caches();
    t = now();
    CHECK(acc_load_state(acc, dir));
    load_cold = now() - t;
  }
  printf("{\"impl\": \"libacc\", \"parameters\": %lld, \"bytes\": %lld, \"save_s\": %.4f, \"save_sync_s\": %.4f, "
         "\"load_warm_s\": %.4f,"
         " \"load_cold_s\": %.4f}\n",
         (long long)parameters, bytes, save, save_sync, load_warm, load_cold);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
