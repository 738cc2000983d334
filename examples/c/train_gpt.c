/*
 * The libacc demo: a small GPT-style language model learns the license texts that every Debian system
 * ships (/usr/share/common-licenses), byte by byte, in several processes started by `acc launch`.
 *
 *   acc launch --num_processes 2 train_gpt [--steps N] [--accum N] [--mixed-precision no|bf16|fp16]
 *                                           [--out DIR] [--text-dir DIR] [--profile]
 *
 * --accum N accumulates gradients over N batches per optimizer step (acc_accumulate_begin/end);
 * --mixed-precision bf16 runs the forward pass under bfloat16 autocast.
 * --profile records batches 18 to 20 with LibTorch's profiler (Accelerate's profile() with ProfileKwargs):
 * one Chrome trace per process, <out>/profile/profile_<rank>.json (chrome://tracing, https://ui.perfetto.dev),
 * with libacc's phases (acc::data, acc::forward, acc::backward, acc::gradient_sync, acc::optimizer_step).
 * Each process reads its shard of every global batch; gradients are averaged across processes (DDP).
 * The main process prints progress, the validation loss is computed over exactly the validation set
 * with acc_gather_for_metrics (six times in a run and at the end), and the final weights are saved as
 * safetensors. Loss, learning rate, throughput and validation loss go to TensorBoard (log_with, under
 * <out>/gpt: `tensorboard --logdir out/demo`), the hyperparameters to its HParams dashboard.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, strdup */
#include <acc/acc.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "corpus.h"

extern char** environ;

#include "check.h"

enum { BLOCK = 64, VOCAB = 256 };

/* Runs a program (searched in PATH) with these arguments, without a shell, and waits for it: 0 when it exits with
 * status 0; otherwise says why, naming the program, and returns -1. */
static int run_program(const char* const args[]) {
  pid_t pid;
  /* posix_spawnp's argv is char* const[] for historical reasons; it does not write to the strings. */
  int err = posix_spawnp(&pid, args[0], NULL, NULL, (char* const*)args, environ);
  if (err != 0) {
    fprintf(stderr, "cannot execute '%s': %s\n", args[0], strerror(err));
    return -1;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      fprintf(stderr, "cannot wait for '%s': %s\n", args[0], strerror(errno));
      return -1;
    }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (WIFEXITED(status)) fprintf(stderr, "'%s' exited with status %d\n", args[0], WEXITSTATUS(status));
  else if (WIFSIGNALED(status)) fprintf(stderr, "'%s' killed by signal %d\n", args[0], WTERMSIG(status));
  return -1;
}

