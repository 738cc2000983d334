/* Sharded data parallel against DDP, started by `acc launch` with an Accelerate config file (FSDP or DeepSpeed
 * ZeRO, or none for DDP). Usage: mp_sharded MODEL STEPS ACCUM CLIP OUT
 *   MODEL mlp (121 parameters: no world size divides them), gpt (tied embedding; blocks "GPT2Block") or llama
 *         (transformers' LlamaForCausalLM from a config: blocks "LlamaDecoderLayer", grouped-query attention), or
 *         a TorchScript file (FILE.pt: an MLP's data, mse loss)
 *   STEPS AdamW steps (micro-steps: STEPS x ACCUM); CLIP > 0 clips the gradient norm before each step
 *   OUT   directory acc_save_model writes the trained weights to (every process calls it)
 *   LOAD  a checkpoint acc_load_state restores before training ("-": none); SAVE: where acc_save_state writes
 *         one after training
 * Between steps an evaluation forward without gradients runs (ZeRO-3 gathers and frees for it). The main process
 * prints "LOSS x", the last micro-step's loss averaged over the processes (and "SCALE s", fp16's loss scale, after
 * checking every process has the same). MP_EXTRA_CONFIG adds keys to the
 * explicit config (as JSON members). Fine-tuning: MP_FREEZE=PATTERN freezes the parameters it matches
 * (acc_model_set_requires_grad), MP_LORA=JSON adds a LoRA adapter first, MP_OPTIMIZER=JSON replaces the optimizer options (e.g. with "param_groups"),
 * MP_BATCH=N sets the per-process batch size (default 4). MP_PRETRAINED=DIR loads the llama with acc_model_from_pretrained from DIR and
 * prints "WEIGHTS local_rank=L mapped=0|1": whether DIR/model.safetensors is mapped into the process (read).
 * Prints "N passed, N failed"; exits non-zero on any failed check. */
#include <acc/acc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_common.h"

enum { SAMPLES = 96 };

