/* Hugging Face models through the C ABI (docs/hf-models.md): acc_model_from_pretrained on the fixtures
 * transformers made (tests/hf), a fine-tuning step through the named forward, acc_generate (greedy agrees
 * with the forward's argmax, the callback streams and stops, seeds repeat), and bad input named.
 * tests/cpp/test_hf checks the numbers against transformers' own outputs.
 *   test_hf FIXTURES_DIR */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static acc_tensor* ids(const int64_t* v, int64_t rows, int64_t cols) {
  acc_tensor* t;
  const int64_t shape[2] = {rows, cols};
  CHECK(acc_tensor_from_host(v, (size_t)(rows * cols) * sizeof(int64_t), ACC_INT64, shape, 2, &t));
  return t;
}

/* Removes a directory of plain files. */
static void remove_tree(const char* path) {
  DIR* d = opendir(path);
  if (!d) return;
  char file[1200];
  for (struct dirent* e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(file, sizeof file, "%s/%s", path, e->d_name);
      EXPECT(unlink(file) == 0);
    }
  closedir(d);
  EXPECT(rmdir(path) == 0);
}

typedef struct {
  int calls, stop_after;
  int64_t last[2];
} Stream;

static int32_t on_tokens(void* user, const int64_t* tokens, int64_t batch) {
  Stream* s = user;
  ++s->calls;
  for (int64_t i = 0; i < batch && i < 2; ++i) s->last[i] = tokens[i];
  return s->stop_after > 0 && s->calls >= s->stop_after;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_hf FIXTURES_DIR\n");
    return 2;
  }
  char llama[1024], missing[1024];
  snprintf(llama, sizeof llama, "%s/llama/model", argv[1]);
  snprintf(missing, sizeof missing, "%s/no-such-model", argv[1]);
  acc_model* m = NULL;
  EXPECT_ERR(acc_model_from_pretrained(NULL, NULL, &m), ACC_ERR_INVALID_ARGUMENT, "dir is NULL");
  EXPECT_ERR(acc_model_from_pretrained(llama, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "out is NULL");
  EXPECT_ERR(acc_model_from_pretrained(missing, NULL, &m), ACC_ERR_IO, "no-such-model");
  EXPECT_ERR(acc_model_from_pretrained(llama, "{\"dtype\": \"int4\"}", &m), ACC_ERR_INVALID_CONFIG, "dtype");
  EXPECT_ERR(acc_model_from_pretrained(llama, "{\"low_cpu_mem_usage\": true}", &m), ACC_ERR_INVALID_CONFIG,
             "low_cpu_mem_usage");
  EXPECT(m == NULL);
  EXPECT_ERR(acc_model_from_pretrained(llama, "{\"device_map\": \"auto\", \"max_memory\": {\"0\": \"1GB\"}}", &m),
             ACC_ERR_UNSUPPORTED, "accelerator 0");
  EXPECT(m == NULL);
  /* Weights converted on their way to the disk need an offload folder, which must be writable; in bfloat16 with
   * a folder, the dispatched model generates. */
  const char* disk_bf16 =
      "{\"device_map\": \"sequential\", \"max_memory\": {\"cpu\": \"30KB\"}, \"dtype\": \"bfloat16\"";
  char opts[512];
  snprintf(opts, sizeof opts, "%s}", disk_bf16);
  EXPECT_ERR(acc_model_from_pretrained(llama, opts, &m), ACC_ERR_INVALID_ARGUMENT, "offload_folder");
  snprintf(opts, sizeof opts, "%s, \"offload_folder\": \"/proc/acc-offload\"}", disk_bf16);
  EXPECT_ERR(acc_model_from_pretrained(llama, opts, &m), ACC_ERR_IO, "/proc/acc-offload");
  EXPECT(m == NULL);
  char folder[] = "/tmp/acc_offload_folder_XXXXXX";
  EXPECT(mkdtemp(folder) != NULL);
  snprintf(opts, sizeof opts, "%s, \"offload_folder\": \"%s\"}", disk_bf16, folder);
  /* A stale folder (every file an earlier run left replaced by garbage) is written again: the same tokens. */
  int64_t tokens[2][6];
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      DIR* d = opendir(folder);
      int stale = 0;
      for (struct dirent* e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char file[600];
        snprintf(file, sizeof file, "%s/%s", folder, e->d_name);
        FILE* f = fopen(file, "w");
        if (!f) continue;
        stale += fputs("stale: from another model", f) >= 0;
        fclose(f);
      }
      if (d) closedir(d);
      EXPECT(stale > 0);
    }
    EXPECT_OK(acc_model_from_pretrained(llama, opts, &m));
    if (!m) break;
    const int64_t p3[3] = {3, 17, 42}, s3[2] = {1, 3};
    acc_tensor *px, *pout;
    CHECK(acc_tensor_from_host(p3, sizeof p3, ACC_INT64, s3, 2, &px));
    EXPECT_OK(acc_generate(m, px, NULL, "{\"max_new_tokens\": 3, \"eos_token_id\": []}", NULL, NULL, &pout));
    EXPECT_OK(acc_tensor_to_host(pout, tokens[round], sizeof tokens[round]));
    acc_tensor_destroy(pout);
    acc_tensor_destroy(px);
    acc_model_destroy(m);
    m = NULL;
  }
  EXPECT(memcmp(tokens[0], tokens[1], sizeof tokens[0]) == 0);
  remove_tree(folder);

  EXPECT_OK(acc_model_from_pretrained(llama, NULL, &m));
  if (!m) return finish();
  int64_t n = 0;
  EXPECT_OK(acc_model_num_parameters(m, &n));
  EXPECT(n == 96 * 32 * 2 + 2 * (32 * 32 * 2 + 16 * 32 * 2 + 64 * 32 * 3 + 32 * 2) + 32);

  /* acc_model_forward: input_ids and labels (shifted inside). */
  const int64_t prompt[5] = {3, 17, 42, 8, 64};
  acc_tensor* x = ids(prompt, 1, 5);
  acc_tensor *logits, *loss;
  EXPECT_OK(acc_model_forward(m, x, x, &logits, &loss));
  double l = 0;
  EXPECT_OK(acc_tensor_item(loss, &l));
  EXPECT(isfinite(l) && l > 0);
  float all[5 * 96];
  EXPECT_OK(acc_tensor_to_host(logits, all, sizeof all));
  int64_t argmax = 0;
  for (int64_t v = 1; v < 96; ++v)
    if (all[4 * 96 + v] > all[4 * 96 + argmax]) argmax = v;

  /* Without gradients (acc_set_grad_enabled 0) the forward gives the same logits and no graph to backward. */
  int32_t before = -1;
  EXPECT_OK(acc_set_grad_enabled(0, &before));
  EXPECT(before == 1);
  acc_tensor *nograd_logits, *nograd_loss;
  EXPECT_OK(acc_model_forward(m, x, x, &nograd_logits, &nograd_loss));
  float nograd[5 * 96];
  EXPECT_OK(acc_tensor_to_host(nograd_logits, nograd, sizeof nograd));
  EXPECT(memcmp(all, nograd, sizeof all) == 0);
  acc_accelerator* plain;
  CHECK(acc_accelerator_create("{}", &plain));
  EXPECT_ERR(acc_backward(plain, nograd_loss), ACC_ERR_INVALID_ARGUMENT, "grad");
  acc_accelerator_destroy(plain);
  EXPECT_OK(acc_set_grad_enabled(before, NULL));
  acc_tensor_destroy(nograd_logits);
  acc_tensor_destroy(nograd_loss);

  /* Greedy: the first new token is the forward's argmax; the callback sees every step. */
  acc_tensor* out = NULL;
  Stream s = {0, 0, {-1, -1}};
  EXPECT_OK(acc_generate(m, x, NULL, "{\"max_new_tokens\": 6}", on_tokens, &s, &out));
  int64_t seq[11] = {0}, shape[2] = {0, 0};
  int32_t ndim = 0;
  EXPECT_OK(acc_tensor_ndim(out, &ndim) || acc_tensor_shape(out, shape, 2));
  EXPECT(ndim == 2 && shape[0] == 1 && shape[1] == 11);
  EXPECT_OK(acc_tensor_to_host(out, seq, sizeof seq));
  EXPECT(seq[0] == 3 && seq[4] == 64 && seq[5] == argmax);
  EXPECT(s.calls == 6 && s.last[0] == seq[10]);
  acc_tensor_destroy(out);
  /* The callback stops it after 2 steps. */
  Stream stop = {0, 2, {-1, -1}};
  EXPECT_OK(acc_generate(m, x, NULL, "{\"max_new_tokens\": 6}", on_tokens, &stop, &out));
  EXPECT_OK(acc_tensor_ndim(out, &ndim) || acc_tensor_shape(out, shape, 2));
  EXPECT(stop.calls == 2 && shape[1] == 7);
  acc_tensor_destroy(out);
  /* Sampling with a seed repeats; a stop token ends a sequence early. */
  const char* sampled = "{\"max_new_tokens\": 8, \"do_sample\": true, \"temperature\": 2.0, \"seed\": 11}";
  int64_t a[13], b[13];
  EXPECT_OK(acc_generate(m, x, NULL, sampled, NULL, NULL, &out));
  EXPECT_OK(acc_tensor_to_host(out, a, sizeof a));
  acc_tensor_destroy(out);
  EXPECT_OK(acc_generate(m, x, NULL, sampled, NULL, NULL, &out));
  EXPECT_OK(acc_tensor_to_host(out, b, sizeof b));
  acc_tensor_destroy(out);
  EXPECT(memcmp(a, b, sizeof a) == 0);
  char eos[96];
  snprintf(eos, sizeof eos, "{\"max_new_tokens\": 6, \"eos_token_id\": [%lld, 95]}", (long long)argmax);
  EXPECT_OK(acc_generate(m, x, NULL, eos, NULL, NULL, &out));
  EXPECT_OK(acc_tensor_ndim(out, &ndim) || acc_tensor_shape(out, shape, 2));
  EXPECT(shape[1] == 6);
  acc_tensor_destroy(out);

  /* save_pretrained, sharded, loads back with the same logits; a built-in model has no config to save. */
  char saved[] = "/tmp/acc_hf_saved_XXXXXX";
  EXPECT(mkdtemp(saved) != NULL);
  EXPECT_OK(acc_model_save_pretrained(m, saved, "20KB"));
  acc_model* back = NULL;
  EXPECT_OK(acc_model_from_pretrained(saved, NULL, &back));
  if (back) {
    acc_tensor* again;
    EXPECT_OK(acc_model_forward(back, x, NULL, &again, NULL));
    float twice[5 * 96];
    EXPECT_OK(acc_tensor_to_host(again, twice, sizeof twice));
    float worst = 0; /* not bitwise: the mapped tensors sit at other offsets, where kernels round differently */
    for (int i = 0; i < 5 * 96; ++i) worst = fabsf(all[i] - twice[i]) > worst ? fabsf(all[i] - twice[i]) : worst;
    EXPECT(worst <= 1e-5f);
    acc_tensor_destroy(again);
    acc_model_destroy(back);
  }
  acc_model* builtin;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 2]}", &builtin));
  EXPECT_ERR(acc_model_save_pretrained(builtin, saved, NULL), ACC_ERR_INVALID_ARGUMENT, "from_pretrained");
  EXPECT_ERR(acc_model_save_pretrained(m, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "dir is NULL");
  acc_model_destroy(builtin);
  remove_tree(saved);

  /* from_config: fresh weights from the CPU generator, trained through the named forward, saved with its config. */
  const char* tiny = "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 64, \"hidden_size\": 16, "
                     "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                     "\"num_key_value_heads\": 1, \"initializer_range\": 0.5, \"eos_token_id\": 2}";
  acc_model *f1 = NULL, *f2 = NULL;
  EXPECT_OK(acc_model_from_config(tiny, NULL, &f1));
  EXPECT_OK(acc_model_from_config(tiny, "{\"dtype\": \"bfloat16\"}", &f2));
  if (f1) {
    EXPECT_OK(acc_model_num_parameters(f1, &n));
    EXPECT(n == 64 * 16 * 2 + (16 * 16 + 8 * 16 * 2 + 16 * 16 + 32 * 16 * 3 + 16 * 2) + 16);
    const int64_t small[4] = {3, 9, 27, 17};
    acc_tensor* sx = ids(small, 1, 4);
    EXPECT_OK(acc_model_forward(f1, sx, sx, NULL, &out));
    EXPECT_OK(acc_tensor_item(out, &l));
    EXPECT(isfinite(l) && l > 1.0); /* random weights: about log(64) */
    acc_tensor_destroy(out);
    EXPECT_OK(acc_generate(f1, sx, NULL, "{\"max_new_tokens\": 3}", NULL, NULL, &out));
    acc_tensor_destroy(out);
    acc_tensor_destroy(sx);
  }
  acc_model_destroy(f1);
  acc_model_destroy(f2);
  EXPECT_ERR(acc_model_from_config("{\"architectures\": [\"T5Model\"]}", NULL, &f1), ACC_ERR_UNSUPPORTED, "T5Model");
  {
    /* AutoModelForCausalLM.from_config: a config naming only its model_type builds that family's causal LM, and
     * save_pretrained names the class, so that from_pretrained (libacc's or transformers') reads it back. */
    const char* typed =
        "{\"model_type\": \"qwen2\", \"vocab_size\": 32, \"hidden_size\": 8, \"intermediate_size\": 16, "
        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1}";
    acc_model *q = NULL, *back = NULL;
    EXPECT_OK(acc_model_from_config(typed, NULL, &q));
    char dir[] = "/tmp/acc_hf_typed_XXXXXX";
    EXPECT(mkdtemp(dir) != NULL);
    EXPECT_OK(acc_model_save_pretrained(q, dir, NULL));
    char path[96], text[4096] = {0};
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE* f = fopen(path, "r");
    EXPECT(f && fread(text, 1, sizeof text - 1, f) > 0);
    if (f) fclose(f);
    EXPECT(strstr(text, "\"architectures\": [\"Qwen2ForCausalLM\"]") != NULL);
    EXPECT_OK(acc_model_from_pretrained(dir, NULL, &back));
    int64_t nq = 0, nb = 0;
    if (q && back) {
      EXPECT_OK(acc_model_num_parameters(q, &nq));
      EXPECT_OK(acc_model_num_parameters(back, &nb));
      EXPECT(nq == nb && nq > 0);
    }
    acc_model_destroy(q);
    acc_model_destroy(back);
    remove_tree(dir);
    EXPECT_ERR(acc_model_from_config("{\"model_type\": \"bert\"}", NULL, &q), ACC_ERR_UNSUPPORTED,
               "model_type 'bert' has no causal language model");
    EXPECT_ERR(acc_model_from_config("{\"vocab_size\": 8}", NULL, &q), ACC_ERR_INVALID_ARGUMENT, "nor a 'model_type'");
  }
  EXPECT_ERR(acc_model_from_config("not json", NULL, &f1), ACC_ERR_INVALID_ARGUMENT, "malformed JSON at line 1");
  /* config.json's values and JSON as transformers reads them, checked before a layer is built (issue 23). */
