/* Runs one of libacc's save paths into a folder, for tests/checkpoint/user_files.py (which seeds the folder with
 * a user's files, runs this, and checks that nothing of the user's changed and nothing appeared outside):
 *
 *   save_paths state DIR                 acc_save_state (a prepared MLP with AdamW and a schedule)
 *   save_paths load DIR                  acc_load_state of what `state` wrote (the same objects)
 *   save_paths model DIR [SHARD]         acc_save_model (max_shard_size SHARD: "300" gives shards)
 *   save_paths pretrained DIR MODEL      acc_model_from_pretrained(MODEL) then acc_model_save_pretrained
 *   save_paths trackers DIR              every tracker (log_with "all", project_dir DIR): a few steps
 *   save_paths offload DIR MODEL         acc_model_from_pretrained(MODEL) dispatched to the disk, offload_folder DIR
 *   save_paths adapter DIR [R]           acc_model_save_adapter of a LoRA adapter of rank R (default 2) on an MLP
 *
 * Exits 0 on success; otherwise prints the library's message and exits 1. */
#include <stdio.h>
#include <string.h>

#include <acc/acc.h>

static int failed(const char* what) {
  fprintf(stderr, "%s: %s\n", what, acc_last_error_message());
  return 1;
}

#define TRY(call)                               \
  do {                                          \
    if ((call) != ACC_OK) return failed(#call); \
  } while (0)

static int training_state(const char* dir, int load) {
  acc_accelerator* acc;
  acc_model* model;
  acc_optimizer* opt;
  acc_scheduler* sched;
  TRY(acc_accelerator_create("{\"seed\": 1}", &acc));
  TRY(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 8, 1]}", &model));
  TRY(acc_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 0.01}", &opt));
  TRY(acc_scheduler_create(opt, "{\"type\": \"linear\", \"total_steps\": 20}", &sched));
  TRY(acc_prepare(acc, model, opt, sched, NULL));
  if (load) TRY(acc_load_state(acc, dir));
  else TRY(acc_save_state(acc, dir));
  acc_scheduler_destroy(sched);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: save_paths state|load|model|pretrained|trackers|offload|adapter DIR [ARG]\n");
    return 2;
  }
  const char *what = argv[1], *dir = argv[2], *arg = argc > 3 ? argv[3] : NULL;
  char json[4096];
  acc_model* model;
  if (strcmp(what, "state") == 0 || strcmp(what, "load") == 0) return training_state(dir, what[0] == 'l');
  if (strcmp(what, "model") == 0) {
    TRY(acc_model_create("{\"type\": \"mlp\", \"sizes\": [2, 8, 8, 1]}", &model));
    TRY(acc_save_model(model, dir, arg));
    acc_model_destroy(model);
    return 0;
  }
  if (strcmp(what, "pretrained") == 0 && arg) {
    TRY(acc_model_from_pretrained(arg, NULL, &model));
    TRY(acc_model_save_pretrained(model, dir, NULL));
    acc_model_destroy(model);
    return 0;
  }
  if (strcmp(what, "offload") == 0 && arg) {
    snprintf(json, sizeof json,
             "{\"device_map\": \"sequential\", \"max_memory\": {\"cpu\": \"30KB\"}, \"dtype\": \"bfloat16\", "
             "\"offload_folder\": \"%s\"}",
             dir);
    TRY(acc_model_from_pretrained(arg, json, &model));
    acc_model_destroy(model);
    return 0;
  }
  if (strcmp(what, "adapter") == 0) {
    /* The same seed each run: a given rank always writes the same bytes. */
    acc_accelerator* acc;
    TRY(acc_accelerator_create("{\"seed\": 1}", &acc));
    TRY(acc_model_create("{\"type\": \"mlp\", \"sizes\": [16, 64, 16]}", &model));
    snprintf(json, sizeof json, "{\"r\": %s, \"target_modules\": \"all-linear\", \"init_lora_weights\": false}",
             arg ? arg : "2");
    TRY(acc_model_add_lora(model, json));
    TRY(acc_model_save_adapter(model, dir));
    acc_model_destroy(model);
    acc_accelerator_destroy(acc);
    return 0;
  }
  if (strcmp(what, "trackers") == 0) {
    acc_accelerator* acc;
    snprintf(json, sizeof json, "{\"log_with\": \"all\", \"project_dir\": \"%s\"}", dir);
    TRY(acc_accelerator_create(json, &acc));
    TRY(acc_init_trackers(acc, "run", "{\"lr\": 0.1}", NULL));
    for (int s = 0; s < 3; ++s) TRY(acc_log(acc, "{\"loss\": 0.5, \"acc\": {\"train\": 1, \"val\": 2}}", s));
    TRY(acc_end_training(acc));
    acc_accelerator_destroy(acc);
    return 0;
  }
  fprintf(stderr, "save_paths: unknown path '%s'\n", what);
  return 2;
}
