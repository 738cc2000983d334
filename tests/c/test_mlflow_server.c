/* The mlflow tracker with a tracking server, through the C ABI: tests/tracking/mlflow_server.py starts a real
 * `mlflow server` on a loopback port, runs these modes against it and reads the runs back with MLflow's own client.
 *
 *   test_mlflow_server log URI|-     a run of project "server-demo" (URI in init_kwargs.mlflow.tracking_uri, or "-"
 *                                    for MLFLOW_TRACKING_URI): 155 hyperparameters (two requests of params), steps
 *                                    0..9 of loss and lr, 1500 metrics in one call at step 10 (two requests), NaN and
 *                                    the infinities at step 11, a text (skipped), a boolean, "final" without a step
 *   test_mlflow_server resume        with MLFLOW_RUN_ID: the run continues (loss at step 20), ends, and a second
 *                                    init_trackers that changes a parameter is refused by the server: that run ends
 *                                    FAILED
 *   test_mlflow_server unreachable URI
 *                                    init_trackers fails with ACC_ERR_IO naming the URL
 *   test_mlflow_server unknown-run ID
 *                                    with MLFLOW_RUN_ID=ID, a run the server does not have: ACC_ERR_INVALID_ARGUMENT
 *
 * Each mode prints "N passed, N failed" and exits 1 on a failure. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

static char g_config[16384];

static void make_config(void) {
  /* 4 named values, 150 numbered ones, and one longer than MLflow's 6000 characters (skipped with a warning). */
  int n = snprintf(g_config, sizeof g_config,
                   "{\"lr\": 0.001, \"batch_size\": 32, \"model\": {\"name\": \"mlp\"}, "
                   "\"amp\": false");
  for (int i = 0; i < 150; ++i) n += snprintf(g_config + n, sizeof g_config - (size_t)n, ", \"p%03d\": %d", i, i);
  n += snprintf(g_config + n, sizeof g_config - (size_t)n, ", \"long\": \"");
  for (int i = 0; i < 6001; ++i) g_config[n++] = 'x';
  snprintf(g_config + n, sizeof g_config - (size_t)n, "\"}");
}

static acc_accelerator* create(void) {
  acc_accelerator* acc = NULL;
  CHECK(acc_accelerator_create("{\"log_with\": \"mlflow\"}", &acc));
  return acc;
}

static void log_run(const char* uri) {
  char kwargs[1024];
  snprintf(kwargs, sizeof kwargs,
           "{\"mlflow\": {\"run_name\": \"server-run\", \"tags\": {\"team\": \"acc\"}, "
           "\"description\": \"libacc through MLflow's REST API\"%s%s%s}}",
           uri ? ", \"tracking_uri\": \"" : "", uri ? uri : "", uri ? "\"" : "");
  acc_accelerator* acc = create();
  EXPECT_OK(acc_init_trackers(acc, "server-demo", g_config, kwargs));
  for (int s = 0; s < 10; ++s) {
    char values[128];
    snprintf(values, sizeof values, "{\"loss\": %.17g, \"lr\": %.17g}", 1.0 / (s + 1), 0.001 * (10 - s) / 10);
    EXPECT_OK(acc_log(acc, values, s));
  }
  /* More metrics in one call than one log-batch request may hold (1000). */
  static char many[65536];
  int n = snprintf(many, sizeof many, "{");
  for (int i = 0; i < 1500; ++i)
    n += snprintf(many + n, sizeof many - (size_t)n, "%s\"m/%04d\": %d", i ? ", " : "", i, i);
  snprintf(many + n, sizeof many - (size_t)n, "}");
  EXPECT_OK(acc_log(acc, many, 10));
  EXPECT_OK(acc_log(acc, "{\"nan\": NaN, \"inf\": Infinity, \"ninf\": -Infinity, \"note\": \"text\", \"flag\": true}",
                    11));
  /* A name MLflow refuses fails before anything is sent. */
  EXPECT_ERR(acc_log(acc, "{\"bad*name\": 1}", 12), ACC_ERR_INVALID_ARGUMENT, "bad*name");
  EXPECT_OK(acc_log(acc, "{\"final\": 1}", -1));
  EXPECT_OK(acc_end_training(acc));
  acc_accelerator_destroy(acc);
}

static void resume(void) {
  acc_accelerator* acc = create();
  EXPECT_OK(acc_init_trackers(acc, "server-demo", g_config, NULL));
  EXPECT_OK(acc_log(acc, "{\"loss\": 0.05}", 20));
  EXPECT_OK(acc_end_training(acc));
  /* MLflow does not let a parameter change: the server's message comes back, and the run it reopened ends FAILED. */
  EXPECT_ERR(acc_init_trackers(acc, "server-demo", "{\"lr\": 0.5}", NULL), ACC_ERR_INVALID_ARGUMENT,
             "Changing param values is not allowed");
  acc_accelerator_destroy(acc);
}

int main(int argc, char** argv) {
  make_config();
  if (argc == 3 && strcmp(argv[1], "log") == 0) {
    log_run(strcmp(argv[2], "-") == 0 ? NULL : argv[2]);
  } else if (argc == 2 && strcmp(argv[1], "resume") == 0) {
    resume();
  } else if (argc == 3 && strcmp(argv[1], "unreachable") == 0) {
    char kwargs[1024];
    snprintf(kwargs, sizeof kwargs, "{\"mlflow\": {\"tracking_uri\": \"%s\"}}", argv[2]);
    acc_accelerator* acc = create();
    EXPECT_ERR(acc_init_trackers(acc, "server-demo", NULL, kwargs), ACC_ERR_IO, argv[2]);
    printf("%s\n", acc_last_error_message());
    EXPECT_ERR(acc_log(acc, "{\"loss\": 1}", 0), ACC_ERR_INVALID_STATE, "init_trackers");
    acc_accelerator_destroy(acc);
  } else if (argc == 3 && strcmp(argv[1], "unknown-run") == 0) {
    acc_accelerator* acc = create();
    EXPECT_ERR(acc_init_trackers(acc, "server-demo", NULL, NULL), ACC_ERR_INVALID_ARGUMENT, argv[2]);
    acc_accelerator_destroy(acc);
  } else {
    fprintf(stderr, "usage: test_mlflow_server log URI|- | resume | unreachable URI | unknown-run ID\n");
    return 2;
  }
  return finish();
}
