/* LoRA adapters through the C ABI (docs/c-api.md, "Adapters"): peft's adapter loaded onto a Hugging Face model,
 * the state's names following the tree, saved (a file of the caller's kept), merged, and bad input named with the
 * model unchanged. tests/cpp/test_lora checks the numbers against peft's own outputs.
 *   test_adapter SOURCE_ROOT */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define T 7
#define V 96

static void logits_of(acc_model* m, acc_tensor* ids, float* out) {
  acc_tensor* logits;
  CHECK(acc_model_forward(m, ids, NULL, &logits, NULL));
  CHECK(acc_tensor_to_host(logits, out, sizeof(float) * T * V));
  acc_tensor_destroy(logits);
}

static float max_diff(const float* a, const float* b) {
  float d = 0;
  for (int i = 0; i < T * V; ++i) d = fmaxf(d, fabsf(a[i] - b[i]));
  return d;
}

static int has_name(const acc_model* m, const char* want) {
  int64_t n;
  CHECK(acc_model_state_size(m, &n));
  for (int64_t i = 0; i < n; ++i) {
    const char* name;
    CHECK(acc_model_state_get(m, i, &name, NULL));
    if (strcmp(name, want) == 0) return 1;
  }
  return 0;
}

static int exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static void write_text(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  EXPECT(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static double seconds_since(const struct timespec* t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

/* Regular expressions from a file or a call run on RE2 (issue 36): a pattern that made std::regex backtrack for
 * minutes on names this long ends at once, 30,000 nested groups (a stack overflow in std::regex's compiler) are
 * refused naming the limit, and what RE2 cannot express (a backreference) is named. Nothing changes. */
static void test_patterns(acc_model* m) {
  char pdir[256], path[300];
  snprintf(pdir, sizeof pdir, "/tmp/acc_test_adapter_pattern_%d", (int)getpid());
  snprintf(path, sizeof path, "%s/adapter_config.json", pdir);
  EXPECT(mkdir(pdir, 0755) == 0);
  acc_optimizer* opt = NULL;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  write_text(path, "{\"peft_type\": \"LORA\", \"r\": 4, \"target_modules\": \"(.|.)*x\"}");
  EXPECT_ERR(acc_model_load_adapter(m, pdir, NULL), ACC_ERR_INVALID_ARGUMENT, "'(.|.)*x' matched no linear layer");
  EXPECT_ERR(acc_model_set_requires_grad(m, "(.|.)*x", 0, NULL), ACC_ERR_INVALID_ARGUMENT, "matches no parameter");
  EXPECT_ERR(acc_optimizer_create(m, "{\"type\": \"sgd\", \"param_groups\": [{\"params\": \"(.|.)*x\"}]}", &opt),
             ACC_ERR_INVALID_CONFIG, "param_groups[0] selects no trainable parameter");
  EXPECT(seconds_since(&t0) < 1.0);

  enum { kDepth = 30000 };
  char* nested = malloc(2 * kDepth + 8);
  char* text = malloc(2 * kDepth + 128);
  if (!nested || !text) abort();
  memset(nested, '(', kDepth);
  memcpy(nested + kDepth, "q_proj", 6);
  memset(nested + kDepth + 6, ')', kDepth);
  nested[2 * kDepth + 6] = '\0';
  snprintf(text, 2 * kDepth + 128, "{\"peft_type\": \"LORA\", \"r\": 4, \"target_modules\": \"%s\"}", nested);
  write_text(path, text);
  /* The file's string limit refuses it as it is read, naming the key (issue 36: the limits of a config file). */
  EXPECT_ERR(acc_model_load_adapter(m, pdir, NULL), ACC_ERR_INVALID_ARGUMENT,
             "string longer than 4096 bytes (the limit) in 'target_modules'");
  EXPECT(strlen(acc_last_error_message()) < 400); /* the value is not shown */
  EXPECT_ERR(acc_model_set_requires_grad(m, nested, 0, NULL), ACC_ERR_INVALID_ARGUMENT, "longer than 4096 bytes");
  snprintf(text, 2 * kDepth + 128, "{\"type\": \"sgd\", \"param_groups\": [{\"params\": \"%s\"}]}", nested);
  EXPECT_ERR(acc_optimizer_create(m, text, &opt), ACC_ERR_INVALID_CONFIG, "longer than 4096 bytes");
  free(text);
  free(nested);
  EXPECT_ERR(acc_model_set_requires_grad(m, ".*(q)\\1_proj.*", 0, NULL), ACC_ERR_INVALID_ARGUMENT,
             "'.*(q)\\1_proj.*' is not a regular expression libacc reads (invalid escape sequence: \\1)");
  int64_t frozen = 0;
  EXPECT_OK(acc_model_set_requires_grad(m, ".*\\.(q_proj|v_proj)\\.weight", 1, &frozen)); /* peft's documented form */
  EXPECT(frozen == 4);
  unlink(path);
  rmdir(pdir);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_adapter SOURCE_ROOT\n");
    return 2;
  }
  char llama[1024], adapter[1024], dir[1100], file[1200];
  snprintf(llama, sizeof llama, "%s/tests/hf/fixtures/llama/model", argv[1]);
  snprintf(adapter, sizeof adapter, "%s/tests/finetune/fixtures/llama_qv", argv[1]);
  snprintf(dir, sizeof dir, "/tmp/acc_test_adapter_%d", (int)getpid());
  acc_model* m;
  CHECK(acc_model_from_pretrained(llama, "{\"dtype\": \"float32\"}", &m));
  const int64_t v[T] = {5, 17, 42, 8, 63, 29, 71};
  const int64_t shape[2] = {1, T};
  acc_tensor* ids;
  CHECK(acc_tensor_from_host(v, sizeof v, ACC_INT64, shape, 2, &ids));
  static float base[T * V], adapted[T * V], merged[T * V], now[T * V];
  logits_of(m, ids, base);
  int64_t n_base, n;
  CHECK(acc_model_state_size(m, &n_base));

  /* Bad input: named, nothing changed. */
  EXPECT_ERR(acc_model_add_lora(NULL, "{}"), ACC_ERR_INVALID_ARGUMENT, "model is NULL");
  EXPECT_ERR(acc_model_add_lora(m, NULL), ACC_ERR_INVALID_ARGUMENT, "lora_config_json is NULL");
  EXPECT_ERR(acc_model_add_lora(m, "{\"r\": 0, \"target_modules\": [\"q_proj\"]}"), ACC_ERR_INVALID_ARGUMENT,
             "r must be a positive integer");
  EXPECT_ERR(acc_model_add_lora(m, "{\"target_modules\": [\"nope\"]}"), ACC_ERR_INVALID_ARGUMENT,
             "model.layers.1.mlp.down_proj");
  EXPECT_ERR(acc_model_add_lora(m, "{\"target_modules\": [\"q_proj\"], \"rank\": 4}"), ACC_ERR_INVALID_ARGUMENT,
             "unknown LoraConfig field 'rank'");
  EXPECT_ERR(acc_model_add_lora(m, "{\"target_modules\": [\"q_proj\"], \"use_dora\": true}"), ACC_ERR_UNSUPPORTED,
             "use_dora");
  EXPECT_ERR(acc_model_load_adapter(m, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "dir is NULL");
  EXPECT_ERR(acc_model_load_adapter(m, "/no/such/adapter", NULL), ACC_ERR_IO, "adapter_config.json");
  EXPECT_ERR(acc_model_load_adapter(m, adapter, "{\"trainable\": true}"), ACC_ERR_INVALID_ARGUMENT, "trainable");
  EXPECT_ERR(acc_model_save_adapter(m, dir), ACC_ERR_INVALID_STATE, "no adapter");
  EXPECT(!exists(dir));
  EXPECT_ERR(acc_model_merge_adapter(m), ACC_ERR_INVALID_STATE, "no adapter");
  CHECK(acc_model_state_size(m, &n));
  EXPECT(n == n_base);
  logits_of(m, ids, now);
  EXPECT(max_diff(now, base) == 0);

  test_patterns(m);
  CHECK(acc_model_state_size(m, &n));
  EXPECT(n == n_base);

  /* peft's adapter: its tensors join the state under peft's names less "base_model.model.". */
  EXPECT_OK(acc_model_load_adapter(m, adapter, NULL));
  CHECK(acc_model_state_size(m, &n));
  EXPECT(n == n_base + 8);
  EXPECT(has_name(m, "model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT(has_name(m, "model.layers.1.self_attn.v_proj.lora_B.weight"));
  logits_of(m, ids, adapted);
  EXPECT(max_diff(adapted, base) > 1e-2f);
  EXPECT_ERR(acc_model_add_lora(m, "{\"target_modules\": [\"k_proj\"]}"), ACC_ERR_INVALID_STATE, "adapter already");

  /* Saved beside a file of the caller's, which stays. */
  EXPECT(mkdir(dir, 0755) == 0);
  snprintf(file, sizeof file, "%s/notes.txt", dir);
  FILE* f = fopen(file, "w");
  EXPECT(f != NULL);
  if (f) fclose(f);
  EXPECT_OK(acc_model_save_adapter(m, dir));
  EXPECT(exists(file));
  snprintf(file, sizeof file, "%s/adapter_config.json", dir);
  EXPECT(exists(file));
  snprintf(file, sizeof file, "%s/adapter_model.safetensors", dir);
  EXPECT(exists(file));

  /* Merged: a plain model again, with the adapter's logits. */
  EXPECT_OK(acc_model_merge_adapter(m));
  CHECK(acc_model_state_size(m, &n));
  EXPECT(n == n_base);
  EXPECT(!has_name(m, "model.layers.0.self_attn.q_proj.lora_A.weight"));
  logits_of(m, ids, merged);
  EXPECT(max_diff(merged, adapted) < 1e-5f);

  /* What was saved loads onto a fresh base with the same logits. */
  acc_model* again;
  CHECK(acc_model_from_pretrained(llama, "{\"dtype\": \"float32\"}", &again));
  EXPECT_OK(acc_model_load_adapter(again, dir, "{\"is_trainable\": true}"));
  logits_of(again, ids, now);
  EXPECT(max_diff(now, adapted) == 0);

  /* Prepared: adding, loading and merging are call-order errors; saving works (the main process writes). */
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(NULL, &acc));
  CHECK(acc_prepare(acc, again, NULL, NULL, NULL));
  EXPECT_ERR(acc_model_merge_adapter(again), ACC_ERR_INVALID_STATE, "prepared");
  EXPECT_OK(acc_model_save_adapter(again, dir));
  acc_model* plain;
  CHECK(acc_model_from_pretrained(llama, "{\"dtype\": \"float32\"}", &plain));
  CHECK(acc_prepare(acc, plain, NULL, NULL, NULL));
  EXPECT_ERR(acc_model_add_lora(plain, "{\"target_modules\": [\"q_proj\"]}"), ACC_ERR_INVALID_STATE, "prepared");
  EXPECT_ERR(acc_model_load_adapter(plain, dir, NULL), ACC_ERR_INVALID_STATE, "prepared");

  unlink(file);
  snprintf(file, sizeof file, "%s/adapter_config.json", dir);
  unlink(file);
  snprintf(file, sizeof file, "%s/notes.txt", dir);
  unlink(file);
  rmdir(dir);
  acc_model_destroy(plain);
  acc_model_destroy(again);
  acc_accelerator_destroy(acc);
  acc_tensor_destroy(ids);
  acc_model_destroy(m);
  return finish();
}
