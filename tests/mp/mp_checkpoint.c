/* Exact resume, started by `acc launch`. Usage: mp_checkpoint MODE TOTAL ...
 *   full TOTAL OUT              TOTAL micro-steps uninterrupted; the main process saves the weights to OUT
 *   crash TOTAL SAVE_AT DIR     saves the state into DIR at the first synchronizing micro-step >= SAVE_AT,
 *                               then the main process SIGKILLs itself (the launcher ends the job)
 *   resume TOTAL DIR OUT        loads DIR and continues to TOTAL; the weights to OUT
 *   auto TOTAL PROJECT OUT      automatic resume: saves a named checkpoint under PROJECT every 4
 *                               synchronizing micro-steps; on its first attempt (no PROJECT/killed marker)
 *                               the last process SIGKILLs itself at micro-step 13; a restart by
 *                               `acc launch --max_restarts` resumes from the newest checkpoint
 *   saveloop TOTAL PROJECT OUT  resumes from the newest checkpoint under PROJECT (if any) and saves one at
 *                               every synchronizing micro-step: the crash-safety test kills it at random
 *                               moments, most of them inside a save
 * The run has what makes a resume hard: a GPT with dropout, a loader shuffled by the default generator
 * (mid-epoch at the save), gradient accumulation, fp16 loss scaling, an LR schedule and a registered
 * object (the micro-step counter, which tells the resumed run where it is). MP_LORA=JSON adds a LoRA adapter
 * (acc_model_add_lora) before the optimizer: the base is frozen, and checkpoints hold what trains. */
#include <acc/acc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_common.h"

static int64_t g_micro_step; /* the registered object */

static acc_status save_counter(void* user, acc_bytes_list* out) {
  (void)user;
  return acc_bytes_list_append(out, &g_micro_step, sizeof g_micro_step);
}

static acc_status load_counter(void* user, const void* data, size_t size) {
  (void)user;
  if (size != sizeof g_micro_step) return 1;
  memcpy(&g_micro_step, data, size);
  return ACC_OK;
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const char* mode = argv[1];
  const int64_t total = atoll(argv[2]);
  const int save_loop = !strcmp(mode, "saveloop") && argc == 5;
  const int automatic = (!strcmp(mode, "auto") || save_loop) && argc == 5;
  char config[1024];
  snprintf(config, sizeof config,
           "{\"seed\": 5, \"gradient_accumulation_steps\": 2, \"mixed_precision\": \"fp16\"%s%s%s}",
           automatic ? ", \"project_config\": {\"automatic_checkpoint_naming\": true, \"project_dir\": \"" : "",
           automatic ? argv[3] : "", automatic ? "\"}, \"resume_from_checkpoint\": \"latest\"" : "");
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(config, &acc));
  int32_t rank, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));

  /* 40 sequences of 8 tokens, named as a Hugging Face batch */
  enum { N = 40, T = 8 };
  static int64_t ids[N * T], labels[N * T];
  for (int i = 0; i < N * T; ++i) {
    ids[i] = (i * 7 + i / T) % 16;
    labels[i] = (ids[i] * 3 + 1) % 16;
  }
  int64_t shape[2] = {N, T};
  acc_tensor *t_ids, *t_labels;
  CHECK(acc_tensor_from_host(ids, sizeof ids, ACC_INT64, shape, 2, &t_ids));
  CHECK(acc_tensor_from_host(labels, sizeof labels, ACC_INT64, shape, 2, &t_labels));
  acc_batch* columns;
  CHECK(acc_batch_create(&columns));
  CHECK(acc_batch_set(columns, "input_ids", t_ids));
  CHECK(acc_batch_set(columns, "labels", t_labels));
  acc_dataset* ds;
  CHECK(acc_dataset_from_batch(columns, &ds));
  acc_dataloader* dl;
  CHECK(acc_dataloader_create(ds, "{\"batch_size\": 3, \"shuffle\": true}", &dl));
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 16, \"block_size\": 8, \"n_layer\": 1, \"n_head\": 2, "
                         "\"n_embd\": 16, \"dropout\": 0.1}",
                         &model));
  if (getenv("MP_LORA")) CHECK(acc_model_add_lora(model, getenv("MP_LORA")));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
  acc_scheduler* sched;
  CHECK(acc_scheduler_create(opt, "{\"type\": \"linear\", \"warmup_steps\": 2, \"total_steps\": 40}", &sched));
  CHECK(acc_prepare(acc, model, opt, sched, dl));
  CHECK(acc_register_for_checkpointing(acc, save_counter, load_counter, NULL, NULL));

  const int crash = !strcmp(mode, "crash") && argc == 5, resume = !strcmp(mode, "resume") && argc == 5;
  if (!crash && !resume && !automatic && !(!strcmp(mode, "full") && argc == 4)) return 2;
  const int64_t save_at = crash ? atoll(argv[3]) : -1;
  if (resume) CHECK(acc_load_state(acc, argv[3]));
  char marker[1100] = "";
  int first_attempt = 0;
  if (automatic) {
    int32_t resumed;
    CHECK(acc_resume_from_checkpoint(acc, &resumed));
    snprintf(marker, sizeof marker, "%s/killed", argv[3]);
    FILE* f = fopen(marker, "r");
    first_attempt = f == NULL;
    if (f) fclose(f);
    if (!save_loop) EXPECT(resumed == !first_attempt); /* a restart finds a checkpoint, the first attempt none */
    CHECK(acc_wait_for_everyone(acc));  /* every process has looked at the marker before it appears */
  }

  while (g_micro_step < total) {
    acc_batch* batch;
    CHECK(acc_dataloader_next_batch(dl, &batch));
    if (!batch) continue; /* end of an epoch: the next call starts the next one */
    CHECK(acc_accumulate_begin(acc, model));
    int32_t sync;
    CHECK(acc_sync_gradients(acc, &sync));
    acc_batch* out;
    CHECK(acc_model_forward_batch(model, batch, &out));
    acc_tensor* loss;
    CHECK(acc_batch_get(out, "loss", &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_scheduler_step(sched));
    CHECK(acc_optimizer_zero_grad(opt));
    CHECK(acc_accumulate_end(acc, model));
    acc_tensor_destroy(loss);
    acc_batch_destroy(out);
    acc_batch_destroy(batch);
    ++g_micro_step;
    if (automatic && sync && (save_loop || g_micro_step % 4 == 0)) CHECK(acc_save_state(acc, NULL));
    if (automatic && !save_loop && first_attempt && g_micro_step == 13 && rank == world - 1) {
      FILE* f = fopen(marker, "w");
      if (f) fclose(f);
      raise(SIGKILL);
    }
    if (crash && sync && g_micro_step >= save_at) {
      CHECK(acc_save_state(acc, argv[4]));
      if (rank == 0) raise(SIGKILL);
      CHECK(acc_wait_for_everyone(acc)); /* the others wait here until the launcher ends them */
    }
  }
  if (rank == 0) CHECK(acc_model_save_safetensors(model, argv[argc - 1]));
  acc_tensor_destroy(t_ids);
  acc_tensor_destroy(t_labels);
  acc_batch_destroy(columns);
  acc_scheduler_destroy(sched);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
  printf("rank %d: %lld micro-steps\n", (int)rank, (long long)g_micro_step);
  return finish();
}