int main(int argc, char** argv) {
  if (argc != 6 && argc != 8) {
    fprintf(stderr, "usage: mp_sharded mlp|gpt|llama STEPS ACCUM CLIP OUT [LOAD SAVE]\n");
    return 2;
  }
  const size_t len = strlen(argv[1]);
  const int script = len > 3 && !strcmp(argv[1] + len - 3, ".pt");
  const int llama = !strcmp(argv[1], "llama"), gpt = llama || !strcmp(argv[1], "gpt"), steps = atoi(argv[2]),
            accum = atoi(argv[3]);
  const double clip = atof(argv[4]);
  /* MP_EXTRA_CONFIG: more keys of the explicit config (e.g. "ddp_kwargs": {"comm_hook": "fp16"}). */
  const char* extra = getenv("MP_EXTRA_CONFIG");
  char cfg[512];
  snprintf(cfg, sizeof cfg, "{\"seed\": 7, \"gradient_accumulation_steps\": %d%s%s}", accum, extra ? ", " : "",
           extra ? extra : "");
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(cfg, &acc));
  char loader[64];
  snprintf(loader, sizeof loader, "{\"batch_size\": %d, \"shuffle\": true}",
           getenv("MP_BATCH") ? atoi(getenv("MP_BATCH")) : 4);
  struct loader data = gpt ? token_loader(SAMPLES, loader) : regression_loader(SAMPLES, loader);
  acc_dataloader* dl = data.dl;
  acc_model* model;
  if (script) {
    CHECK(acc_model_load_torchscript(argv[1], "{\"loss\": \"mse\"}", &model));
    CHECK(acc_model_set_training(model, 1));
  } else if (llama && getenv("MP_PRETRAINED")) {
    const char* dir = getenv("MP_PRETRAINED");
    CHECK(acc_model_from_pretrained(dir, NULL, &model));
    CHECK(acc_model_set_training(model, 1));
    char weights[1024], line[2048];
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    int mapped = 0;
    FILE* maps = fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof line, maps)) mapped |= strstr(line, weights) != NULL;
    if (maps) fclose(maps);
    printf("WEIGHTS local_rank=%s mapped=%d\n", getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "?", mapped);
  } else if (llama) {
    CHECK(acc_model_from_config(
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 37, "
        "\"hidden_size\": 16, \"intermediate_size\": 20, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 2, \"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-05, \"rope_theta\": "
        "10000.0, "
        "\"hidden_act\": \"silu\", \"initializer_range\": 0.02, \"tie_word_embeddings\": false}",
        NULL, &model));
    CHECK(acc_model_set_training(model, 1));
  } else {
    CHECK(acc_model_create(gpt ? "{\"type\": \"gpt\", \"vocab_size\": 37, \"block_size\": 8, \"n_layer\": 2, "
                                 "\"n_head\": 2, \"n_embd\": 10, \"bias\": false}"
                               : "{\"type\": \"mlp\", \"sizes\": [3, 24, 1], \"activation\": \"tanh\"}",
                           &model));
  }
  if (getenv("MP_LORA")) CHECK(acc_model_add_lora(model, getenv("MP_LORA")));
  if (getenv("MP_FREEZE")) {
    int64_t matched = 0;
    CHECK(acc_model_set_requires_grad(model, getenv("MP_FREEZE"), 0, &matched));
    printf("FROZEN %lld\n", (long long)matched);
  }
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model,
                             getenv("MP_OPTIMIZER") ? getenv("MP_OPTIMIZER") : "{\"type\": \"adamw\", \"lr\": 0.001}",
                             &opt));
  if (getenv("MP_STEP_BEFORE_PREPARE")) {
    /* An optimizer that has stepped has state the shards cannot take: prepare refuses it and changes nothing (the
     * model is not prepared: preparing it alone then works). */
    acc_tensor *x, *y, *loss;
    int32_t has;
    CHECK(acc_dataloader_next(dl, &x, &y, &has));
    CHECK(acc_model_forward(model, x, y, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    EXPECT_ERR(acc_prepare(acc, model, opt, NULL, NULL), ACC_ERR_INVALID_STATE, "before its first step");
    EXPECT_OK(acc_prepare(acc, model, NULL, NULL, NULL));
    return finish();
  }
  CHECK(acc_prepare(acc, model, opt, NULL, dl));
  if (argc == 8 && strcmp(argv[6], "-")) CHECK(acc_load_state(acc, argv[6]));
  int done = 0;
  double last_loss = 0;
  while (done < steps * accum) {
    acc_tensor *bx, *by, *loss;
    int32_t has, sync;
    CHECK(acc_dataloader_next(dl, &bx, &by, &has));
    if (!has) continue;
    CHECK(acc_accumulate_begin(acc, model));
    CHECK(acc_model_forward(model, bx, by, NULL, &loss));
    CHECK(acc_tensor_item(loss, &last_loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_sync_gradients(acc, &sync));
    double norm = 0;
    if (sync && clip > 0) {
      CHECK(acc_clip_grad_norm(acc, model, clip, 2.0, &norm));
      EXPECT(norm > 0 && isfinite(norm));
    }
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    CHECK(acc_accumulate_end(acc, model));
    acc_tensor_destroy(loss);
    if (sync && done % 7 == 0) {
      /* evaluation between steps: no gradients, the model in eval mode */
      int32_t was;
      CHECK(acc_model_set_training(model, 0));
      CHECK(acc_set_grad_enabled(0, &was));
      CHECK(acc_model_forward(model, bx, by, NULL, &loss));
      float l;
      CHECK(acc_tensor_to_host(loss, &l, sizeof l));
      EXPECT(isfinite(l));
      acc_tensor_destroy(loss);
      CHECK(acc_set_grad_enabled(was, NULL));
      CHECK(acc_model_set_training(model, 1));
    }
    acc_tensor_destroy(bx);
    acc_tensor_destroy(by);
    ++done;
  }
  /* The mean over the processes of the last micro-step's loss. */
  acc_tensor *l, *mean;
  float lf = (float)last_loss, mean_f;
  CHECK(acc_tensor_from_host(&lf, sizeof lf, ACC_FLOAT32, NULL, 0, &l));
  CHECK(acc_reduce(acc, l, ACC_REDUCE_MEAN, &mean));
  CHECK(acc_tensor_to_host(mean, &mean_f, sizeof mean_f));
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  if (is_main) printf("LOSS %.6f\n", mean_f);
  /* fp16: every process skipped the same steps, so the loss scalers agree (each unscaled only its shards). */
  double scale;
  int64_t tracker;
  if (acc_grad_scaler_state(acc, &scale, &tracker) == ACC_OK) {
    float both[2] = {(float)scale, (float)-scale}, most[2];
    int64_t two = 2;
    acc_tensor *t, *m;
    CHECK(acc_tensor_from_host(both, sizeof both, ACC_FLOAT32, &two, 1, &t));
    CHECK(acc_reduce(acc, t, ACC_REDUCE_MAX, &m));
    CHECK(acc_tensor_to_host(m, most, sizeof most));
    EXPECT(most[0] + most[1] == 0); /* max == min */
    if (is_main) printf("SCALE %g\n", scale);
    acc_tensor_destroy(t);
    acc_tensor_destroy(m);
  }
  acc_tensor_destroy(l);
  acc_tensor_destroy(mean);
  CHECK(acc_save_model(model, argv[5], NULL));
  /* Accelerate's get_state_dict under every strategy: each tensor (gathered from the shards under ZeRO-3 / FSDP: a
   * collective), and the whole state as one file, written by the main process. The test compares both with
   * acc_save_model's file. */
  int64_t count;
  double sum = 0;
  CHECK(acc_model_state_size(model, &count));
  for (int64_t i = 0; i < count; ++i) {
    acc_tensor* t;
    acc_dtype dtype;
    int64_t n;
    CHECK(acc_model_state_get(model, i, NULL, &t));
    CHECK(acc_tensor_dtype(t, &dtype));
    CHECK(acc_tensor_numel(t, &n));
    if (dtype == ACC_FLOAT32) { /* every tensor of these models */
      float* v = malloc(sizeof(float) * (size_t)(n ? n : 1));
      CHECK(acc_tensor_to_host(t, v, sizeof(float) * (size_t)n));
      for (int64_t k = 0; k < n; ++k) sum += v[k];
      free(v);
    }
    acc_tensor_destroy(t);
  }
  if (is_main) printf("STATESUM %.9g\n", sum);
  char state_file[4096];
  snprintf(state_file, sizeof state_file, "%s/state.safetensors", argv[5]);
  CHECK(acc_model_save_safetensors(model, state_file));
  if (argc == 8) CHECK(acc_save_state(acc, argv[7]));
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  loader_destroy(&data);
  acc_accelerator_destroy(acc);
  return finish();
}
