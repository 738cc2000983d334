/* Context parallelism through the public C API (tests/mp/mp_test.py case_context_parallel_training starts it with
 * `acc launch`; the parallelism_config and FSDP2 come from the variables accelerate launch exports): a Llama (GQA),
 * a Mixtral or a GPT-2
 * from acc_model_from_config (a vocabulary of 38, which tp=2 splits, over the 37 ids of mp_common.h's tokens), SGD,
 * prepared with a loader of 80 token sequences of 8. Each step's loss, averaged over the processes (each data-parallel
 * rank's token mean, the same on its CP / TP peers), is printed by the main process as "LOSS step value";
 * acc_save_model writes the whole model to OUT after STEPS steps.
 * Usage: mp_cp_train STEPS BATCH OUT [MODEL]   (BATCH: per process, Accelerate's batch_size; MODEL llama (the
 *        default), mixtral, gpt2, or the folder of a transformers checkpoint: tests/hf/fixtures' Llama and Mixtral)
 *        mp_cp_train refuse             (cp_size 2) the built-in MLP refused by acc_prepare naming the key and its
 *                                       source; the Llama prepared, a sequence of 6 (not 2 x cp chunks) refused
 *        mp_cp_train refuse-sp          (sp_size 4) the same for Ulysses (a sequence of 6 is no multiple of 4),
 *                                       and a Llama of 2 heads, which sp 4 does not divide, named by key and field
 *        mp_cp_train refuse-pp N        (pp_size 2, 2 micro-batches, N processes) refuse_pp below
 * MP_SCALE: each step's fp16 loss scale after the optimizer step, "SCALE step value".
 * Pipeline parallelism (pp_size, case_pipeline_parallel_training) runs the same loop: the forward is the step. */
#include <acc/acc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_common.h"

static const char* const kLlama =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 38, "
    "\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
    "\"num_key_value_heads\": 4, \"head_dim\": 4, \"max_position_embeddings\": 64, \"initializer_range\": 0.2, "
    "\"tie_word_embeddings\": false}";
/* Mixtral: 4 experts, 2 per token, split inside each expert by TP. */
static const char* const kMixtral =
    "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\", \"vocab_size\": 38, "
    "\"hidden_size\": 32, \"intermediate_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
    "\"num_key_value_heads\": 4, \"head_dim\": 4, \"max_position_embeddings\": 64, \"initializer_range\": 0.2, "
    "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"tie_word_embeddings\": false}";
/* GPT-2: learned positions, packed q/k/v, tied head; no dropout, so runs compare. */
static const char* const kGpt2 =
    "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"vocab_size\": 38, "
    "\"n_positions\": 64, \"n_embd\": 32, \"n_layer\": 2, \"n_head\": 8, \"n_inner\": 64, \"embd_pdrop\": 0, "
    "\"attn_pdrop\": 0, \"resid_pdrop\": 0, \"initializer_range\": 0.2}";

/* The Llama prepared on `acc`, then a sequence of 6 its split cannot take refused by acc_model_forward with `why`. */
static void refuse_length(acc_accelerator* acc, const char* why) {
  acc_model* model;
  CHECK(acc_model_from_config(kLlama, NULL, &model));
  CHECK(acc_prepare(acc, model, NULL, NULL, NULL));
  const int64_t ids[6] = {1, 2, 3, 4, 5, 6}, shape[2] = {1, 6};
  acc_tensor *x = NULL, *loss = NULL;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &x));
  EXPECT_ERR(acc_model_forward(model, x, x, NULL, &loss), ACC_ERR_INVALID_ARGUMENT, why);
  acc_tensor_destroy(x);
  acc_model_destroy(model);
}

static int refuse(void) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 11}", &acc));
  acc_model* mlp = NULL;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 8, 1]}", &mlp));
  EXPECT_ERR(acc_prepare(acc, mlp, NULL, NULL, NULL), ACC_ERR_UNSUPPORTED,
             "'parallelism_config.cp_size' = 2 (from env PARALLELISM_CONFIG_CP_SIZE)");
  EXPECT(strstr(acc_last_error_message(), "Mlp has no context-parallel attention") != NULL);
  acc_model_destroy(mlp);
  refuse_length(acc, "context parallelism needs the sequence length (6) to split into 2 x cp_size (4) equal chunks");
  acc_accelerator_destroy(acc);
  return finish();
}