#define SMALL_LLAMA                                                                      \
  "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 16, \"hidden_size\": 8, " \
  "\"intermediate_size\": 16, \"num_attention_heads\": 2, "
  EXPECT_ERR(acc_model_from_config(SMALL_LLAMA "\"num_hidden_layers\": 1000000}", NULL, &f1), ACC_ERR_INVALID_ARGUMENT,
             "'num_hidden_layers' must be an integer between 1 and 65536");
  EXPECT_ERR(acc_model_from_config(SMALL_LLAMA "\"num_hidden_layers\": 1, \"rms_norm_eps\": -1}", NULL, &f1),
             ACC_ERR_INVALID_ARGUMENT, "the model config: 'rms_norm_eps' must be a number at least 0");
  EXPECT_ERR(acc_model_from_config(SMALL_LLAMA "\"num_hidden_layers\": 1, \"rope_parameters\": \"linear\"}", NULL, &f1),
             ACC_ERR_INVALID_ARGUMENT, "'rope_parameters' must be an object");
  EXPECT_ERR(acc_model_from_config(SMALL_LLAMA "\"num_hidden_layers\": 1, \"num_hidden_layers\": 2}", NULL, &f1),
             ACC_ERR_INVALID_ARGUMENT, "duplicate key \"num_hidden_layers\"");
  EXPECT_ERR(acc_model_from_config(SMALL_LLAMA "\"num_hidden_layers\": 1} x", NULL, &f1), ACC_ERR_INVALID_ARGUMENT,
             "unexpected text after the JSON value");
  EXPECT(f1 == NULL);
  {
    /* A FIFO as config.json: refused at once, naming it (from_pretrained waited forever for a writer). */
    char dir[] = "/tmp/acc_hf_fifo_XXXXXX", fifo[64];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(fifo, sizeof fifo, "%s/config.json", dir);
    EXPECT(mkfifo(fifo, 0600) == 0);
    EXPECT_ERR(acc_model_from_pretrained(dir, NULL, &f1), ACC_ERR_IO, "config.json': it is not a regular file");
    remove_tree(dir);
  }
  EXPECT_ERR(acc_model_from_config("{\"architectures\": [\"LlamaForCausalLM\"]}", NULL, &f1), ACC_ERR_INVALID_ARGUMENT,
             "vocab_size");

  /* An explicit device map: every key a module or parameter of the model, every weight placed. */
  acc_model* mapped = NULL;
  EXPECT_ERR(acc_model_from_pretrained(llama, "{\"device_map\": {\"model.layers.7\": \"cpu\", \"\": \"cpu\"}}",
                                       &mapped),
             ACC_ERR_INVALID_CONFIG, "'model.layers.7', which the model does not have");
  EXPECT_ERR(acc_model_from_pretrained(llama, "{\"device_map\": {\"model\": \"cpu\"}}", &mapped),
             ACC_ERR_INVALID_CONFIG, "leaves 'lm_head.weight' out");
  EXPECT_ERR(acc_model_from_pretrained(llama, "{\"device_map\": {\"\": \"gpu\"}}", &mapped), ACC_ERR_INVALID_CONFIG,
             "device_map['']");
  /* Accelerate's map of transformers' model, as it writes it: with the weightless model.rotary_emb. */
  EXPECT_OK(acc_model_from_pretrained(llama,
                                      "{\"device_map\": {\"model.embed_tokens\": \"cpu\", \"model.layers\": \"cpu\", "
                                      "\"model.norm\": \"cpu\", \"model.rotary_emb\": \"cpu\", \"lm_head\": \"disk\"}}",
                                      &mapped));
  if (mapped) {
    acc_tensor* out_ids;
    EXPECT_OK(acc_generate(mapped, x, NULL, "{\"max_new_tokens\": 2}", NULL, NULL, &out_ids));
    acc_tensor_destroy(out_ids);
    acc_model_destroy(mapped);
  }
  /* Bad input. */
  EXPECT_ERR(acc_generate(m, x, NULL, "{\"top_p\": 2}", NULL, NULL, &out), ACC_ERR_INVALID_CONFIG, "top_p");
  EXPECT_ERR(acc_generate(m, x, NULL, "{\"beams\": 2}", NULL, NULL, &out), ACC_ERR_INVALID_CONFIG, "beams");
  EXPECT_ERR(acc_generate(m, NULL, NULL, NULL, NULL, NULL, &out), ACC_ERR_INVALID_ARGUMENT, "input_ids is NULL");
  EXPECT_ERR(acc_generate(NULL, x, NULL, NULL, NULL, NULL, &out), ACC_ERR_INVALID_ARGUMENT, "model is NULL");
  const int64_t two[2] = {1, 1};
  acc_tensor* short_mask = ids(two, 1, 2);
  EXPECT_ERR(acc_generate(m, x, short_mask, NULL, NULL, NULL, &out), ACC_ERR_INVALID_ARGUMENT, "attention_mask");
  acc_model* mlp;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 2]}", &mlp));
  EXPECT_ERR(acc_generate(mlp, x, NULL, NULL, NULL, NULL, &out), ACC_ERR_INVALID_ARGUMENT,
             "not a causal language model");
  EXPECT(out == NULL);
  acc_model_destroy(mlp);
  acc_tensor_destroy(short_mask);
  acc_tensor_destroy(logits);
  acc_tensor_destroy(loss);
  acc_tensor_destroy(x);
  acc_model_destroy(m);
  return finish();
}
