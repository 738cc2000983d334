/* Single-process tests of acc_save_state / acc_load_state: the files of docs/checkpoints.md, a round trip
 * into fresh objects, and bad input (a missing, truncated or foreign checkpoint, another model, a wrong
 * number of registered objects, an unwritable directory), each with an error naming the file or the key,
 * leaving the previous checkpoint intact. Exact resume with real processes is tests/mp/mp_checkpoint.c. */
#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static int64_t g_value = 7;

static acc_status save_value(void* user, acc_bytes_list* out) {
  (void)user;
  return acc_bytes_list_append(out, &g_value, sizeof g_value);
}
static acc_status load_value(void* user, const void* data, size_t size) {
  (void)user;
  if (size != sizeof g_value) return 3;
  memcpy(&g_value, data, size);
  return ACC_OK;
}

struct run {
  acc_accelerator* acc;
  acc_model* model;
  acc_optimizer* opt;
  acc_scheduler* sched;
};

/* An MLP with AdamW and a schedule, prepared; `steps` training steps on fixed data. */
static struct run make_run_with(const char* config, const char* model_json, int steps, int registered) {
  struct run r;
  EXPECT_OK(acc_accelerator_create(config, &r.acc));
  EXPECT_OK(acc_model_create(model_json, &r.model));
  EXPECT_OK(acc_optimizer_create(r.model, "{\"type\": \"adamw\", \"lr\": 0.01}", &r.opt));
  EXPECT_OK(acc_scheduler_create(r.opt, "{\"type\": \"linear\", \"total_steps\": 20}", &r.sched));
  EXPECT_OK(acc_prepare(r.acc, r.model, r.opt, r.sched, NULL));
  for (int i = 0; i < registered; ++i)
    EXPECT_OK(acc_register_for_checkpointing(r.acc, save_value, load_value, NULL, NULL));
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[4] = {1, 0, 1, 0};
  int64_t xs[2] = {4, 2}, ys[2] = {4, 1};
  acc_tensor *tx, *ty;
  EXPECT_OK(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx));
  EXPECT_OK(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty));
  for (int s = 0; s < steps; ++s) {
    acc_tensor* loss = NULL;
    EXPECT_OK(acc_model_forward(r.model, tx, ty, NULL, &loss));
    EXPECT_OK(acc_backward(r.acc, loss));
    EXPECT_OK(acc_optimizer_step(r.opt));
    EXPECT_OK(acc_scheduler_step(r.sched));
    EXPECT_OK(acc_optimizer_zero_grad(r.opt));
    acc_tensor_destroy(loss);
  }
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  return r;
}

static struct run make_run(const char* model_json, int steps, int registered) {
  return make_run_with("{\"seed\": 3}", model_json, steps, registered);
}

static void end_run(struct run r) {
  acc_scheduler_destroy(r.sched);
  acc_optimizer_destroy(r.opt);
  acc_model_destroy(r.model);
  acc_accelerator_destroy(r.acc);
}

/* The model's first state tensor as floats. */
static void first_weights(acc_model* m, float* out, size_t n) {
  acc_tensor* t;
  const char* name;
  EXPECT_OK(acc_model_state_get(m, 0, &name, &t));
  EXPECT_OK(acc_tensor_to_host(t, out, n * sizeof(float)));
  acc_tensor_destroy(t);
}

static int exists(const char* dir, const char* file) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  struct stat st;
  return stat(path, &st) == 0;
}

/* Runs a shell command made from `fmt` with `path` in every %s (the test's own temporary paths). */
static void sh(const char* fmt, const char* path) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, fmt, path, path, path);
  EXPECT(system(cmd) == 0);
}

/* The whole content of a small file, or "" when missing. */
static const char* slurp(const char* dir, const char* file) {
  static char buf[4096];
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE* f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = '\0';
  if (f) fclose(f);
  return buf;
}

