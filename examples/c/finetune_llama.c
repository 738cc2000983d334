/*
 * A tiny Llama (transformers' LlamaForCausalLM, built from a config with acc_model_from_config) fine-tuned
 * on the demo's text (the license texts of /usr/share/common-licenses, one token a byte) in any number of
 * processes, saved in Hugging Face format (acc_model_save_pretrained: transformers loads it), then asked to
 * continue a prompt with acc_generate, the bytes printed as they come.
 *
 *   acc launch --num_processes 2 finetune_llama [--steps N] [--batch B] [--out DIR] [--text-dir DIR]
 *                                               [--from DIR] [--prompt TEXT] [--new-tokens N] [--lora]
 *
 * --batch is per process (Accelerate's batch_size): N processes with batch B train as one with N x B.
 * --from DIR starts from a saved model (acc_model_from_pretrained) instead of fresh weights.
 * --lora fine-tunes a LoRA adapter instead (peft's get_peft_model: r 8, lora_alpha 16 on every linear layer;
 * the base stays frozen): the base model is saved to OUT/model first, the trained adapter to OUT/adapter
 * (adapter_config.json, adapter_model.safetensors: peft's PeftModel.from_pretrained reads it), and the
 * continuation comes from a fresh copy of the base with the adapter loaded (acc_model_load_adapter).
 */
#define _POSIX_C_SOURCE 200809L
#include <acc/acc.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "corpus.h"

#include "check.h"

enum { BLOCK = 64 };

/* peft's LoraConfig for --lora. */
static const char* kLora = "{\"r\": 8, \"lora_alpha\": 16, \"target_modules\": \"all-linear\"}";

/* transformers' LlamaConfig, small: bytes as tokens (vocabulary 256), grouped-query attention. */
static const char* kConfig =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 256, \"hidden_size\": 64,"
    " \"intermediate_size\": 172, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"hidden_act\": \"silu\","
    " \"initializer_range\": 0.02, \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 0,"
    " \"dtype\": \"float32\"}";

/* mkdir -p */
static void make_dirs(const char* path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char* p = buf + 1; *p; ++p)
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) break;
      *p = '/';
    }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "cannot create %s: %s\n", buf, strerror(errno));
    exit(1);
  }
}

