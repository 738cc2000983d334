/* Pipelined inference as Accelerate's prepare_pippy through the C API (issue 40 item 4), on the processes `acc launch`
 * starts (tests/mp/meson.build: 2 and 4). For each layout a fresh model: rank 0's whole model's logits for a batch of 5
 * sequences of 8 tokens, then the model prepared with acc_prepare_pippy runs the same batch: the logits equal the whole
 * model's within 1e-5 on the last process, on every process with gather_output, and NULL on the others without it.
 * Layouts: split points "auto" (Accelerate's balanced device map, planned over the processes) and given (a block's
 * name, the final norm's), num_chunks the number of processes (5 rows padded) and 5; Llama, GPT-2 (a head tied to the
 * embedding) and the built-in GPT. Refusals by name: a split point naming no block, inside one or at the embeddings,
 * split points that do not make one stage a process, targets given, an unknown option.
 * Usage: mp_pippy */
#include <acc/acc.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mp_common.h"

static const char* const kLlama =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 38, "
    "\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 4, \"num_attention_heads\": 8, "
    "\"num_key_value_heads\": 4, \"head_dim\": 4, \"max_position_embeddings\": 64, \"initializer_range\": 0.2, "
    "\"tie_word_embeddings\": false}";
static const char* const kGpt2 =
    "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"vocab_size\": 38, "
    "\"n_positions\": 64, \"n_embd\": 32, \"n_layer\": 4, \"n_head\": 8, \"n_inner\": 64, \"embd_pdrop\": 0, "
    "\"attn_pdrop\": 0, \"resid_pdrop\": 0, \"initializer_range\": 0.2}";

enum { kRows = 5, kTime = 8, kVocab = 38 };

static acc_model* build(const char* family) {
  acc_model* m = NULL;
  if (!strcmp(family, "gpt"))
    CHECK(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 38, \"block_size\": 16, "
                           "\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 32}",
                           &m));
  else CHECK(acc_model_from_config(!strcmp(family, "llama") ? kLlama : kGpt2, NULL, &m));
  CHECK(acc_model_set_training(m, 0));
  return m;
}

static acc_tensor* batch(void) {
  int64_t ids[kRows * kTime];
  for (int i = 0; i < kRows * kTime; ++i) ids[i] = (i * 7 + i / 3) % kVocab;
  const int64_t shape[2] = {kRows, kTime};
  acc_tensor* x = NULL;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &x));
  return x;
}

/* A fresh model: rank 0's whole model's logits for the batch (prepare_pippy starts every stage from rank 0's weights),
 * then the model prepared with `options` and its logits compared. */
static void layout(acc_accelerator* acc, const char* family, const char* options, int gather) {
  static float whole[kRows * kTime * kVocab], got[kRows * kTime * kVocab];
  int32_t last = 0, rank = 0;
  CHECK(acc_is_last_process(acc, &last));
  CHECK(acc_process_index(acc, &rank));
  acc_model* m = build(family);
  acc_tensor *x = batch(), *out = NULL, *first = NULL;
  CHECK(acc_model_forward(m, x, NULL, &out, NULL));
  CHECK(acc_broadcast(acc, out, 0, &first));
  CHECK(acc_tensor_to_host(first, whole, sizeof whole));
  acc_tensor_destroy(first);
  acc_tensor_destroy(out);
  out = NULL;
  CHECK(acc_prepare_pippy(acc, m, options));
  CHECK(acc_model_forward(m, x, NULL, &out, NULL));
  if (last || gather) {
    EXPECT(out != NULL);
    if (out) CHECK(acc_tensor_to_host(out, got, sizeof got));
    double worst = 0;
    for (int i = 0; i < kRows * kTime * kVocab; ++i) worst = fmax(worst, fabs(got[i] - whole[i]));
    if (worst > 1e-5) printf("rank %d: %s %s: worst %g\n", rank, family, options ? options : "{}", worst);
    EXPECT(out != NULL && worst <= 1e-5);
    if (last) printf("%s %s: logits within %.3g of the whole model's\n", family, options ? options : "{}", worst);
  } else {
    EXPECT(out == NULL); /* Accelerate's None */
  }
  acc_tensor_destroy(out);
  acc_tensor_destroy(x);
  acc_model_destroy(m);
}

static void refuse(acc_accelerator* acc, const char* options, acc_status code, const char* why) {
  acc_model* m = build("llama");
  EXPECT_ERR(acc_prepare_pippy(acc, m, options), code, why);
  acc_model_destroy(m);
}

int main(void) {
  acc_accelerator* acc = NULL;
  CHECK(acc_accelerator_create("{\"seed\": 7}", &acc));
  int32_t world = 0;
  CHECK(acc_num_processes(acc, &world));
  const char* const families[] = {"llama", "gpt2", "gpt"};
  for (int f = 0; f < 3; ++f) {
    layout(acc, families[f], NULL, 0); /* "auto", num_chunks = the processes */
    layout(acc, families[f], "{\"gather_output\": true}", 1);
    layout(acc, families[f], "{\"num_chunks\": 5, \"gather_output\": true}", 1);
    if (world == 2 && f < 2) { /* a given split point, by the family's block name */
      layout(acc, families[f],
             f == 0 ? "{\"split_points\": [\"model.layers.1\"]}" : "{\"split_points\": [\"transformer.h.3\"]}", 0);
      layout(acc, families[f],
             f == 0 ? "{\"split_points\": [\"model.norm\"]}" : "{\"split_points\": [\"transformer.ln_f\"]}", 0);
    }
  }
  if (world == 2) {
    refuse(acc, "{\"split_points\": [\"model.layers.9\"]}", ACC_ERR_INVALID_ARGUMENT,
           "split point 'model.layers.9' names no block of LlamaForCausalLM");
    refuse(acc, "{\"split_points\": [\"model.layers.1.mlp\"]}", ACC_ERR_INVALID_ARGUMENT,
           "split point 'model.layers.1.mlp' is inside the block model.layers.1");
    refuse(acc, "{\"split_points\": [\"model.embed_tokens\"]}", ACC_ERR_INVALID_ARGUMENT,
           "split point 'model.embed_tokens' begins a stage with the embeddings");
    refuse(acc, "{\"split_points\": [\"model.layers.1\", \"model.layers.2\"]}", ACC_ERR_INVALID_ARGUMENT,
           "2 split points make 3 stages; the job has 2 processes, one stage each");
  }
  refuse(acc, "{\"chunks\": 2}", ACC_ERR_INVALID_ARGUMENT, "prepare_pippy: unknown option 'chunks'");
  refuse(acc, "{\"gather_output\": 1}", ACC_ERR_INVALID_ARGUMENT, "'gather_output' must be true or false");
  { /* targets: the pipelined forward returns the logits alone */
    acc_model* m = build("llama");
    CHECK(acc_prepare_pippy(acc, m, NULL));
    acc_tensor *x = batch(), *out = NULL;
    EXPECT_ERR(acc_model_forward(m, x, x, &out, NULL), ACC_ERR_INVALID_ARGUMENT,
               "prepare_pippy: the forward takes the inputs alone");
    acc_tensor_destroy(x);
    acc_model_destroy(m);
  }
  acc_accelerator_destroy(acc);
  return finish();
}
