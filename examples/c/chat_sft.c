/*
 * Chat fine-tuning with no Python anywhere: a JSONL file of conversations in TRL's conversational format
 * (examples/data/chat_sft.jsonl, {"messages": [...]} a line) becomes a byte-level BPE tokenizer trained on it
 * (acc_tokenizer_train_bpe: tokenizers' BpeTrainer, a from-scratch model's first step) with Qwen2's ChatML chat
 * template; the file becomes a dataset as TRL's SFTTrainer prepares one (acc_dataset_from_files, mode "sft"):
 * every conversation rendered by that template and tokenized, truncated to 64 tokens, with the loss on the
 * assistant's tokens only (the template's {% generation %} blocks: assistant_only_loss), batched by TRL's
 * collator; a small Llama built from a config is fine-tuned with LoRA (peft's: r 16 on every linear layer, the
 * embeddings and head trained whole since the base is fresh) in any number of processes; then it answers a
 * question as text, streamed in pieces as transformers' TextStreamer prints them (acc_generate_text).
 *
 *   acc launch --num_processes 2 chat_sft [--data FILE] [--steps N] [--batch B] [--out DIR] [--prompt TEXT]
 *                                         [--profile DIR]
 *
 * --profile DIR: steps 11 to 30 recorded by the profiler, a Chrome trace per process in DIR (bench/data_share.py
 * reads the share of acc::data, the loader's next batch, in them).
 *
 * OUT/tokenizer holds the tokenizer (transformers' AutoTokenizer loads it), OUT/adapter the adapter.
 */
#define _POSIX_C_SOURCE 200809L
#include <acc/acc.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

enum { MAX_LEN = 64, MAX_LINES = 100000 };

/* Qwen2-Instruct's ChatML template, with {% generation %} around what the assistant says (what TRL asks of a
 * template for assistant-only loss). */
static const char* kTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char* kLora = "{\"r\": 16, \"lora_alpha\": 32, \"target_modules\": \"all-linear\", "
                           "\"modules_to_save\": [\"embed_tokens\", \"lm_head\"]}";

static char** read_lines(const char* path, int64_t* count) {
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
    exit(1);
  }
  char** lines = malloc(MAX_LINES * sizeof *lines);
  char* line = NULL;
  size_t cap = 0;
  ssize_t n;
  *count = 0;
  while ((n = getline(&line, &cap, f)) > 0 && *count < MAX_LINES) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    if (n > 0) lines[(*count)++] = strdup(line);
  }
  free(line);
  fclose(f);
  return lines;
}

/* mkdir -p: path and the folders above it. */
static void make_dir(const char* path) {
  char partial[4096];
  snprintf(partial, sizeof partial, "%s", path);
  for (char* p = partial + (partial[0] != '\0');; ++p) { /* past a leading / */
    const char c = *p;
    if (c != '/' && c != '\0') continue;
    *p = '\0';
    if (mkdir(partial, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "cannot create %s: %s\n", partial, strerror(errno));
      exit(1);
    }
    if (c == '\0') break;
    *p = c;
  }
}

