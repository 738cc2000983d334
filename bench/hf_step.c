/* libacc side of bench/hf.py: one process times, on a Hugging Face model directory (a LlamaForCausalLM
 * saved by transformers' save_pretrained), through the C ABI only:
 *   - load: acc_model_from_pretrained(DIR), the first call of the process, then a warm one (the files in
 *     the page cache) and, when DROP is 1, a cold one after `sync` and dropping the page cache (root);
 *   - generate: greedy acc_generate of GEN_NEW tokens after a GEN_PROMPT-token prompt, batch 1, no stop
 *     token ("eos_token_id": []), WARMUP untimed calls then GEN_REPS timed ones;
 *   - forward: acc_model_forward of BATCH x SEQ tokens without targets in eval mode, WARMUP untimed steps
 *     then FWD_STEPS timed ones;
 *   - train: acc_prepare with AdamW (lr LR, PyTorch's other defaults), then per step acc_model_forward with
 *     the same tokens as labels, acc_backward, acc_optimizer_step, acc_optimizer_zero_grad: WARMUP untimed
 *     steps then TRAIN_STEPS timed ones.
 * Tokens: token i of a stream is mix(i) % VOCAB, the generation prompt from i = 1000000 on (hf_step.py draws
 * the same). Prints one JSON line: seconds, tokens/s, the first training loss and the generated tokens.
 *   hf_step DIR DROP VOCAB BATCH SEQ WARMUP FWD_STEPS TRAIN_STEPS GEN_PROMPT GEN_NEW GEN_REPS LR */
#define _XOPEN_SOURCE 700
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "step.h"

static acc_tensor* tokens(int64_t rows, int64_t cols, uint32_t first, int64_t vocab) {
  const int64_t n = rows * cols;
  int64_t* ids = malloc((size_t)n * sizeof *ids);
  if (!ids) exit(1);
  for (int64_t i = 0; i < n; ++i) ids[i] = (int64_t)(mix(first + (uint32_t)i) % (uint64_t)vocab);
  const int64_t shape[2] = {rows, cols};
  acc_tensor* t;
  CHECK(acc_tensor_from_host(ids, (size_t)n * sizeof *ids, ACC_INT64, shape, 2, &t));
  free(ids);
  return t;
}