/* acc_generate's callback: prints each new byte of the (single) sequence as it comes. */
static int32_t print_token(void* user, const int64_t* tokens, int64_t batch) {
  (void)user;
  (void)batch;
  const int c = (int)tokens[0];
  putchar(c == '\n' || (c >= 32 && c < 127) ? c : '?');
  fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  int steps = 300, batch = 8, new_tokens = 120;
  const char* out_dir = "out/llama";
  const char* text_dir = "/usr/share/common-licenses";
  const char* from = NULL;
  const char* prompt = "This program is free software";
  int lora = 0;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    if (!strcmp(flag, "--lora")) {
      lora = 1;
      continue;
    }
    const char* value = i + 1 < argc ? argv[++i] : NULL;
    if (!value) flag = ""; /* a flag without its value: usage */
    if (!strcmp(flag, "--steps")) steps = atoi(value);
    else if (!strcmp(flag, "--batch")) batch = atoi(value);
    else if (!strcmp(flag, "--out")) out_dir = value;
    else if (!strcmp(flag, "--text-dir")) text_dir = value;
    else if (!strcmp(flag, "--from")) from = value;
    else if (!strcmp(flag, "--prompt")) prompt = value;
    else if (!strcmp(flag, "--new-tokens")) new_tokens = atoi(value);
    else {
      fprintf(stderr, "usage: finetune_llama [--steps N] [--batch B] [--out DIR] [--text-dir DIR] [--from DIR]"
                      " [--prompt TEXT] [--new-tokens N] [--lora]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  CHECK(acc_abi_check(ACC_ABI_VERSION));
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 42}", &acc));
  int32_t world, is_main;
  CHECK(acc_num_processes(acc, &world));
  CHECK(acc_is_main_process(acc, &is_main));

  /* The main process writes the token file; the others wait, then map it. */
  char tokens_path[4096], model_dir[4096], adapter_dir[4096];
  snprintf(tokens_path, sizeof tokens_path, "%s/train.bin", out_dir);
  snprintf(model_dir, sizeof model_dir, "%s/model", out_dir);
  snprintf(adapter_dir, sizeof adapter_dir, "%s/adapter", out_dir);
  if (is_main) {
    make_dirs(out_dir);
    size_t len;
    unsigned char* text = read_corpus(text_dir, &len);
    write_tokens(tokens_path, text, len);
    free(text);
  }
  CHECK(acc_wait_for_everyone(acc));
  acc_dataset* ds;
  CHECK(acc_dataset_from_token_file(tokens_path, "{\"block_size\": 64, \"dtype\": \"uint16\"}", &ds));
  char loader_opts[128];
  snprintf(loader_opts, sizeof loader_opts,
           "{\"batch_size\": %d, \"shuffle\": true, \"seed\": 42, \"drop_last\": true}", batch);
  acc_dataloader* dl;
  CHECK(acc_dataloader_create(ds, loader_opts, &dl));

  acc_model* model;
  if (from) CHECK(acc_model_from_pretrained(from, NULL, &model));
  else CHECK(acc_model_from_config(kConfig, NULL, &model));
  CHECK(acc_model_set_training(model, 1)); /* from_pretrained gives eval mode, as transformers */
  int64_t n_params;
  CHECK(acc_model_num_parameters(model, &n_params));
  if (lora) {
    /* The base the adapter trains on (frozen from here on), saved for loading the adapter onto it below. */
    if (is_main) CHECK(acc_model_save_pretrained(model, model_dir, NULL));
    CHECK(acc_model_add_lora(model, kLora));
  }
  int64_t n_all;
  CHECK(acc_model_num_parameters(model, &n_all));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.003, \"weight_decay\": 0.01}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, dl));
  if (is_main)
    printf("LlamaForCausalLM, %lld parameters; batch %d x %d processes x %d tokens; %d steps\n", (long long)n_params,
           batch, world, BLOCK, steps);
  if (is_main && lora) /* as peft's print_trainable_parameters */
    printf("LoRA %s: trainable params: %lld || all params: %lld || trainable%%: %.4f\n", kLora,
           (long long)(n_all - n_params), (long long)n_all, 100.0 * (double)(n_all - n_params) / (double)n_all);

  for (int step = 1; step <= steps;) {
    acc_tensor *x, *y, *loss, *mean;
    int32_t has;
    CHECK(acc_dataloader_next(dl, &x, &y, &has));
    if (!has) continue; /* a new epoch */
    /* transformers' labels are the inputs themselves: the model shifts them (the loader's y is pre-shifted). */
    CHECK(acc_model_forward(model, x, x, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_clip_grad_norm(acc, model, 1.0, 2.0, NULL));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    if (step % 50 == 0 || step == 1 || step == steps) {
      double l;
      CHECK(acc_reduce(acc, loss, ACC_REDUCE_MEAN, &mean));
      CHECK(acc_tensor_item(mean, &l));
      if (is_main) printf("step %4d/%d  loss %.4f\n", step, steps, l);
      acc_tensor_destroy(mean);
    }
    acc_tensor_destroy(loss);
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
    ++step;
  }
  /* Hugging Face format (config.json and model.safetensors; with --lora peft's adapter files): the main process
   * writes, the others wait. */
  if (lora) CHECK(acc_model_save_adapter(model, adapter_dir));
  else CHECK(acc_model_save_pretrained(model, model_dir, NULL));
  if (is_main) {
    acc_model* generator = model;
    if (lora) {
      printf("saved the adapter to %s (peft: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(\"%s\"),"
             " \"%s\"))\n",
             adapter_dir, model_dir, adapter_dir);
      /* As a user of the adapter would: a fresh copy of the base, the adapter loaded onto it. */
      CHECK(acc_model_from_pretrained(model_dir, NULL, &generator));
      CHECK(acc_model_load_adapter(generator, adapter_dir, NULL));
      printf("loaded %s onto %s\n", adapter_dir, model_dir);
    } else {
      printf("saved to %s (transformers: AutoModelForCausalLM.from_pretrained(\"%s\"))\n", model_dir, model_dir);
    }
    CHECK(acc_model_set_training(generator, 0));
    const size_t n = strlen(prompt);
    int64_t* ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; ++i) ids[i] = (unsigned char)prompt[i];
    const int64_t shape[2] = {1, (int64_t)n};
    acc_tensor *input, *out;
    CHECK(acc_tensor_from_host(ids, n * sizeof *ids, ACC_INT64, shape, 2, &input));
    char gen_opts[160];
    snprintf(gen_opts, sizeof gen_opts,
             "{\"max_new_tokens\": %d, \"do_sample\": true, \"temperature\": 0.8, \"top_k\": 40, \"seed\": 0}",
             new_tokens);
    printf("--- %s", prompt);
    CHECK(acc_generate(generator, input, NULL, gen_opts, print_token, NULL, &out));
    printf("\n---\n");
    acc_tensor_destroy(out);
    acc_tensor_destroy(input);
    free(ids);
    if (generator != model) acc_model_destroy(generator);
  }
  CHECK(acc_wait_for_everyone(acc));
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
  return 0;
}
