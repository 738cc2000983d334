/* Experiment trackers through the C ABI: acc_init_trackers, acc_log, acc_end_training.
 *
 *   test_trackers            checks calls and errors, and the files of a run in a temporary directory
 *   test_trackers run DIR    writes the run below into DIR (every tracker) and keeps it: for
 *                            tests/tracking/read_trackers.py (TensorBoard's reader, the MLflow client) and,
 *                            under `acc launch`, for tests/mp (only the main process writes)
 *   test_trackers names DIR VALUES...
 *                            logs each JSON object VALUES with every tracker into DIR (project "names"), one call
 *                            each, and prints each call's status (0 for ACC_OK) on a line: read_trackers.py checks
 *                            that every name libacc accepts is one MLflow and TensorBoard read back
 *   test_trackers wandb DIR  writes a W&B offline run into DIR/wandb (NaN and infinities, a non-ASCII name, steps
 *                            merged, dropped and advanced as wandb's run.log does): read_trackers.py reads it with
 *                            wandb's own reader and `wandb sync --view`
 *
 * The run: project "demo", hyperparameters {lr, batch_size, model.name, amp}, steps 0..9 logging loss and
 * lr, step 10 a text and a group of two scalars, then "final" without a step. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char* kConfig = "{\"lr\": 0.001, \"batch_size\": 32, \"model\": {\"name\": \"mlp\"}, \"amp\": false}";

static void write_run(acc_accelerator* acc) {
  CHECK(acc_init_trackers(acc, "demo", kConfig,
                          "{\"mlflow\": {\"run_name\": \"c-run\"}, \"wandb\": {\"name\": \"c-run\"}}"));
  for (int s = 0; s < 10; ++s) {
    char values[128];
    snprintf(values, sizeof values, "{\"loss\": %.17g, \"lr\": %.17g}", 1.0 / (s + 1), 0.001 * (10 - s) / 10);
    CHECK(acc_log(acc, values, s));
  }
  CHECK(acc_log(acc, "{\"note\": \"hello\", \"acc\": {\"train\": 0.5, \"val\": 0.25}}", 10));
  CHECK(acc_log(acc, "{\"final\": 1}", -1));
  CHECK(acc_end_training(acc));
}

/* The W&B run of `test_trackers wandb DIR` (read_trackers.py expects exactly this). */
static void write_wandb_run(acc_accelerator* acc) {
  CHECK(acc_init_trackers(acc, "wandb-demo",
                          "{\"lr\": 0.001, \"layers\": [1, 2], \"opt\": {\"name\": \"adamw\", \"betas\": [0.9, 0.95]}, "
                          "\"nan\": NaN}",
                          "{\"wandb\": {\"name\": \"entra\u00eenement \u2713 \u8bad\u7ec3\", \"entity\": \"team\", "
                          "\"tags\": [\"c\", \"\u00fc\"], \"notes\": \"n\", \"group\": \"g\", \"job_type\": \"train\", "
                          "\"id\": \"libacc01\", \"config\": {\"seed\": 7}}}"));
  CHECK(acc_log(acc,
                "{\"loss\": NaN, \"up\": Infinity, \"down\": -Infinity, \"ok\": true, \"none\": null, "
                "\"text\": \"\u00e9\"}",
                0));
  CHECK(acc_log(acc, "{\"loss\": 0.5}", 1));
  CHECK(acc_log(acc, "{\"extra\": 2}", 1));  /* the same row as loss */
  CHECK(acc_log(acc, "{\"late\": 3}", 0));   /* below the current step: dropped with a warning, as wandb */
  CHECK(acc_log(acc, "{\"a\": 1}", -1));     /* no step: joins step 1's row and closes it */
  CHECK(acc_log(acc, "{\"b\": 2}", -1));     /* step 2 */
  CHECK(acc_log(acc, "{\"grp\": {\"x\": 1, \"y\": NaN}}", 5));
  /* A record longer than two of the file's 32 KiB blocks: FIRST, MIDDLE and LAST chunks. */
  enum { kLong = 70000 };
  char* big = malloc(kLong + 32);
  if (!big) exit(2);
  strcpy(big, "{\"long\": \"");
  size_t at = strlen(big);
  memset(big + at, 'x', kLong);
  strcpy(big + at + kLong, "\"}");
  CHECK(acc_log(acc, big, 6));
  free(big);
  CHECK(acc_end_training(acc));
}

static int count_lines(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static int first_line(const char* path, char* buf, size_t size) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  int ok = fgets(buf, (int)size, f) != NULL;
  fclose(f);
  return ok;
}

static acc_accelerator* create(const char* json) {
  acc_accelerator* acc = NULL;
  CHECK(acc_accelerator_create(json, &acc));
  return acc;
}