/* The step counter is saved with the checkpoints (acc_register_for_checkpointing). */
static acc_status save_step(void* step, acc_bytes_list* out) { return acc_bytes_list_append(out, step, sizeof(int)); }
static acc_status load_step(void* step, const void* data, size_t size) {
  if (size != sizeof(int)) return 1;
  memcpy(step, data, size);
  return ACC_OK;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Mean cross-entropy of each sample's next-byte predictions: logits [B, T, V], targets [B, T]. */
static void per_sample_loss(const float* logits, const int64_t* targets, int64_t B, float* out) {
  for (int64_t b = 0; b < B; ++b) {
    double sum = 0;
    for (int64_t t = 0; t < BLOCK; ++t) {
      const float* row = logits + (b * BLOCK + t) * VOCAB;
      float max = row[0];
      for (int v = 1; v < VOCAB; ++v) max = row[v] > max ? row[v] : max;
      double z = 0;
      for (int v = 0; v < VOCAB; ++v) z += exp((double)(row[v] - max));
      sum += log(z) + max - row[targets[b * BLOCK + t]];
    }
    out[b] = (float)(sum / BLOCK);
  }
}

/* The loss curves (training, and validation where it was measured) as CSV and as an SVG line chart, for
 * people who would rather see them than read them. */
static void write_curve(const char* dir, const int* steps, const double* losses, int n, const int* val_steps,
                        const double* val_losses, int val_n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/loss.csv", dir);
  FILE* csv = fopen(path, "w");
  snprintf(path, sizeof path, "%s/loss.svg", dir);
  FILE* svg = fopen(path, "w");
  if (!csv || !svg || n < 2) {
    if (csv) fclose(csv);
    if (svg) fclose(svg);
    return;
  }
  double top = 0;
  for (int i = 0; i < n; ++i) top = losses[i] > top ? losses[i] : top;
  for (int i = 0; i < val_n; ++i) top = val_losses[i] > top ? val_losses[i] : top;
  const double W = 640, H = 360, L = 50, B = 30;
  fprintf(csv, "step,loss,val_loss\n");
  fprintf(svg,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"%.0f\" y=\"20\" font-family=\"sans-serif\" font-size=\"14\"><tspan fill=\"#1f77b4\">training loss "
          "(mean over processes)</tspan>  <tspan fill=\"#ff7f0e\">validation loss</tspan></text>\n"
          "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
          "<line x1=\"%.0f\" y1=\"30\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n"
          "<text x=\"5\" y=\"35\" font-size=\"11\">%.2f</text><text x=\"5\" y=\"%.0f\" font-size=\"11\">0</text>\n"
          "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">step %d</text>\n<polyline fill=\"none\" stroke=\"#1f77b4\" "
          "stroke-width=\"2\" points=\"",
          W, H, L, L, H - B, W - 10, H - B, L, L, H - B, top, H - B, W - 80, H - 8, steps[n - 1]);
  for (int i = 0; i < n; ++i) {
    fprintf(csv, "%d,%.5f,", steps[i], losses[i]);
    for (int j = 0; j < val_n; ++j)
      if (val_steps[j] == steps[i]) fprintf(csv, "%.5f", val_losses[j]);
    fprintf(csv, "\n");
    fprintf(svg, "%.1f,%.1f ", L + (W - 10 - L) * steps[i] / steps[n - 1], (H - B) - (H - B - 30) * losses[i] / top);
  }
  fprintf(svg, "\"/>\n<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"");
  for (int j = 0; j < val_n; ++j)
    fprintf(svg, "%.1f,%.1f ", L + (W - 10 - L) * val_steps[j] / steps[n - 1],
            (H - B) - (H - B - 30) * val_losses[j] / top);
  fprintf(svg, "\"/>\n");
  for (int j = 0; j < val_n; ++j)
    fprintf(svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#ff7f0e\"/>\n",
            L + (W - 10 - L) * val_steps[j] / steps[n - 1], (H - B) - (H - B - 30) * val_losses[j] / top);
  fprintf(svg, "</svg>\n");
  fclose(csv);
  fclose(svg);
}

static double scalar(acc_tensor* t) {
  double v;
  CHECK(acc_tensor_item(t, &v));
  return v;
}

/* The validation loss: per-sample losses, gathered so that every validation sample counts exactly once
 * (a collective: every process runs it). *count is the number of samples counted. */
static double validate(acc_accelerator* acc, acc_model* model, acc_dataloader* val_dl, int64_t* count) {
  CHECK(acc_model_set_training(model, 0));
  CHECK(acc_set_grad_enabled(0, NULL)); /* torch.no_grad: evaluation records no autograd graph */
  double val_sum = 0;
  int64_t val_count = 0;
  for (;;) {
    acc_tensor *x, *y, *logits;
    int32_t has;
    CHECK(acc_dataloader_next(val_dl, &x, &y, &has));
    if (!has) break;
    CHECK(acc_model_forward(model, x, NULL, &logits, NULL));
    int64_t shape[2];
    CHECK(acc_tensor_shape(x, shape, 2));
    int64_t B = shape[0];
    float* host_logits = malloc((size_t)(B * BLOCK * VOCAB) * sizeof(float));
    int64_t* host_targets = malloc((size_t)(B * BLOCK) * sizeof(int64_t));
    float* losses = malloc((size_t)B * sizeof(float));
    CHECK(acc_tensor_to_host(logits, host_logits, (size_t)(B * BLOCK * VOCAB) * sizeof(float)));
    CHECK(acc_tensor_to_host(y, host_targets, (size_t)(B * BLOCK) * sizeof(int64_t)));
    per_sample_loss(host_logits, host_targets, B, losses);
    acc_tensor *local, *all;
    CHECK(acc_tensor_from_host(losses, (size_t)B * sizeof(float), ACC_FLOAT32, &B, 1, &local));
    CHECK(acc_gather_for_metrics(acc, local, &all));
    int64_t n;
    CHECK(acc_tensor_numel(all, &n));
    float* gathered = malloc((size_t)n * sizeof(float));
    CHECK(acc_tensor_to_host(all, gathered, (size_t)n * sizeof(float)));
    for (int64_t i = 0; i < n; ++i) val_sum += gathered[i];
    val_count += n;
    free(gathered);
    free(host_logits);
    free(host_targets);
    free(losses);
    acc_tensor_destroy(local);
    acc_tensor_destroy(all);
    acc_tensor_destroy(logits);
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
  }
  CHECK(acc_set_grad_enabled(1, NULL));
  CHECK(acc_model_set_training(model, 1));
  *count = val_count;
  return val_count ? val_sum / (double)val_count : 0;
}

int main(int argc, char** argv) {
  int steps = 1200, accum = 1;
  const char* mixed_precision = "no";
  const char* out_dir = "out/demo";
  const char* text_dir = "/usr/share/common-licenses";
  int profile = 0, bad = 0;
  for (int i = 1; i < argc && !bad; ++i) {
    if (!strcmp(argv[i], "--profile")) {
      profile = 1; /* a flag: no value */
      continue;
    }
    const char* value = i + 1 < argc ? argv[++i] : NULL;
    if (!value) bad = 1;
    else if (!strcmp(argv[i - 1], "--steps")) steps = atoi(value);
    else if (!strcmp(argv[i - 1], "--accum")) accum = atoi(value);
    else if (!strcmp(argv[i - 1], "--mixed-precision")) mixed_precision = value;
    else if (!strcmp(argv[i - 1], "--out")) out_dir = value;
    else if (!strcmp(argv[i - 1], "--text-dir")) text_dir = value;
    else bad = 1;
  }
  if (bad) {
    fprintf(stderr, "usage: train_gpt [--steps N] [--accum N] [--mixed-precision no|bf16|fp16] [--out DIR]"
                    " [--text-dir DIR] [--profile]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines appear as they are printed, also through a pipe */
  CHECK(acc_abi_check(ACC_ABI_VERSION));
  /* TensorBoard logs go to <out>/gpt (project_dir is the logging directory). Checkpoints go to
   * <out>/checkpoints/checkpoint_<i> every 100 steps (the newest two kept); a run that finds one there (it was
   * killed, or a rank died and acc launch --max_restarts started the job again) continues from it. */
  /* --profile: Accelerate's ProfileKwargs; the schedule skips 10 batches, waits 5, warms up 2 and records 3. */
  char profile_kwargs[4400];
  snprintf(profile_kwargs, sizeof profile_kwargs,
           ", \"profile_kwargs\": {\"output_trace_dir\": \"%s/profile\", \"record_shapes\": true,"
           " \"schedule_option\": {\"skip_first\": 10, \"wait\": 5, \"warmup\": 2, \"active\": 3, \"repeat\": 1}}",
           out_dir);
  char config[8800];
  snprintf(config, sizeof config,
           "{\"seed\": 1337, \"gradient_accumulation_steps\": %d, \"mixed_precision\": \"%s\", \"log_with\": "
           "\"tensorboard\","
           " \"project_dir\": \"%s\", \"project_config\": {\"automatic_checkpoint_naming\": true, \"total_limit\": 2},"
           " \"resume_from_checkpoint\": \"latest\"%s}",
           accum, mixed_precision, out_dir, profile ? profile_kwargs : "");
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(config, &acc));
  int32_t rank, world, is_main;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  CHECK(acc_is_main_process(acc, &is_main));

  /* The main process tokenizes; the others wait, then memory-map the same files. */
  char train_bin[4096], val_bin[4096], model_path[4096];
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", out_dir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", out_dir);
  snprintf(model_path, sizeof model_path, "%s/model.safetensors", out_dir);
  if (is_main) {
    const char* mkdir_args[] = {"mkdir", "-p", "--", out_dir, NULL};
    if (run_program(mkdir_args) != 0) return 1;
    size_t len;
    unsigned char* text = read_corpus(text_dir, &len);
    size_t split = len * 9 / 10;
    write_tokens(train_bin, text, split);
    write_tokens(val_bin, text + split, len - split);
    printf("corpus: %zu bytes from %s (%zu train, %zu validation); %d processes\n", len, text_dir, split, len - split,
           world);
    free(text);
  }
  CHECK(acc_wait_for_everyone(acc));

  acc_dataset *train_ds, *val_ds;
  const char* tokens = "{\"block_size\": 64, \"dtype\": \"uint16\"}";
  CHECK(acc_dataset_from_token_file(train_bin, tokens, &train_ds));
  CHECK(acc_dataset_from_token_file(val_bin, tokens, &val_ds));
  acc_dataloader *train_dl, *val_dl;
  CHECK(acc_dataloader_create(train_ds, "{\"batch_size\": 16, \"shuffle\": true, \"seed\": 1337, \"drop_last\": true}",
                              &train_dl));
  CHECK(acc_dataloader_create(val_ds, "{\"batch_size\": 32}", &val_dl));

  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 256, \"block_size\": 64, \"n_layer\": 4,"
                         " \"n_head\": 4, \"n_embd\": 128, \"dropout\": 0.0}",
                         &model));
  int64_t n_params;
  CHECK(acc_model_num_parameters(model, &n_params));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model,
                             "{\"type\": \"adamw\", \"lr\": 0.002, \"betas\": [0.9, 0.95], \"weight_decay\": 0.1}",
                             &opt));
  /* As in Accelerate, a prepared scheduler advances once per process per step: count in global steps. Warm-up 30
   * steps, a tenth of a run shorter than 300 (the scheduler wants it shorter than the run). */
  const int warmup = steps < 300 ? steps / 10 : 30;
  char sched_opts[128];
  snprintf(sched_opts, sizeof sched_opts,
           "{\"type\": \"cosine\", \"warmup_steps\": %d, \"total_steps\": %d, \"min_lr_ratio\": 0.1}", warmup * world,
           steps * world);
  acc_scheduler* sched;
  CHECK(acc_scheduler_create(opt, sched_opts, &sched));
  CHECK(acc_prepare(acc, model, opt, sched, train_dl));
  CHECK(acc_prepare(acc, NULL, NULL, NULL, val_dl));
  if (is_main)
    printf("model: GPT, %lld parameters; batch 16 x %d processes x %d accumulation x %d tokens; %d steps;"
           " mixed precision %s\n",
           (long long)n_params, world, accum, BLOCK, steps, mixed_precision);
  /* The run's hyperparameters, recorded by the trackers (TensorBoard's HParams dashboard). */
  char hparams[512];
  snprintf(hparams, sizeof hparams,
           "{\"steps\": %d, \"gradient_accumulation_steps\": %d, \"mixed_precision\": \"%s\", \"num_processes\": %d,"
           " \"batch_size\": 16, \"block_size\": %d, \"lr\": 0.002, \"weight_decay\": 0.1, \"n_layer\": 4,"
           " \"n_embd\": 128, \"parameters\": %lld}",
           steps, accum, mixed_precision, world, BLOCK, (long long)n_params);
  CHECK(acc_init_trackers(acc, "gpt", hparams, NULL));

  double t0 = now(), t_last = t0, first_loss = -1, last_loss = 0;
  int step = 0, points = 0;
  CHECK(acc_register_for_checkpointing(acc, save_step, load_step, &step, NULL));
  int32_t resumed;
  CHECK(acc_resume_from_checkpoint(acc, &resumed));
  if (resumed && is_main) printf("resumed from the checkpoint of step %d in %s/checkpoints\n", step, out_dir);
  int* curve_steps = malloc(sizeof(int) * (size_t)(steps / 25 + 2));
  double* curve_losses = malloc(sizeof(double) * (size_t)(steps / 25 + 2));
  /* The validation loss, six times in a run (at multiples of 25 steps) and at the end. */
  const int val_every = steps >= 150 ? (steps / 6 + 24) / 25 * 25 : (steps > 0 ? steps : 1);
  int val_points = 0;
  int* val_steps = malloc(sizeof(int) * (size_t)(steps / val_every + 2));
  double* val_losses = malloc(sizeof(double) * (size_t)(steps / val_every + 2));
  int64_t val_count = 0, val_len;
  CHECK(acc_dataset_length(val_ds, &val_len));
  double val_loss = 0;
  if (profile) CHECK(acc_profile_begin(acc, NULL)); /* with the accelerator's profile_kwargs */
  while (step < steps) {
    acc_tensor *x, *y;
    int32_t has;
    CHECK(acc_dataloader_next(train_dl, &x, &y, &has));
    if (!has) continue; /* end of an epoch: the next call starts the next one */
    /* One batch of the accumulation scope: the optimizer, scheduler and gradient all-reduce act only
     * on every accum-th batch (acc_sync_gradients). */
    acc_tensor* loss;
    int32_t sync;
    CHECK(acc_accumulate_begin(acc, model));
    CHECK(acc_model_forward(model, x, y, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_scheduler_step(sched));
    CHECK(acc_optimizer_zero_grad(opt));
    CHECK(acc_sync_gradients(acc, &sync));
    CHECK(acc_accumulate_end(acc, model));
    if (profile) CHECK(acc_profile_step(acc)); /* one profiler step per batch */
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
    if (!sync) {
      acc_tensor_destroy(loss);
      continue;
    }
    ++step;
    if (step % 25 == 0 || step == 1 || step == steps) {
      acc_tensor* mean;
      CHECK(acc_reduce(acc, loss, ACC_REDUCE_MEAN, &mean));
      last_loss = scalar(mean);
      if (first_loss < 0) first_loss = last_loss;
      curve_steps[points] = step;
      curve_losses[points++] = last_loss;
      acc_tensor_destroy(mean);
      double t = now();
      int span = step == 1 ? 1 : (step % 25 == 0 ? 25 : step % 25);
      double lr;
      CHECK(acc_scheduler_last_lr(sched, &lr));
      const double tokens_per_s = (double)span * 16 * BLOCK * world * accum / (t - t_last);
      if (is_main)
        printf("step %4d/%d  loss %.4f  lr %.2e  %8.0f tokens/s\n", step, steps, last_loss, lr, tokens_per_s);
      fflush(stdout);
      char values[256];
      snprintf(values, sizeof values, "{\"loss\": %.17g, \"lr\": %.17g, \"tokens_per_s\": %.17g}", last_loss, lr,
               tokens_per_s);
      CHECK(acc_log(acc, values, step)); /* written by the main process */
      t_last = t;
    }
    acc_tensor_destroy(loss);
    if (step % 100 == 0 && step < steps) CHECK(acc_save_state(acc, NULL));
    if (step % val_every == 0 || step == steps) {
      val_loss = validate(acc, model, val_dl, &val_count);
      val_steps[val_points] = step;
      val_losses[val_points++] = val_loss;
      char values[64];
      snprintf(values, sizeof values, "{\"val_loss\": %.17g}", val_loss);
      CHECK(acc_log(acc, values, step));
      if (is_main) printf("step %4d/%d  validation loss %.4f\n", step, steps, val_loss);
      t_last = now(); /* tokens/s measures training alone */
    }
  }
  CHECK(acc_end_training(acc));
  if (profile) {
    CHECK(acc_profile_end(acc)); /* writes <out>/profile/profile_<rank>.json on every process */
    if (is_main) printf("profile: %s/profile/profile_<rank>.json (chrome://tracing or ui.perfetto.dev)\n", out_dir);
  }

  if (is_main) {
    printf("validation: loss %.4f over %lld samples (the set has %lld)\n", val_loss, (long long)val_count,
           (long long)val_len);
    printf("training loss: %.4f at step %d -> %.4f at step %d, %.1f s\n", first_loss, points ? curve_steps[0] : 0,
           last_loss, steps, now() - t0);
    CHECK(acc_model_save_safetensors(model, model_path));
    write_curve(out_dir, curve_steps, curve_losses, points, val_steps, val_losses, val_points);
    printf("saved %s, and the loss curves as %s/loss.svg (and .csv); TensorBoard logs in %s/gpt\n", model_path, out_dir,
           out_dir);
    /* The run is complete: its checkpoints would only make the next run resume at the end. */
    char checkpoints[4200];
    snprintf(checkpoints, sizeof checkpoints, "%s/checkpoints", out_dir);
    const char* rm_args[] = {"rm", "-rf", "--", checkpoints, NULL};
    if (run_program(rm_args) != 0) return 1;
  }
  CHECK(acc_wait_for_everyone(acc));
  free(curve_steps);
  free(curve_losses);
  free(val_steps);
  free(val_losses);
  acc_scheduler_destroy(sched);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_dataloader_destroy(train_dl);
  acc_dataloader_destroy(val_dl);
  acc_dataset_destroy(train_ds);
  acc_dataset_destroy(val_ds);
  acc_accelerator_destroy(acc);
  return val_count == val_len ? 0 : 1;
}
