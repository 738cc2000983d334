/* libacc side of bench/offload.py: one process, through the C ABI only, on a Hugging Face model directory (a
 * LlamaForCausalLM saved by transformers' save_pretrained):
 *   - plan: the model built empty from DIR/config.json (acc_model_from_config with "device": "meta") and
 *     acc_infer_auto_device_map with {"device_map": "sequential", "max_memory": {"cpu": BUDGET}}: the map the
 *     disk configuration loads onto (this also starts the runtime before any measurement); MODE "plan" prints
 *     it and stops there;
 *   - load: acc_model_from_pretrained(DIR), MODE "memory" with no options (every weight in memory), MODE "disk"
 *     with the same device map options (the layers beyond the budget stay in the mapped safetensors file);
 *   - generate: greedy acc_generate of GEN_NEW tokens after a GEN_PROMPT-token prompt, batch 1, no stop token
 *     ("eos_token_id": []), WARMUP untimed calls then GEN_REPS timed ones.
 * Peak memory: after the plan, the peak resident set is reset (writing "5" to /proc/self/clear_refs) and the
 * resident set read (VmRSS of /proc/self/status); after the load and all the generate calls VmHWM is read
 * again: peak_rss_mb is VmHWM minus that VmRSS (load_peak_rss_mb: the same just after the load).
 * Tokens: token i of a stream is mix(i) % VOCAB, the prompt from i = 1000000 on (offload_step.py draws the
 * same). Prints one JSON line: seconds, tokens/s, MB, the planned map and the generated tokens.
 *   offload_step DIR memory|disk|plan BUDGET VOCAB GEN_PROMPT GEN_NEW WARMUP GEN_REPS */
#define _XOPEN_SOURCE 700
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "step.h"

/* A field of /proc/self/status ("VmRSS:", "VmHWM:"), bytes. */
static long long status_bytes(const char* field) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long long kb = -1;
  const size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n)) kb = atoll(line + n);
  if (f) fclose(f);
  return kb * 1024;
}

/* VmHWM := VmRSS. */
static void reset_peak(void) {
  FILE* f = fopen("/proc/self/clear_refs", "w");
  if (!f || fputs("5", f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot reset the peak resident set through /proc/self/clear_refs\n");
    exit(1);
  }
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = malloc((size_t)n + 1);
  if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) exit(1);
  text[n] = '\0';
  fclose(f);
  return text;
}

int main(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr, "usage: %s DIR memory|disk|plan BUDGET VOCAB GEN_PROMPT GEN_NEW WARMUP GEN_REPS\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1], *mode = argv[2], *budget = argv[3];
  const int disk = !strcmp(mode, "disk");
  if (!disk && strcmp(mode, "memory") && strcmp(mode, "plan")) {
    fprintf(stderr, "MODE is memory, disk or plan, not %s\n", mode);
    return 2;
  }
  const int64_t vocab = atoll(argv[4]), prompt_len = atoll(argv[5]), gen_new = atoll(argv[6]);
  const int warmup = atoi(argv[7]), gen_reps = atoi(argv[8]);

  /* The plan, on the model built empty. */
  char options[256];
  snprintf(options, sizeof options, "{\"device_map\": \"sequential\", \"max_memory\": {\"cpu\": \"%s\"}}", budget);
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char* config = read_file(path);
  acc_model* empty = NULL;
  CHECK(acc_model_from_config(config, "{\"device\": \"meta\"}", &empty));
  free(config);
  const char* planned = NULL;
  CHECK(acc_infer_auto_device_map(empty, options, &planned));
  char* map = malloc(strlen(planned) + 1);
  if (!map) return 1;
  strcpy(map, planned);
  acc_model_destroy(empty);
  if (!strcmp(mode, "plan")) {
    printf("{\"impl\": \"libacc\", \"mode\": \"plan\", \"planned_map\": %s}\n", map);
    free(map);
    return 0;
  }

  int64_t* prompt_ids = malloc((size_t)prompt_len * sizeof *prompt_ids);
  if (!prompt_ids) return 1;
  for (int64_t i = 0; i < prompt_len; ++i) prompt_ids[i] = (int64_t)(mix(1000000u + (uint32_t)i) % (uint64_t)vocab);
  const int64_t shape[2] = {1, prompt_len};
  acc_tensor* prompt;
  CHECK(acc_tensor_from_host(prompt_ids, (size_t)prompt_len * sizeof *prompt_ids, ACC_INT64, shape, 2, &prompt));
  char gen_options[128];
  snprintf(gen_options, sizeof gen_options, "{\"max_new_tokens\": %lld, \"do_sample\": false, \"eos_token_id\": []}",
           (long long)gen_new);

  /* Load, then generate; the peak resident set above the one before the load. */
  reset_peak();
  const long long base = status_bytes("VmRSS:");
  acc_model* model = NULL;
  double t = now();
  CHECK(acc_model_from_pretrained(dir, disk ? options : NULL, &model));
  const double load_s = now() - t;
  const long long load_peak = status_bytes("VmHWM:") - base;
  int64_t parameters;
  CHECK(acc_model_num_parameters(model, &parameters));

  acc_tensor* generated = NULL;
  double gen_s = 0, first_gen_s = 0;
  for (int i = 0; i < warmup + gen_reps; ++i) {
    acc_tensor_destroy(generated);
    t = now();
    CHECK(acc_generate(model, prompt, NULL, gen_options, NULL, NULL, &generated));
    const double s = now() - t;
    if (i == 0) first_gen_s = s;
    if (i >= warmup) gen_s += s;
  }
  const long long peak = status_bytes("VmHWM:") - base;
  const long long rss_after = status_bytes("VmRSS:") - base;

  int64_t gen_shape[2];
  CHECK(acc_tensor_shape(generated, gen_shape, 2));
  int64_t* out_ids = malloc((size_t)(gen_shape[0] * gen_shape[1]) * sizeof *out_ids);
  if (!out_ids) return 1;
  CHECK(acc_tensor_to_host(generated, out_ids, (size_t)(gen_shape[0] * gen_shape[1]) * sizeof *out_ids));
  const int64_t new_tokens = gen_shape[1] - prompt_len;

  printf("{\"impl\": \"libacc\", \"mode\": \"%s\", \"parameters\": %lld, \"load_s\": %.4f, \"first_generate_s\": %.4f,"
         " \"generate_s\": %.4f, \"generate_tokens_per_s\": %.3f, \"base_rss_mb\": %.1f, \"load_peak_rss_mb\": %.1f,"
         " \"peak_rss_mb\": %.1f, \"rss_after_mb\": %.1f, \"device_map\": %s, \"generated\": [",
         mode, (long long)parameters, load_s, first_gen_s, gen_s, (double)(new_tokens * gen_reps) / gen_s, base / 1e6,
         load_peak / 1e6, peak / 1e6, rss_after / 1e6, disk ? map : "{\"\": \"cpu\"}");
  for (int64_t i = prompt_len; i < gen_shape[1]; ++i)
    printf("%s%lld", i > prompt_len ? ", " : "", (long long)out_ids[i]);
  printf("], \"planned_map\": %s}\n", map);

  free(out_ids);
  free(prompt_ids);
  free(map);
  acc_tensor_destroy(generated);
  acc_tensor_destroy(prompt);
  acc_model_destroy(model);
  return 0;
}