/* acc_generate_text's callback: prints each piece as it comes. */
static int32_t print_piece(void* user, const char* piece, size_t length) {
  (void)user;
  fwrite(piece, 1, length, stdout);
  fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  const char* data = "examples/data/chat_sft.jsonl";
  const char* out_dir = "out/chat_sft";
  const char* prompt = "What is the capital of Japan?";
  const char* profile_dir = NULL;
  int steps = 300, batch = 16;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    const char* value = i + 1 < argc ? argv[++i] : NULL;
    if (!value) flag = "";
    if (!strcmp(flag, "--data")) data = value;
    else if (!strcmp(flag, "--out")) out_dir = value;
    else if (!strcmp(flag, "--prompt")) prompt = value;
    else if (!strcmp(flag, "--steps")) steps = atoi(value);
    else if (!strcmp(flag, "--batch")) batch = atoi(value);
    else if (!strcmp(flag, "--profile")) profile_dir = value;
    else {
      fprintf(stderr,
              "usage: chat_sft [--data FILE] [--steps N] [--batch B] [--out DIR] [--prompt TEXT] [--profile DIR]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  CHECK(acc_abi_check(ACC_ABI_VERSION));
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 42}", &acc));
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  int64_t n_lines;
  char** lines = read_lines(data, &n_lines);

  char template_escaped[2048];
  {
    /* The template as a JSON string: its quotes and backslashes escaped. */
    char escaped[2048];
    size_t k = 0;
    for (const char* p = kTemplate; *p && k + 2 < sizeof escaped; ++p) {
      if (*p == '"' || *p == '\\') escaped[k++] = '\\';
      escaped[k++] = *p;
    }
    escaped[k] = '\0';
    snprintf(template_escaped, sizeof template_escaped, "%s", escaped);
  }
  /* The tokenizer: trained by the main process on the conversations, saved, loaded by every process. */
  char tok_dir[4096], adapter_dir[4096];
  snprintf(tok_dir, sizeof tok_dir, "%s/tokenizer", out_dir);
  snprintf(adapter_dir, sizeof adapter_dir, "%s/adapter", out_dir);
  if (is_main) {
    make_dir(out_dir);
    size_t* lengths = malloc((size_t)n_lines * sizeof *lengths);
    for (int64_t i = 0; i < n_lines; ++i) lengths[i] = strlen(lines[i]);
    acc_tokenizer* trained;
    char options[8192];
    snprintf(options, sizeof options,
             "{\"vocab_size\": 600, \"special_tokens\": [\"<|endoftext|>\", \"<|im_start|>\", \"<|im_end|>\"], "
             "\"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\", \"model_max_length\": %d, "
             "\"chat_template\": \"%s\"}",
             MAX_LEN, template_escaped);
    CHECK(acc_tokenizer_train_bpe((const char* const*)lines, lengths, n_lines, options, &trained));
    free(lengths);
    CHECK(acc_tokenizer_save_pretrained(trained, tok_dir));
    acc_tokenizer_destroy(trained);
  }
  for (int64_t i = 0; i < n_lines; ++i) free(lines[i]);
  free(lines);
  CHECK(acc_wait_for_everyone(acc));
  acc_tokenizer* tok;
  CHECK(acc_tokenizer_from_pretrained(tok_dir, &tok));

  /* The dataset: TRL's SFT preparation of the file's "messages" rows, by the tokenizer's own template (saved with
   * it): each conversation rendered and tokenized, truncated to MAX_LEN tokens, labels -100 outside the
   * assistant's tokens; each batch TRL's collator's, padded to its longest row (labels -100 on the padding). */
  char data_opts[256];
  snprintf(data_opts, sizeof data_opts, "{\"mode\": \"sft\", \"assistant_only_loss\": true, \"max_length\": %d}",
           MAX_LEN);
  acc_dataset* ds;
  CHECK(acc_dataset_from_files(data, tok, data_opts, &ds));
  int64_t n_conv;
  CHECK(acc_dataset_length(ds, &n_conv));
  /* Each row as the collator gives it: conversation 0's ids decoded (the template's text), and the labels the
   * loss learns counted. */
  int64_t supervised = 0;
  for (int64_t i = 0; i < n_conv; ++i) {
    acc_batch* row;
    CHECK(acc_dataset_get_batch(ds, &i, 1, &row));
    acc_tensor *t_ids, *t_labels;
    CHECK(acc_batch_get(row, "input_ids", &t_ids));
    CHECK(acc_batch_get(row, "labels", &t_labels));
    int64_t n;
    CHECK(acc_tensor_numel(t_ids, &n));
    int64_t* ids = malloc((size_t)n * sizeof *ids);
    int64_t* labels = malloc((size_t)n * sizeof *labels);
    CHECK(acc_tensor_to_host(t_ids, ids, (size_t)n * sizeof *ids));
    CHECK(acc_tensor_to_host(t_labels, labels, (size_t)n * sizeof *labels));
    for (int64_t t = 0; t < n; ++t) supervised += labels[t] != -100;
    if (i == 0 && is_main) {
      char* text;
      CHECK(acc_tokenizer_decode(tok, ids, n, NULL, &text, NULL));
      printf("conversation 0 as the template renders it:\n%s\n", text);
      acc_text_free(text);
    }
    free(ids), free(labels);
    acc_tensor_destroy(t_ids), acc_tensor_destroy(t_labels);
    acc_batch_destroy(row);
  }
  char loader_opts[128];
  snprintf(loader_opts, sizeof loader_opts,
           "{\"batch_size\": %d, \"shuffle\": true, \"seed\": 42, \"drop_last\": true}", batch);
  acc_dataloader* dl;
  CHECK(acc_dataloader_create(ds, loader_opts, &dl));

  /* A small Llama sized to the tokenizer, with a LoRA adapter. */
  char* info;
  CHECK(acc_tokenizer_info(tok, &info));
  const char* at = strstr(info, "\"len\":");
  const long long vocab = at ? atoll(at + 6) : 0;
  acc_text_free(info);
  int64_t eos, pad;
  CHECK(acc_tokenizer_token_to_id(tok, "<|im_end|>", &eos));
  CHECK(acc_tokenizer_token_to_id(tok, "<|endoftext|>", &pad));
  char config[1024];
  snprintf(config, sizeof config,
           "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": %lld, "
           "\"hidden_size\": 64, \"intermediate_size\": 172, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
           "\"num_key_value_heads\": 2, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-05, "
           "\"tie_word_embeddings\": false, \"eos_token_id\": %lld, \"pad_token_id\": %lld, \"dtype\": \"float32\"}",
           vocab, (long long)eos, (long long)pad);
  acc_model* model;
  CHECK(acc_model_from_config(config, NULL, &model));
  CHECK(acc_model_add_lora(model, kLora));
  CHECK(acc_model_set_training(model, 1));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.005, \"weight_decay\": 0.0}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, dl));
  if (is_main)
    printf("%lld conversations, %lld assistant tokens to learn; vocabulary %lld; LoRA %s; %d steps\n",
           (long long)n_conv, (long long)supervised, vocab, kLora, steps);

  if (profile_dir) {
    char kwargs[4096]; /* DIR as a JSON string: a plain path (no quotes or backslashes) */
    snprintf(kwargs, sizeof kwargs,
             "{\"schedule_option\": {\"wait\": 8, \"warmup\": 2, \"active\": 20, \"repeat\": 1}, \"output_trace_dir\": "
             "\"%s\"}",
             profile_dir);
    CHECK(acc_profile_begin(acc, kwargs));
  }
  for (int step = 1; step <= steps;) {
    acc_batch *b, *out;
    CHECK(acc_dataloader_next_batch(dl, &b));
    if (!b) continue; /* a new epoch */
    CHECK(acc_model_forward_batch(model, b, &out));
    acc_tensor *loss, *mean;
    CHECK(acc_batch_get(out, "loss", &loss));
    CHECK(acc_backward(acc, loss));
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
    acc_batch_destroy(out);
    acc_batch_destroy(b);
    if (profile_dir) CHECK(acc_profile_step(acc));
    ++step;
  }
  if (profile_dir) CHECK(acc_profile_end(acc));
  CHECK(acc_model_save_adapter(model, adapter_dir));

  /* The question, rendered by the template with the assistant's header, answered as text. */
  if (is_main) {
    CHECK(acc_model_set_training(model, 0));
    char messages[1024], *rendered;
    snprintf(messages, sizeof messages, "[{\"role\": \"user\", \"content\": \"%s\"}]", prompt);
    CHECK(acc_tokenizer_apply_chat_template(tok, messages, "{\"add_generation_prompt\": true}", &rendered, NULL));
    printf("user: %s\nassistant: ", prompt);
    char* answer;
    CHECK(acc_generate_text(model, tok, rendered,
                            "{\"max_new_tokens\": 24, \"add_special_tokens\": false, \"skip_special_tokens\": true}",
                            print_piece, NULL, &answer));
    printf("\n");
    acc_text_free(answer);
    acc_text_free(rendered);
    printf("saved the tokenizer to %s and the adapter to %s\n", tok_dir, adapter_dir);
  }
  acc_tokenizer_destroy(tok);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