static void write_text(const char* dir, const char* file, const char* text) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE* f = fopen(path, "w");
  EXPECT(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* One of two jobs saving with automatic names into one project at once (this program run with "--job ID
 * PROJECT"): its own model size and registered bytes, 8 saves; exits with the number that returned ACC_OK. */
static int g_job;
static acc_status save_job(void* user, acc_bytes_list* out) {
  (void)user;
  return acc_bytes_list_append(out, &g_job, sizeof g_job);
}
static acc_status load_job(void* user, const void* data, size_t size) {
  (void)user, (void)data, (void)size;
  return ACC_OK;
}
static int run_job(int id, const char* project) {
  g_job = id;
  char config[700];
  snprintf(config, sizeof config,
           "{\"seed\": 3, \"project_config\": {\"project_dir\": \"%s\", \"automatic_checkpoint_naming\": true}}",
           project);
  struct run r = make_run_with(config,
                               id == 1 ? "{\"type\": \"mlp\", \"sizes\": [2, 8, 1]}"
                                       : "{\"type\": \"mlp\", \"sizes\": [2, 64, 1]}",
                               0, 0);
  CHECK(acc_register_for_checkpointing(r.acc, save_job, load_job, NULL, NULL));
  int ok = 0;
  for (int i = 0; i < 8; ++i) ok += acc_save_state(r.acc, NULL) == ACC_OK;
  end_run(r);
  return ok;
}

/* Two jobs at once into one project: no checkpoint mixes their files, and each ACC_OK is a checkpoint that
 * holds that job's files (the loser of a name gets an error). */
static void two_jobs_one_project(const char* self, const char* root) {
  char project[600], ckdir[700], one[800];
  snprintf(project, sizeof project, "%s/shared", root);
  pid_t pids[2];
  for (int j = 0; j < 2; ++j) {
    char id[2] = {(char)('1' + j), 0};
    char* argv[] = {(char*)self, "--job", id, project, NULL};
    EXPECT(posix_spawn(&pids[j], self, NULL, NULL, argv, NULL) == 0);
  }
  int ok[2] = {0, 0};
  for (int j = 0; j < 2; ++j) {
    int status = 0;
    waitpid(pids[j], &status, 0);
    EXPECT(WIFEXITED(status));
    ok[j] = WEXITSTATUS(status);
  }
  int holds[2] = {0, 0};
  snprintf(ckdir, sizeof ckdir, "%s/checkpoints", project);
  for (int n = 0; n < 16; ++n) {
    snprintf(one, sizeof one, "%s/checkpoint_%d", ckdir, n);
    if (!exists(one, "manifest.json")) continue;
    int job = 0;
    memcpy(&job, slurp(one, "custom_checkpoint_0.bin"), sizeof job);
    /* The model's file is the same job's: job 2's is eight times larger. */
    char path[1000];
    snprintf(path, sizeof path, "%s/model.safetensors", one);
    struct stat st;
    EXPECT(stat(path, &st) == 0 && (job == 1 || job == 2) && (job == 2) == (st.st_size > 1000));
    if (job == 1 || job == 2) ++holds[job - 1];
  }
  EXPECT(ok[0] + ok[1] >= 1 && ok[0] == holds[0] && ok[1] == holds[1]);
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "--job") == 0) return run_job(atoi(argv[2]), argv[3]);
  char root[] = "/tmp/acc-ckpt-XXXXXX";
  if (!mkdtemp(root)) return 1;
  char dir[512], copy[512];
  snprintf(dir, sizeof dir, "%s/ckpt", root);
  snprintf(copy, sizeof copy, "%s/copy", root);
  const char* mlp = "{\"type\": \"mlp\", \"sizes\": [2, 8, 1]}";

  /* Save: the documented files, complete, nothing staged left behind. */
  struct run a = make_run(mlp, 5, 1);
  EXPECT_OK(acc_save_state(a.acc, dir));
  const char* files[] = {"manifest.json",          "model.safetensors",      "optimizer.safetensors",
                         "optimizer.json",         "scheduler.json",         "random_states_0.safetensors",
                         "accelerator_state.json", "custom_checkpoint_0.bin"};
  for (size_t i = 0; i < sizeof files / sizeof *files; ++i) EXPECT(exists(dir, files[i]));
  EXPECT(!exists(root, ".ckpt.acc-staging"));
  float wa[16], wb[16];
  first_weights(a.model, wa, 16);
  double lr_a, lr_b;
  EXPECT_OK(acc_optimizer_lr(a.opt, &lr_a));

  /* Load into a fresh run: the weights, the learning rate and the registered object come back. */
  g_value = 0;
  struct run b = make_run(mlp, 0, 1);
  EXPECT_OK(acc_load_state(b.acc, dir));
  first_weights(b.model, wb, 16);
  EXPECT(memcmp(wa, wb, sizeof wa) == 0);
  EXPECT_OK(acc_optimizer_lr(b.opt, &lr_b));
  EXPECT(lr_a == lr_b);
  EXPECT(g_value == 7);
  /* Saving again over it replaces it whole. */
  EXPECT_OK(acc_save_state(b.acc, dir));
  EXPECT(exists(dir, "manifest.json") && !exists(root, ".ckpt.acc-staging"));

  /* Bad input, each naming what is wrong. */
  EXPECT_ERR(acc_load_state(b.acc, "/nonexistent/ckpt"), ACC_ERR_IO, "/nonexistent/ckpt");
  EXPECT_ERR(acc_load_state(b.acc, NULL), ACC_ERR_INVALID_ARGUMENT, "dir");
  EXPECT_ERR(acc_save_state(NULL, dir), ACC_ERR_INVALID_ARGUMENT, "accelerator");
  sh("cp -r %s/ckpt %s/copy && rm %s/copy/manifest.json", root);
  EXPECT_ERR(acc_load_state(b.acc, copy), ACC_ERR_IO, "manifest.json");
  sh("rm -r %s/copy && cp -r %s/ckpt %s/copy", root);
  sh("truncate -s 100 %s/copy/optimizer.safetensors", root);
  EXPECT_ERR(acc_load_state(b.acc, copy), ACC_ERR_IO, "optimizer.safetensors");
  /* A foreign directory: files, but not a libacc checkpoint. */
  sh("rm -r %s/copy && mkdir %s/copy && echo '{\"format\": \"other\", \"version\": 1}' > %s/copy/manifest.json", root);
  EXPECT_ERR(acc_load_state(b.acc, copy), ACC_ERR_INVALID_ARGUMENT, "not a libacc checkpoint");

  /* A folder of the user's: the checkpoint goes into it and every file of theirs stays (as Accelerate's). */
  char mine[600], mine2[600], afile[600], slashed[600];
  snprintf(mine, sizeof mine, "%s/outputs", root);
  snprintf(mine2, sizeof mine2, "%s/outputs2", root);
  snprintf(afile, sizeof afile, "%s/afile", root);
  snprintf(slashed, sizeof slashed, "%s/slashed/", root);
  sh("mkdir -p %s/outputs/sub && echo notes > %s/outputs/notes.txt && echo r > %s/outputs/sub/results.csv", root);
  for (int again = 0; again < 2; ++again) { /* the second save replaces its own files only */
    EXPECT_OK(acc_save_state(a.acc, mine));
    EXPECT(strcmp(slurp(mine, "notes.txt"), "notes\n") == 0 && exists(mine, "sub/results.csv"));
    EXPECT(exists(mine, "manifest.json") && !exists(root, ".outputs.acc-staging"));
    EXPECT_OK(acc_load_state(b.acc, mine));
  }
  /* A file of the user's under a checkpoint file's name: refused, naming it, and nothing changes. */
  sh("mkdir %s/outputs2 && echo precious > %s/outputs2/model.safetensors", root);
  EXPECT_ERR(acc_save_state(a.acc, mine2), ACC_ERR_IO, "model.safetensors");
  EXPECT(strcmp(slurp(mine2, "model.safetensors"), "precious\n") == 0 && !exists(mine2, "manifest.json"));
  EXPECT(!exists(root, ".outputs2.acc-staging"));
  /* A regular file is not replaced by a folder. */
  write_text(root, "afile", "data");
  EXPECT_ERR(acc_save_state(a.acc, afile), ACC_ERR_IO, "afile");
  EXPECT(strcmp(slurp(root, "afile"), "data") == 0);
  /* "dir/" is the folder dir. */
  EXPECT_OK(acc_save_state(a.acc, slashed));
  EXPECT(exists(root, "slashed/manifest.json") && !exists(root, "slashed/.tmp"));
  EXPECT_OK(acc_load_state(b.acc, slashed));
  /* Folders beside the checkpoint are the user's, whatever their names; the staging folder's name is libacc's own:
   * one left by a killed save (its lock file there or not yet, held by nobody) is emptied and reused. */
  sh("mkdir %s/ckpt.tmp %s/ckpt.old && echo x > %s/ckpt.tmp/x", root);
  sh("mkdir %s/.ckpt.acc-staging && touch %s/.ckpt.acc-staging/.acc-staging-lock %s/.ckpt.acc-staging/half", root);
  EXPECT_OK(acc_save_state(a.acc, dir));
  EXPECT(exists(root, "ckpt.tmp/x") && exists(root, "ckpt.old") && !exists(root, ".ckpt.acc-staging"));
  sh("mkdir %s/.ckpt.acc-staging && echo half > %s/.ckpt.acc-staging/model.safetensors", root);
  EXPECT_OK(acc_save_state(a.acc, dir));
  EXPECT(!exists(root, ".ckpt.acc-staging") && exists(dir, "manifest.json"));
  /* A manifest naming files outside its folder: refused by name, nothing outside is looked at. */
  sh("rm -rf %s/copy && cp -r %s/ckpt %s/copy", root);
  sh("sed -i 's/\"scheduler.json\"/\"..\\/afile\"/' %s/copy/manifest.json", root);
  EXPECT_ERR(acc_load_state(b.acc, copy), ACC_ERR_IO, "../afile");

  /* Another model: the name and shape are named, nothing changes. */
  struct run c = make_run("{\"type\": \"mlp\", \"sizes\": [2, 4, 1]}", 0, 1);
  float wc[8], wc2[8];
  first_weights(c.model, wc, 8);
  EXPECT_ERR(acc_load_state(c.acc, dir), ACC_ERR_INVALID_ARGUMENT, "layers.0.weight");
  first_weights(c.model, wc2, 8);
  EXPECT(memcmp(wc, wc2, sizeof wc) == 0);
  /* A different number of registered objects. */
  struct run d = make_run(mlp, 0, 2);
  EXPECT_ERR(acc_load_state(d.acc, dir), ACC_ERR_INVALID_ARGUMENT, "registered objects");

  /* An unwritable place: the error names it, the previous checkpoint stays complete and loadable. */
  char blocker[512], inside[600];
  snprintf(blocker, sizeof blocker, "%s/file", root);
  FILE* f = fopen(blocker, "w");
  if (f) fclose(f);
  snprintf(inside, sizeof inside, "%s/ckpt", blocker);
  EXPECT_ERR(acc_save_state(a.acc, inside), ACC_ERR_IO, blocker);
  EXPECT_OK(acc_load_state(b.acc, dir));
  /* A full disk, as a file-size limit: writes fail with EFBIG (SIGXFSZ ignored) like ENOSPC; the error
   * names the file, and the previous checkpoint under the same name stays complete and loadable. */
  struct rlimit old_limit, small = {4096, 4096};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  small.rlim_max = old_limit.rlim_max;
  signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &small);
  acc_status full_disk = acc_save_state(a.acc, dir);
  const char* full_msg = acc_last_error_message();
  EXPECT(full_disk == ACC_ERR_IO && strstr(full_msg, ".safetensors") && strstr(full_msg, "File too large"));
  setrlimit(RLIMIT_FSIZE, &old_limit);
  EXPECT(exists(dir, "manifest.json"));
  EXPECT_OK(acc_load_state(b.acc, dir));
  EXPECT(!exists(root, ".ckpt.acc-staging")); /* the failed save left nothing behind */
  EXPECT_OK(acc_save_state(a.acc, dir));

  /* ProjectConfiguration: automatic names, total_limit, the newest complete checkpoint loaded. */
  char config[700], auto_dir[600];
  snprintf(config, sizeof config,
           "{\"seed\": 3, \"project_config\": {\"project_dir\": \"%s/project\", \"automatic_checkpoint_naming\": true, "
           "\"total_limit\": 2}}",
           root);
  struct run e = make_run_with(config, mlp, 1, 0);
  EXPECT_ERR(acc_load_state(e.acc, NULL), ACC_ERR_IO, "no complete checkpoint");
  for (int i = 0; i < 3; ++i) EXPECT_OK(acc_save_state(e.acc, NULL));
  snprintf(auto_dir, sizeof auto_dir, "%s/project/checkpoints", root);
  EXPECT(!exists(auto_dir, "checkpoint_0") && exists(auto_dir, "checkpoint_1/manifest.json") &&
         exists(auto_dir, "checkpoint_2/manifest.json"));
  /* The user's folders beside them are not checkpoints of this numbering: a folder without manifest, names that
   * only start like one, and a complete checkpoint copied under another name. None is loaded or removed. */
  sh("mkdir -p %s/project/checkpoints/checkpoint_9 %s/project/checkpoints/checkpoint_7_notes "
     "%s/project/checkpoints/checkpoint_3.bak",
     root);
  sh("mkdir -p %s/project/checkpoints/checkpoint_12-best && cp -r %s/project/checkpoints/checkpoint_1 "
     "%s/project/checkpoints/checkpoint_1_best",
     root);
  struct run g = make_run_with(config, mlp, 0, 0);
  EXPECT_OK(acc_load_state(g.acc, NULL)); /* checkpoint_2, not the partial checkpoint_9 */
  float we[16], wg[16];
  first_weights(e.model, we, 16);
  first_weights(g.model, wg, 16);
  EXPECT(memcmp(we, wg, sizeof we) == 0);
  EXPECT_OK(acc_save_state(g.acc, NULL)); /* continues after the one loaded: checkpoint_3 */
  EXPECT(exists(auto_dir, "checkpoint_3/manifest.json") && !exists(auto_dir, "checkpoint_1"));
  EXPECT(exists(auto_dir, "checkpoint_9") && exists(auto_dir, "checkpoint_7_notes") &&
         exists(auto_dir, "checkpoint_3.bak") && exists(auto_dir, "checkpoint_12-best") &&
         exists(auto_dir, "checkpoint_1_best/manifest.json"));
  /* total_limit removes only a checkpoint's own files: the user's note in it stays, with its folder. */
  write_text(auto_dir, "checkpoint_2/notes.txt", "mine");
  EXPECT_OK(acc_save_state(g.acc, NULL)); /* checkpoint_4; checkpoint_2 goes */
  EXPECT(strcmp(slurp(auto_dir, "checkpoint_2/notes.txt"), "mine") == 0 &&
         !exists(auto_dir, "checkpoint_2/manifest.json") && !exists(auto_dir, "checkpoint_2/model.safetensors"));
  /* A number taken by a folder of the user's is refused, as Accelerate refuses it, and the folder is untouched. */
  sh("mkdir -p %s/project/checkpoints/checkpoint_5 && echo keep > %s/project/checkpoints/checkpoint_5/x", root);
  EXPECT_ERR(acc_save_state(g.acc, NULL), ACC_ERR_INVALID_ARGUMENT, "checkpoint_5");
  EXPECT(strcmp(slurp(auto_dir, "checkpoint_5/x"), "keep\n") == 0);
  /* total_limit removes old checkpoints only once the new one is complete: a save that fails (a full disk, as a
   * file-size limit) leaves both that total_limit keeps. */
  sh("rm -r %s/project/checkpoints/checkpoint_5", root);
  setrlimit(RLIMIT_FSIZE, &small);
  EXPECT(acc_save_state(g.acc, NULL) == ACC_ERR_IO);
  setrlimit(RLIMIT_FSIZE, &old_limit);
  EXPECT(exists(auto_dir, "checkpoint_3/manifest.json") && exists(auto_dir, "checkpoint_4/manifest.json") &&
         !exists(auto_dir, "checkpoint_5"));
  EXPECT_ERR(acc_save_state(a.acc, NULL), ACC_ERR_INVALID_ARGUMENT, "automatic_checkpoint_naming");
  end_run(e);
  end_run(g);

  two_jobs_one_project(argv[0], root);

  end_run(a);
  end_run(b);
  end_run(c);
  end_run(d);
  sh("rm -rf %s", root);
  return finish();
}