static int refuse_sp(void) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 11}", &acc));
  const char* key = "'parallelism_config.sp_size' = 4 (from env PARALLELISM_CONFIG_SP_SIZE)";
  acc_model* mlp = NULL;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 8, 1]}", &mlp));
  EXPECT_ERR(acc_prepare(acc, mlp, NULL, NULL, NULL), ACC_ERR_UNSUPPORTED, key);
  EXPECT(strstr(acc_last_error_message(), "Mlp has no split attention") != NULL);
  acc_model_destroy(mlp);
  /* 2 heads (and 2 key/value heads): sp 4 does not divide them. */
  char two[1024];
  snprintf(two, sizeof two, "%s", kLlama);
  char* heads = strstr(two, "\"num_attention_heads\": 8, \"num_key_value_heads\": 4");
  EXPECT(heads != NULL);
  const char* fewer = "\"num_attention_heads\": 2, \"num_key_value_heads\": 2"; /* the same length */
  if (heads) memcpy(heads, fewer, strlen(fewer));
  acc_model* odd = NULL;
  CHECK(acc_model_from_config(two, NULL, &odd));
  EXPECT_ERR(acc_prepare(acc, odd, NULL, NULL, NULL), ACC_ERR_INVALID_CONFIG, key);
  EXPECT(strstr(acc_last_error_message(), "does not divide LlamaForCausalLM's num_attention_heads (2)") != NULL);
  acc_model_destroy(odd);
  refuse_length(acc, "sequence parallelism needs the sequence length (6) to be a multiple of sp_size (4)");
  acc_accelerator_destroy(acc);
  return finish();
}

/* pp_size 2 (PARALLELISM_CONFIG_PP_SIZE) with 2 micro-batches: on 3 processes the accelerator is refused (pp does not
 * divide them); on 2, a model libacc cannot cut is refused by acc_prepare, a batch of 3 rows (2 micro-batches do not
 * divide it) by acc_model_forward, and a split point naming no block by acc_prepare, each naming what is wrong. */
static int refuse_pp(int processes) {
  const char* key = "'parallelism_config.pp_size' = 2 (from env PARALLELISM_CONFIG_PP_SIZE)";
  acc_accelerator* acc = NULL;
  if (processes == 3) {
    EXPECT_ERR(acc_accelerator_create("{\"seed\": 11}", &acc), ACC_ERR_INVALID_CONFIG,
               "the parallelism_config sizes multiply to 2 processes ('parallelism_config.pp_size' (2, "
               "PARALLELISM_CONFIG_PP_SIZE)), but the job has 3 processes");
    return finish();
  }
  CHECK(acc_accelerator_create("{\"seed\": 11}", &acc));
  acc_model* mlp = NULL;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 8, 1]}", &mlp));
  EXPECT_ERR(acc_prepare(acc, mlp, NULL, NULL, NULL), ACC_ERR_INVALID_CONFIG, key);
  EXPECT(strstr(acc_last_error_message(), "cannot be cut into pipeline stages") != NULL);
  acc_model_destroy(mlp);
  acc_model* model;
  CHECK(acc_model_from_config(kLlama, NULL, &model));
  CHECK(acc_model_set_training(model, 1));
  CHECK(acc_prepare(acc, model, NULL, NULL, NULL));
  const int64_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, shape[2] = {3, 3};
  acc_tensor *x = NULL, *loss = NULL;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &x));
  EXPECT_ERR(acc_model_forward(model, x, x, NULL, &loss), ACC_ERR_INVALID_ARGUMENT,
             "2 microbatches do not divide the batch of 3 rows");
  acc_tensor_destroy(x);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  /* A split point naming no block of the model: refused by acc_prepare, naming the key, its value and the blocks. */
  CHECK(acc_accelerator_create("{\"seed\": 11, \"parallelism_config\": {\"pp_split_points\": [\"model.layers.9\"]}}",
                               &acc));
  CHECK(acc_model_from_config(kLlama, NULL, &model));
  EXPECT_ERR(acc_prepare(acc, model, NULL, NULL, NULL), ACC_ERR_INVALID_CONFIG,
             "'parallelism_config.pp_split_points' = [\"model.layers.9\"]");
  EXPECT(strstr(acc_last_error_message(), "split point 'model.layers.9' names no block of LlamaForCausalLM (its blocks "
                                          "are model.layers.0 ... model.layers.1, then model.norm)") != NULL);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return finish();
}