/* 1 when `dir` holds exactly `n` entries whose names start with `prefix` (and nothing else when `only`). */
static int count_entries(const char* dir, const char* prefix, int n, int only) {
  DIR* d = opendir(dir);
  if (!d) return n == 0 && errno == ENOENT;
  int got = 0, other = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) ++got;
    else ++other;
  }
  closedir(d);
  return got == n && (!only || other == 0);
}

/* wandb: the options and settings it refuses (each naming the culprit, nothing written), disabled mode, and the
 * file rules: an offline run takes a new folder and a new file, never a file or folder of someone else's. */
static void check_wandb(const char* dir) {
  char json[4096], root[1024], path[2048], mine[4096];
  snprintf(root, sizeof root, "%s/w", dir);
  snprintf(json, sizeof json, "{\"log_with\": \"wandb\", \"project_dir\": \"%s\"}", root);
  acc_accelerator* acc = create(json);
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"wandb\": {\"project\": \"x\"}}"), ACC_ERR_INVALID_ARGUMENT,
             "project_name");
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"wandb\": {\"reinit\": true}}"), ACC_ERR_INVALID_ARGUMENT,
             "unknown key \"reinit\"");
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"wandb\": {\"mode\": \"online\"}}"), ACC_ERR_INVALID_ARGUMENT,
             "offline runs only");
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"wandb\": {\"mode\": \"fast\"}}"), ACC_ERR_INVALID_ARGUMENT,
             "unknown mode \"fast\"");
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"wandb\": {\"id\": \"../x\"}}"), ACC_ERR_INVALID_ARGUMENT,
             "run id \"../x\"");
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"wandb\": {\"tags\": [1]}}"), ACC_ERR_INVALID_ARGUMENT, "tags");
  EXPECT_ERR(acc_init_trackers(acc, "a#b", NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "project name \"a#b\"");
  setenv("WANDB_MODE", "online", 1);
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "from WANDB_MODE");
  setenv("WANDB_MODE", "disabled", 1); /* wandb's disabled mode: every call works, nothing is written */
  EXPECT_OK(acc_init_trackers(acc, "demo", "{\"lr\": 1}", NULL));
  EXPECT_OK(acc_log(acc, "{\"loss\": 1}", 0));
  EXPECT_OK(acc_end_training(acc));
  snprintf(path, sizeof path, "%s/wandb", root);
  EXPECT(access(path, F_OK) != 0);
  unsetenv("WANDB_MODE");
  setenv("WANDB_RESUME", "allow", 1);
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "WANDB_RESUME");
  unsetenv("WANDB_RESUME");
  EXPECT(access(path, F_OK) != 0);

  /* A run: a new folder offline-run-<time>-<id> with files/ and run-<id>.wandb; W&B's own keys are refused. */
  EXPECT_OK(acc_init_trackers(acc, "demo", "{\"lr\": 0.1}", "{\"wandb\": {\"name\": \"\u00e9t\u00e9\"}}"));
  EXPECT_ERR(acc_log(acc, "{\"_step\": 3}", 0), ACC_ERR_INVALID_ARGUMENT, "'_step'");
  EXPECT_OK(acc_log(acc, "{\"loss\": NaN, \"lr\": Infinity}", 0));
  EXPECT_OK(acc_end_training(acc));
  snprintf(path, sizeof path, "%s/wandb", root);
  EXPECT(count_entries(path, "offline-run-", 1, 1));
  /* WANDB_DIR moves the runs (wandb.init's dir), WANDB_RUN_ID names one. */
  snprintf(path, sizeof path, "%s/elsewhere", dir);
  setenv("WANDB_DIR", path, 1);
  setenv("WANDB_RUN_ID", "chosen1", 1);
  EXPECT_OK(acc_init_trackers(acc, "demo", NULL, NULL));
  EXPECT_OK(acc_end_training(acc));
  unsetenv("WANDB_DIR");
  unsetenv("WANDB_RUN_ID");
  snprintf(path, sizeof path, "%s/elsewhere/wandb", dir);
  EXPECT(count_entries(path, "offline-run-", 1, 1));

  /* The run folder of a chosen id that exists (a folder of someone else's, in this second or the next two) is
   * refused, naming it, and left as it was. */
  time_t now = time(NULL);
  for (int k = 0; k < 3; ++k) {
    time_t t = now + k;
    struct tm tm;
    char stamp[32];
    localtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d_%H%M%S", &tm);
    snprintf(path, sizeof path, "%s/wandb/offline-run-%s-taken", root, stamp);
    EXPECT(mkdir(path, 0755) == 0);
    snprintf(mine, sizeof mine, "%s/run-taken.wandb", path);
    FILE* f = fopen(mine, "w");
    EXPECT(f != NULL);
    if (f) {
      fputs("mine\n", f);
      fclose(f);
    }
  }
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"wandb\": {\"id\": \"taken\"}}"), ACC_ERR_INVALID_ARGUMENT,
             "exists");
  EXPECT(first_line(mine, path, sizeof path) && strcmp(path, "mine\n") == 0);
  snprintf(path, sizeof path, "%s/wandb", root);
  EXPECT(count_entries(path, "offline-run-", 4, 1));
  acc_accelerator_destroy(acc);

  /* `wandb` under the root that is a file of someone else's: refused, the file kept. */
  snprintf(root, sizeof root, "%s/w2", dir);
  EXPECT(mkdir(root, 0755) == 0);
  snprintf(mine, sizeof mine, "%s/wandb", root);
  FILE* f = fopen(mine, "w");
  EXPECT(f != NULL);
  if (f) {
    fputs("mine\n", f);
    fclose(f);
  }
  snprintf(json, sizeof json, "{\"log_with\": \"wandb\", \"project_dir\": \"%s\"}", root);
  acc = create(json);
  EXPECT(acc_init_trackers(acc, "demo", NULL, NULL) != ACC_OK);
  EXPECT(first_line(mine, path, sizeof path) && strcmp(path, "mine\n") == 0);
  acc_accelerator_destroy(acc);

  /* Without a logging directory, ./wandb (wandb.init's default), as Accelerate's tracker writes it. */
  char cwd[4096];
  EXPECT(getcwd(cwd, sizeof cwd) != NULL);
  snprintf(root, sizeof root, "%s/cwd", dir);
  EXPECT(mkdir(root, 0755) == 0 && chdir(root) == 0);
  acc = create("{\"log_with\": \"wandb\"}");
  EXPECT_OK(acc_init_trackers(acc, "demo", NULL, NULL));
  EXPECT_OK(acc_end_training(acc));
  acc_accelerator_destroy(acc);
  EXPECT(count_entries("wandb", "offline-run-", 1, 1));
  EXPECT(chdir(cwd) == 0);
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "run") == 0) {
    char json[4096];
    snprintf(json, sizeof json, "{\"log_with\": \"all\", \"project_dir\": \"%s\"}", argv[2]);
    acc_accelerator* acc = create(json);
    write_run(acc);
    acc_accelerator_destroy(acc);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "wandb") == 0) {
    char json[4096];
    snprintf(json, sizeof json, "{\"log_with\": \"wandb\", \"project_dir\": \"%s\"}", argv[2]);
    acc_accelerator* acc = create(json);
    write_wandb_run(acc);
    acc_accelerator_destroy(acc);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "names") == 0) {
    char json[4096];
    snprintf(json, sizeof json, "{\"log_with\": \"all\", \"project_dir\": \"%s\"}", argv[2]);
    acc_accelerator* acc = create(json);
    CHECK(acc_init_trackers(acc, "names", NULL, NULL));
    for (int i = 3; i < argc; ++i) printf("%d\n", (int)acc_log(acc, argv[i], i));
    CHECK(acc_end_training(acc));
    acc_accelerator_destroy(acc);
    return 0;
  }

  char tmpl[] = "/tmp/acc_trackers_XXXXXX";
  char* dir = mkdtemp(tmpl);
  if (!dir) return 2;
  char json[4096], path[4096], line[512];
  acc_accelerator* acc = NULL;

  /* log_with: a tracker libacc lacks is refused; one that needs a directory needs one. */
  EXPECT_ERR(acc_accelerator_create("{\"log_with\": [\"comet_ml\"]}", &acc), ACC_ERR_UNSUPPORTED, "\"comet_ml\"");
  EXPECT(acc == NULL);
  EXPECT_ERR(acc_accelerator_create("{\"log_with\": [\"tensorboard\"]}", &acc), ACC_ERR_INVALID_CONFIG,
             "requires a logging directory");
  EXPECT_ERR(acc_accelerator_create("{\"log_with\": \"nope\"}", &acc), ACC_ERR_INVALID_CONFIG, "log_with");

  /* Without log_with every call is a no-op (arguments are still checked). */
  acc = create("{}");
  EXPECT_OK(acc_init_trackers(acc, "p", NULL, NULL));
  EXPECT_OK(acc_log(acc, "{\"loss\": 1}", 0));
  EXPECT_ERR(acc_log(acc, "{\"loss\": [1]}", 0), ACC_ERR_INVALID_ARGUMENT, "'loss' is a list");
  EXPECT_ERR(acc_init_trackers(acc, NULL, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "project_name");
  EXPECT_OK(acc_end_training(acc));
  acc_accelerator_destroy(acc);

  /* Every tracker, under project_dir. */
  snprintf(json, sizeof json,
           "{\"log_with\": [\"tensorboard\", \"jsonl\", \"csv\", \"mlflow\"], \"project_dir\": \"%s\"}", dir);
  acc = create(json);
  EXPECT_ERR(acc_log(acc, "{\"loss\": 1}", 0), ACC_ERR_INVALID_STATE, "init_trackers first");
  EXPECT_ERR(acc_init_trackers(acc, "demo", "[1]", NULL), ACC_ERR_INVALID_ARGUMENT, "JSON object");
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, "{\"tensorboard\": {\"flush_secs\": 1}}"), ACC_ERR_INVALID_ARGUMENT,
             "unknown key \"flush_secs\"");
  EXPECT_ERR(acc_init_trackers(acc, "a/b", NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "plain name");
  EXPECT_OK(acc_init_trackers(acc, "demo", kConfig, NULL));
  EXPECT_ERR(acc_init_trackers(acc, "demo", NULL, NULL), ACC_ERR_INVALID_STATE, "end_training");
  EXPECT_OK(acc_log(acc, "{\"loss\": 0.5, \"lr\": 0.001}", 1));
  EXPECT_OK(acc_log(acc, "{\"loss\": NaN, \"note\": \"diverged\", \"lr\": -Infinity}", 2));
  EXPECT_ERR(acc_log(acc, "{\"loss\": ", 3), ACC_ERR_INVALID_ARGUMENT, "malformed JSON");
  /* As every JSON libacc reads: two values for one key (some readers take the first, Python the last), or text
   * after the document, are refused rather than half-read. */
  EXPECT_ERR(acc_log(acc, "{\"loss\": 1, \"loss\": 2}", 3), ACC_ERR_INVALID_ARGUMENT, "loss");
  EXPECT_ERR(acc_log(acc, "{\"loss\": 1} {\"lr\": 2}", 3), ACC_ERR_INVALID_ARGUMENT, "malformed JSON");
  EXPECT_ERR(acc_log(acc, NULL, 3), ACC_ERR_INVALID_ARGUMENT, "values_json");
  EXPECT_ERR(acc_log(acc, "{\"bad*name\": 1}", 3), ACC_ERR_INVALID_ARGUMENT, "mlflow");
  /* Names from the data that become paths stay inside the run's folder (issue 23): an add_scalars member that
   * would leave it is refused naming the metric, for every tracker alike (nothing is written), and so is a name
   * MLflow's client would refuse to read back. */
  char escaped[256], values[512];
  snprintf(escaped, sizeof escaped, "/tmp/acc_trackers_escape_%d", (int)getpid());
  snprintf(values, sizeof values, "{\"acc\": {\"/../../..%s\": 1}}", escaped + 4);
  EXPECT_ERR(acc_log(acc, values, 3), ACC_ERR_INVALID_ARGUMENT, "'acc'");
  EXPECT(access(escaped, F_OK) != 0);
  EXPECT_ERR(acc_log(acc, "{\"..x\": 1}", 3), ACC_ERR_INVALID_ARGUMENT, "'..x'");
  EXPECT_OK(acc_log(acc, "{\"loss\": 0.25}", -1));
  EXPECT_OK(acc_end_training(acc));
  EXPECT_ERR(acc_log(acc, "{\"loss\": 1}", 4), ACC_ERR_INVALID_STATE, "end_training");
  EXPECT_OK(acc_end_training(acc));
  /* A second run after end_training appends to the same files (a resumed run). */
  EXPECT_OK(acc_init_trackers(acc, "demo", NULL, NULL));
  EXPECT_OK(acc_log(acc, "{\"loss\": 0.125}", 5));
  acc_accelerator_destroy(acc); /* finishes the trackers */

  snprintf(path, sizeof path, "%s/demo/metrics.jsonl", dir);
  EXPECT(count_lines(path) == 4);
  EXPECT(first_line(path, line, sizeof line) && strstr(line, "{\"step\": 1, \"time\": ") == line &&
         strstr(line, "\"values\": {\"loss\": 0.5, \"lr\": 0.001}}"));
  snprintf(path, sizeof path, "%s/demo/metrics.csv", dir);
  EXPECT(count_lines(path) == 5);
  EXPECT(first_line(path, line, sizeof line) && strcmp(line, "step,time,loss,lr,note\n") == 0);
  snprintf(path, sizeof path, "%s/demo/hparams.json", dir);
  EXPECT(first_line(path, line, sizeof line) &&
         strcmp(line, "{\"lr\": 0.001, \"batch_size\": 32, \"model.name\": \"mlp\", \"amp\": false}\n") == 0);
  snprintf(path, sizeof path, "%s/mlruns/0/meta.yaml", dir);
  EXPECT(access(path, R_OK) == 0);
  snprintf(path, sizeof path, "%s/acc_run_config.json", dir);
  EXPECT(access(path, R_OK) == 0);

  check_wandb(dir);

  snprintf(path, sizeof path, "rm -rf '%s' '%s'", dir, escaped);
  if (system(path) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return finish();
}
