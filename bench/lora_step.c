/* libacc side of bench/lora.py: LoRA (or full) fine-tuning steps of a Hugging Face LlamaForCausalLM through the
 * C ABI only, one process per rank, started by `acc launch` (DDP with --cpu, FSDP with an Accelerate config
 * file). lora_step.py takes the same arguments and does the same through peft and Accelerate.
 *   - MODE lora: acc_model_from_pretrained(MODEL_DIR), then acc_model_load_adapter(ADAPTER_DIR,
 *     {"is_trainable": true}) (the initial adapter peft saved: both sides start from it), the base frozen;
 *   - MODE full: the same model without an adapter, every parameter trained (for the memory comparison);
 * then AdamW (lr LR, weight_decay 0.01, PyTorch's other defaults) over the trainable parameters, acc_prepare,
 * and per step: the rank's tokens (token i is mix(i) % VOCAB, i from rank * n on, n = BATCH x SEQ: each rank its
 * own batch, the same at every step, so that the loss falls; the labels are the tokens, shifted inside the
 * model), acc_model_forward, acc_backward, acc_optimizer_step, acc_optimizer_zero_grad. WARMUP untimed steps, then STEPS timed between barriers.
 * Every rank writes BENCH_OUT/rank<R>.json: its peak resident memory (VmHWM) at the end, after prepare and after
 * the first step, its resident memory (VmRSS) before the model is loaded, after the load and after prepare, its
 * milliseconds per phase, the tokens/s of all ranks (between the barriers) and its loss at every step.
 *   acc launch ... lora_step MODE MODEL_DIR ADAPTER_DIR VOCAB BATCH SEQ WARMUP STEPS LR */
#define _POSIX_C_SOURCE 200809L
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step.h"

enum { FORWARD, BACKWARD, OPTIMIZER, PHASES };
static const char* const phase_names[PHASES] = {"forward", "backward", "optimizer"};

int main(int argc, char** argv) {
  if (argc != 10) {
    fprintf(stderr, "usage: %s lora|full MODEL_DIR ADAPTER_DIR VOCAB BATCH SEQ WARMUP STEPS LR\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1], *model_dir = argv[2], *adapter_dir = argv[3];
  const int64_t vocab = atoll(argv[4]), batch = atoll(argv[5]), seq = atoll(argv[6]);
  const int warmup = atoi(argv[7]), steps = atoi(argv[8]);
  const double lr = atof(argv[9]);
  const int lora = strcmp(mode, "lora") == 0;
  if (!lora && strcmp(mode, "full") != 0) {
    fprintf(stderr, "MODE must be lora or full, not '%s'\n", mode);
    return 2;
  }
  const char* out_dir = getenv("BENCH_OUT");
  if (!out_dir) {
    fprintf(stderr, "BENCH_OUT (the directory for each rank's result) is not set\n");
    return 2;
  }
  const int64_t n = batch * seq;

  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 0}", &acc));
  int32_t rank, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  const double rss_before_mb = status_mb("VmRSS");

  acc_model* model;
  CHECK(acc_model_from_pretrained(model_dir, NULL, &model));
  int64_t base_parameters, parameters;
  CHECK(acc_model_num_parameters(model, &base_parameters));
  if (lora) CHECK(acc_model_load_adapter(model, adapter_dir, "{\"is_trainable\": true}"));
  CHECK(acc_model_num_parameters(model, &parameters));
  CHECK(acc_model_set_training(model, 1)); /* from_pretrained gives eval mode, as transformers */
  char opt_options[128];
  snprintf(opt_options, sizeof opt_options, "{\"type\": \"adamw\", \"lr\": %.9g, \"weight_decay\": 0.01}", lr);
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, opt_options, &opt));
  const double rss_loaded_mb = status_mb("VmRSS");
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  const double rss_prepared_mb = status_mb("VmRSS"), hwm_prepared_mb = status_mb("VmHWM");
  double hwm_first_step_mb = 0;

  double* losses = calloc((size_t)(warmup + steps) + 1, sizeof *losses);
  int64_t* x = malloc((size_t)n * sizeof *x);
  if (!losses || !x) return 1;
  const int64_t shape[2] = {batch, seq};
  acc_tensor* tx = NULL;
  double phase[PHASES] = {0}, t0 = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) {
      CHECK(acc_wait_for_everyone(acc));
      t0 = now();
      for (int p = 0; p < PHASES; ++p) phase[p] = 0;
    }
    acc_tensor_destroy(tx);
    const uint32_t base = (uint32_t)(rank * n);
    for (int64_t i = 0; i < n; ++i) x[i] = (int64_t)(mix(base + (uint32_t)i) % (uint64_t)vocab);
    CHECK(acc_tensor_from_host(x, (size_t)n * sizeof *x, ACC_INT64, shape, 2, &tx));
    double t[PHASES + 1];
    t[FORWARD] = now();
    acc_tensor* loss;
    CHECK(acc_model_forward(model, tx, tx, NULL, &loss));
    t[BACKWARD] = now();
    CHECK(acc_backward(acc, loss));
    t[OPTIMIZER] = now();
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    t[PHASES] = now();
    CHECK(acc_tensor_item(loss, &losses[step]));
    if (step == 0) hwm_first_step_mb = status_mb("VmHWM");
    acc_tensor_destroy(loss);
    for (int p = 0; p < PHASES; ++p) phase[p] += t[p + 1] - t[p];
  }
  CHECK(acc_wait_for_everyone(acc));
  const double seconds = now() - t0;

  char path[4096];
  snprintf(path, sizeof path, "%s/rank%d.json", out_dir, (int)rank);
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    return 1;
  }
  fprintf(f,
          "{\"impl\": \"libacc\", \"mode\": \"%s\", \"rank\": %d, \"world\": %d, \"base_parameters\": %lld,"
          " \"parameters\": %lld, \"tokens_per_s\": %.3f, \"step_ms\": %.3f, \"peak_rss_mb\": %.1f,"
          " \"rss_before_load_mb\": %.1f, \"rss_loaded_mb\": %.1f, \"rss_prepared_mb\": %.1f,"
          " \"peak_rss_prepared_mb\": %.1f, \"peak_rss_first_step_mb\": %.1f, \"phase_ms\": {",
          mode, (int)rank, (int)world, (long long)base_parameters, (long long)parameters,
          (double)steps * (double)n * world / seconds, 1e3 * seconds / steps, status_mb("VmHWM"), rss_before_mb,
          rss_loaded_mb, rss_prepared_mb, hwm_prepared_mb, hwm_first_step_mb);
  for (int p = 0; p < PHASES; ++p) fprintf(f, "%s\"%s\": %.3f", p ? ", " : "", phase_names[p], 1e3 * phase[p] / steps);
  fprintf(f, "}, \"losses\": [");
  for (int i = 0; i < warmup + steps; ++i) fprintf(f, "%s%.9g", i ? ", " : "", losses[i]);
  fprintf(f, "]}\n");
  if (fclose(f) != 0) {
    perror(path);
    return 1;
  }

  acc_tensor_destroy(tx);
  free(x);
  free(losses);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