int main(int argc, char** argv) {
  if (argc == 2 && !strcmp(argv[1], "refuse")) return refuse();
  if (argc == 2 && !strcmp(argv[1], "refuse-sp")) return refuse_sp();
  if (argc == 3 && !strcmp(argv[1], "refuse-pp")) return refuse_pp(atoi(argv[2]));
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: mp_cp_train STEPS BATCH OUT [llama|mixtral|gpt2]\n");
    return 2;
  }
  const char* family = argc == 5 ? argv[4] : "llama";
  const char* config = !strcmp(family, "mixtral") ? kMixtral : !strcmp(family, "gpt2") ? kGpt2 : kLlama;
  const int pretrained = strchr(family, '/') != NULL; /* a transformers checkpoint's folder (tests/hf/fixtures) */
  const int steps = atoi(argv[1]);
  acc_accelerator* acc;
  /* MP_INIT_SCALE: fp16's first loss scale (grad_scaler_kwargs.init_scale): large, the first steps overflow. */
  char settings[128] = "{\"seed\": 11}";
  if (getenv("MP_INIT_SCALE"))
    snprintf(settings, sizeof settings, "{\"seed\": 11, \"grad_scaler_kwargs\": {\"init_scale\": %s}}",
             getenv("MP_INIT_SCALE"));
  CHECK(acc_accelerator_create(settings, &acc));
  char opts[64];
  snprintf(opts, sizeof opts, "{\"batch_size\": %d}", atoi(argv[2]));
  struct loader data = token_loader(80, opts);
  acc_model* model;
  if (pretrained) CHECK(acc_model_from_pretrained(family, NULL, &model));
  else CHECK(acc_model_from_config(config, NULL, &model)); /* drawn from the accelerator's seed: alike everywhere */
  CHECK(acc_model_set_training(model, 1));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.05}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, data.dl));
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  /* MP_CLIP: acc_clip_grad_norm to that norm before each optimizer step; with GRADIENT_ACCUMULATION_STEPS in the environment
   * each micro-step runs inside acc_accumulate_begin / _end (Accelerate's accumulate). */
  const double clip = getenv("MP_CLIP") ? atof(getenv("MP_CLIP")) : 0;
  const int accumulate = getenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS") != NULL;
  for (int step = 0; step < steps; ++step) {
    acc_tensor *bx, *by, *loss, *mean;
    int32_t has;
    CHECK(acc_dataloader_next(data.dl, &bx, &by, &has));
    EXPECT(has);
    if (!has) break;
    if (accumulate) CHECK(acc_accumulate_begin(acc, model));
    CHECK(acc_model_forward(model, bx, by, NULL, &loss));
    CHECK(acc_reduce(acc, loss, ACC_REDUCE_MEAN, &mean));
    double v = 0;
    CHECK(acc_tensor_item(mean, &v));
    if (is_main) printf("LOSS %d %.9g\n", step, v);
    CHECK(acc_backward(acc, loss));
    int32_t sync = 1;
    CHECK(acc_sync_gradients(acc, &sync));
    if (clip > 0 && sync) { /* as Accelerate's examples: on the steps that synchronise */
      double norm = 0;
      CHECK(acc_clip_grad_norm(acc, model, clip, 2.0, &norm));
      if (is_main) printf("NORM %d %.9g\n", step, norm);
    }
    CHECK(acc_optimizer_step(opt));
    if (getenv("MP_SCALE")) { /* fp16: the loss scale after the step (it halves where the step was skipped) */
      double scale = 0;
      int64_t tracker = 0;
      CHECK(acc_grad_scaler_state(acc, &scale, &tracker));
      if (is_main) printf("SCALE %d %g\n", step, scale);
    }
    CHECK(acc_optimizer_zero_grad(opt));
    if (accumulate) CHECK(acc_accumulate_end(acc, model));
    acc_tensor_destroy(mean);
    acc_tensor_destroy(loss);
    acc_tensor_destroy(bx);
    acc_tensor_destroy(by);
  }
  if (getenv("MP_EVAL")) { /* the next batch in evaluation mode (a pipeline's eval_step): "EVAL value" */
    acc_tensor *bx, *by, *loss, *mean;
    int32_t has;
    CHECK(acc_dataloader_next(data.dl, &bx, &by, &has));
    if (!has) CHECK(acc_dataloader_next(data.dl, &bx, &by, &has)); /* the epoch ended: the next one's first batch */
    EXPECT(has);
    CHECK(acc_model_set_training(model, 0));
    CHECK(acc_model_forward(model, bx, by, NULL, &loss));
    CHECK(acc_reduce(acc, loss, ACC_REDUCE_MEAN, &mean));
    double v = 0;
    CHECK(acc_tensor_item(mean, &v));
    if (is_main) printf("EVAL %.9g\n", v);
    acc_tensor_destroy(mean);
    acc_tensor_destroy(loss);
    acc_tensor_destroy(bx);
    acc_tensor_destroy(by);
  }
  CHECK(acc_save_model(model, argv[3], NULL));
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  loader_destroy(&data);
  acc_accelerator_destroy(acc);
  return finish();
}
