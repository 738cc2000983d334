/* DeepSpeed ZeRO-3's zero3_init_flag (tests/mp/zero3_init_test.py starts it with `acc launch` and a config file).
 * Usage:
 *   mp_zero3_init train MODEL STEPS OUT   MODEL: "config" (a Llama from acc_model_from_config) or a Hugging Face
 *                                         directory (acc_model_from_pretrained); STEPS AdamW steps over a shuffled
 *                                         loader; acc_save_model writes the weights to OUT. MP_LORA=JSON adds a LoRA
 *                                         adapter before prepare.
 *   mp_zero3_init memory CONFIG_JSON      a Llama from that config.json text, prepared with SGD and stepped once;
 *                                         prints "MEMORY rank=R model_bytes=B before=X prepared=Y stepped=Z": the
 *                                         parameters' bytes, VmRSS before the model is made, VmHWM (the peak resident
 *                                         memory) after prepare and after the step, in bytes.
 *   mp_zero3_init logits DIR OUT          acc_model_from_pretrained(DIR), prepared; the main process writes the float32
 *                                         logits of the fixtures' input_ids / attention_mask ([2, 7]) to OUT (raw).
 * MP_DEFERRED=1: the model is expected to wait for prepare (the flag is on): before prepare a forward and a state
 * read are refused naming zero3_init_flag. Prints "N passed, N failed"; exits non-zero on any failed check. */
#include <acc/acc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_common.h"

enum { SAMPLES = 64 };

static const char* const kLlama =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 37, "
    "\"hidden_size\": 16, \"intermediate_size\": 20, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
    "\"hidden_act\": \"silu\", \"initializer_range\": 0.02, \"tie_word_embeddings\": false}";

/* A field of /proc/self/status ("VmRSS:", "VmHWM:") in bytes. */
static long long status_bytes(const char* field) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, strlen(field))) kb = atoll(line + strlen(field));
  if (f) fclose(f);
  return kb * 1024;
}

static acc_accelerator* make_accelerator(void) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 11}", &acc));
  return acc;
}

/* Before prepare, a model whose parameters prepare makes refuses what needs them, naming the flag. */
static void check_waits(acc_model* model, acc_tensor* ids) {
  if (!getenv("MP_DEFERRED")) return;
  acc_tensor *out = NULL, *t = NULL;
  EXPECT_ERR(acc_model_forward(model, ids, NULL, &out, NULL), ACC_ERR_INVALID_STATE, "zero3_init_flag");
  EXPECT_ERR(acc_model_state_get(model, 0, NULL, &t), ACC_ERR_INVALID_STATE, "zero3_init_flag");
  int64_t n = 0;
  EXPECT_OK(acc_model_num_parameters(model, &n)); /* names and shapes are there */
  EXPECT(n > 0);
}

static acc_model* load(const char* what) {
  acc_model* model;
  if (!strcmp(what, "config")) CHECK(acc_model_from_config(kLlama, NULL, &model));
  else CHECK(acc_model_from_pretrained(what, NULL, &model));
  return model;
}

static int train(const char* what, int steps, const char* out) {
  acc_accelerator* acc = make_accelerator();
  struct loader data = token_loader(SAMPLES, "{\"batch_size\": 4, \"shuffle\": true}");
  acc_model* model = load(what);
  CHECK(acc_model_set_training(model, 1));
  if (getenv("MP_LORA")) CHECK(acc_model_add_lora(model, getenv("MP_LORA")));
  check_waits(model, data.x);
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, data.dl));
  for (int done = 0; done < steps;) done += train_step(acc, model, opt, data.dl);
  CHECK(acc_save_model(model, out, NULL));
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  loader_destroy(&data);
  acc_accelerator_destroy(acc);
  return finish();
}

static int memory(const char* config) {
  acc_accelerator* acc = make_accelerator();
  int64_t ids[2 * TOKENS_T];
  for (int i = 0; i < 2 * TOKENS_T; ++i) ids[i] = (i * 5 + 3) % TOKENS_VOCAB;
  int64_t shape[2] = {2, TOKENS_T};
  acc_tensor* x;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &x));
  const long long before = status_bytes("VmRSS:");
  acc_model* model;
  CHECK(acc_model_from_config(config, NULL, &model));
  CHECK(acc_model_set_training(model, 1));
  check_waits(model, x);
  int64_t n;
  CHECK(acc_model_num_parameters(model, &n));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.01}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  const long long prepared = status_bytes("VmHWM:");
  acc_tensor* loss;
  CHECK(acc_model_forward(model, x, x, NULL, &loss));
  CHECK(acc_backward(acc, loss));
  CHECK(acc_optimizer_step(opt));
  const long long stepped = status_bytes("VmHWM:");
  int32_t rank;
  CHECK(acc_process_index(acc, &rank));
  printf("MEMORY rank=%d model_bytes=%lld before=%lld prepared=%lld stepped=%lld\n", rank, (long long)n * 4, before,
         prepared, stepped);
  acc_tensor_destroy(loss);
  acc_tensor_destroy(x);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return finish();
}

static int logits(const char* dir, const char* out) {
  acc_accelerator* acc = make_accelerator();
  const int64_t ids[14] = {5, 17, 42, 8, 63, 29, 71, 12, 33, 7, 88, 50, 0, 0};
  const int64_t mask[14] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  int64_t shape[2] = {2, 7};
  acc_tensor *ti, *tm;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &ti));
  CHECK(acc_tensor_from_host(mask, sizeof mask, ACC_INT64, shape, 2, &tm));
  acc_model* model = load(dir);
  check_waits(model, ti);
  CHECK(acc_prepare(acc, model, NULL, NULL, NULL));
  acc_batch *in, *res;
  CHECK(acc_batch_create(&in));
  CHECK(acc_batch_set(in, "input_ids", ti));
  CHECK(acc_batch_set(in, "attention_mask", tm));
  int32_t was;
  CHECK(acc_set_grad_enabled(0, &was));
  CHECK(acc_model_forward_batch(model, in, &res));
  acc_tensor* l;
  CHECK(acc_batch_get(res, "logits", &l));
  int64_t n;
  CHECK(acc_tensor_numel(l, &n));
  float* v = malloc(sizeof(float) * (size_t)n);
  CHECK(acc_tensor_to_host(l, v, sizeof(float) * (size_t)n));
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  if (is_main) {
    FILE* f = fopen(out, "wb");
    EXPECT(f && fwrite(v, sizeof(float), (size_t)n, f) == (size_t)n);
    if (f) fclose(f);
  }
  free(v);
  acc_tensor_destroy(l);
  acc_batch_destroy(res);
  acc_batch_destroy(in);
  acc_tensor_destroy(ti);
  acc_tensor_destroy(tm);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return finish();
}

int main(int argc, char** argv) {
  if (argc == 5 && !strcmp(argv[1], "train")) return train(argv[2], atoi(argv[3]), argv[4]);
  if (argc == 3 && !strcmp(argv[1], "memory")) return memory(argv[2]);
  if (argc == 4 && !strcmp(argv[1], "logits")) return logits(argv[2], argv[3]);
  fprintf(stderr, "usage: mp_zero3_init train MODEL STEPS OUT | memory CONFIG_JSON | logits DIR OUT\n");
  return 2;
}