static void drop_caches(void) {
  sync();
  FILE* f = fopen("/proc/sys/vm/drop_caches", "w");
  if (!f || fputs("3\n", f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot drop the page cache (not root?)\n");
    exit(1);
  }
}

static double load(const char* dir, acc_model** model) {
  if (*model) acc_model_destroy(*model);
  *model = NULL;
  const double t = now();
  CHECK(acc_model_from_pretrained(dir, NULL, model));
  return now() - t;
}

int main(int argc, char** argv) {
  if (argc != 13) {
    fprintf(stderr, "usage: %s DIR DROP VOCAB BATCH SEQ WARMUP FWD_STEPS TRAIN_STEPS GEN_PROMPT GEN_NEW GEN_REPS LR\n",
            argv[0]);
    return 2;
  }
  const char* dir = argv[1];
  const int drop = atoi(argv[2]);
  const int64_t vocab = atoll(argv[3]), batch = atoll(argv[4]), seq = atoll(argv[5]);
  const int warmup = atoi(argv[6]), fwd_steps = atoi(argv[7]), train_steps = atoi(argv[8]);
  const int64_t prompt_len = atoll(argv[9]), gen_new = atoll(argv[10]);
  const int gen_reps = atoi(argv[11]);
  const double lr = atof(argv[12]);

  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 0, \"cpu\": true}", &acc));

  /* Load: the first call of the process, a warm one, a cold one. */
  acc_model* model = NULL;
  const double load_first = load(dir, &model);
  const double load_warm = load(dir, &model);
  double load_cold = -1;
  if (drop) {
    drop_caches();
    load_cold = load(dir, &model);
  }
  int64_t parameters;
  CHECK(acc_model_num_parameters(model, &parameters));

  /* Generate: greedy, batch 1, exactly gen_new tokens (no stop token). */
  CHECK(acc_model_set_training(model, 0));
  acc_tensor* prompt = tokens(1, prompt_len, 1000000u, vocab);
  char gen_options[128];
  snprintf(gen_options, sizeof gen_options, "{\"max_new_tokens\": %lld, \"do_sample\": false, \"eos_token_id\": []}",
           (long long)gen_new);
  acc_tensor* generated = NULL;
  double gen_s = 0;
  for (int i = 0; i < warmup + gen_reps; ++i) {
    acc_tensor_destroy(generated);
    const double t = now();
    CHECK(acc_generate(model, prompt, NULL, gen_options, NULL, NULL, &generated));
    if (i >= warmup) gen_s += now() - t;
  }
  int64_t gen_shape[2];
  CHECK(acc_tensor_shape(generated, gen_shape, 2));
  int64_t* out_ids = malloc((size_t)(gen_shape[0] * gen_shape[1]) * sizeof *out_ids);
  if (!out_ids) return 1;
  CHECK(acc_tensor_to_host(generated, out_ids, (size_t)(gen_shape[0] * gen_shape[1]) * sizeof *out_ids));
  const int64_t new_tokens = gen_shape[1] - prompt_len;

  /* Forward: eval mode, no targets, no autograd graph (torch.no_grad: acc_set_grad_enabled 0). */
  acc_tensor* x = tokens(batch, seq, 0u, vocab);
  double fwd_s = 0;
  CHECK(acc_set_grad_enabled(0, NULL));
  for (int i = 0; i < warmup + fwd_steps; ++i) {
    acc_tensor* logits;
    const double t = now();
    CHECK(acc_model_forward(model, x, NULL, &logits, NULL));
    acc_tensor_destroy(logits);
    if (i >= warmup) fwd_s += now() - t;
  }
  CHECK(acc_set_grad_enabled(1, NULL));

  /* Train: forward with labels, backward, AdamW step, zero_grad. */
  char opt_options[96];
  snprintf(opt_options, sizeof opt_options, "{\"type\": \"adamw\", \"lr\": %.9g}", lr);
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, opt_options, &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  CHECK(acc_model_set_training(model, 1));
  double train_s = 0, first_loss = 0, last_loss = 0;
  for (int i = 0; i < warmup + train_steps; ++i) {
    acc_tensor* loss;
    const double t = now();
    CHECK(acc_model_forward(model, x, x, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    if (i >= warmup) train_s += now() - t;
    CHECK(acc_tensor_item(loss, i == 0 ? &first_loss : &last_loss));
    acc_tensor_destroy(loss);
  }

  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const double fwd_tokens = (double)(batch * seq) * fwd_steps, train_tokens = (double)(batch * seq) * train_steps;
  printf("{\"impl\": \"libacc\", \"parameters\": %lld, \"load_first_s\": %.4f, \"load_warm_s\": %.4f, \"load_cold_s\": "
         "%.4f,"
         " \"forward_s\": %.4f, \"forward_tokens_per_s\": %.2f, \"train_s\": %.4f, \"train_tokens_per_s\": %.2f,"
         " \"first_loss\": %.6f, \"last_loss\": %.6f, \"generate_s\": %.4f, \"generate_tokens_per_s\": %.2f,"
         " \"peak_rss_mb\": %.1f, \"generated\": [",
         (long long)parameters, load_first, load_warm, load_cold, fwd_s, fwd_tokens / fwd_s, train_s,
         train_tokens / train_s, first_loss, last_loss, gen_s, (double)(new_tokens * gen_reps) / gen_s,
         ru.ru_maxrss / 1024.0);
  for (int64_t i = prompt_len; i < gen_shape[1]; ++i)
    printf("%s%lld", i > prompt_len ? ", " : "", (long long)out_ids[i]);
  printf("]}\n");

  free(out_ids);
  acc_tensor_destroy(x);
  acc_tensor_destroy(generated);
  acc_tensor_destroy(prompt);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
