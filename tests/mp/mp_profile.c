/* Profiling (acc_profile_begin / _step / _end), started by `acc launch`. Usage: mp_profile MODE [args]
 *   train STEPS CONFIG_JSON [PROFILE_KWARGS_JSON]  trains an MLP for STEPS steps inside one profile, ending each step
 *                                                  with acc_profile_step; the profile is the accelerator's
 *                                                  profile_kwargs (CONFIG_JSON), or PROFILE_KWARGS_JSON when given
 *   torchscript PATH OUT FLAG                      one forward and backward of a TorchScript module inside a
 *                                                  profile with with_stack and with_modules FLAG (0 or 1)
 *   refuse                                         bad keys, values and call orders are refused by name
 *   exit end|running|thread                        a profile that records nothing, then the process ends: the
 *                                                  profile ended (end), left running on the main thread (running),
 *                                                  or left running on a second thread that returns (thread); the
 *                                                  process must exit 0 (issue 36: it aborted at exit)
 *   trace DIR ok|io                                one profile written to output_trace_dir DIR: acc_profile_end
 *                                                  returns ACC_OK, or ACC_ERR_IO naming DIR/profile_<rank>.json
 * Prints "N passed, N failed"; exits non-zero on any failed check. */
#include <acc/acc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mp_common.h"

static void train(int steps, const char* config, const char* profile_kwargs) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(config, &acc));
  struct loader data = regression_loader(256, "{\"batch_size\": 4}");
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [3, 16, 1], \"activation\": \"tanh\"}", &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, data.dl));
  CHECK(acc_profile_begin(acc, profile_kwargs));
  for (int step = 0; step < steps; ++step) {
    const int has = train_step(acc, model, opt, data.dl);
    EXPECT(has);
    if (!has) break;
    CHECK(acc_profile_step(acc));
  }
  CHECK(acc_profile_end(acc));
  EXPECT_ERR(acc_profile_end(acc), ACC_ERR_INVALID_STATE, "no profile is running");
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  loader_destroy(&data);
  acc_accelerator_destroy(acc);
}

static void torchscript(const char* path, const char* out, int flag) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(NULL, &acc));
  acc_model* model;
  CHECK(acc_model_load_torchscript(path, "{\"loss\": \"mse\"}", &model));
  CHECK(acc_prepare(acc, model, NULL, NULL, NULL));
  float x[6] = {1, 2, 3, 4, 5, 6}, y[2] = {1, 2};
  int64_t xs[2] = {2, 3}, ys[2] = {2, 1};
  acc_tensor *tx, *ty, *loss;
  CHECK(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx));
  CHECK(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty));
  char kwargs[4200];
  snprintf(kwargs, sizeof kwargs, "{\"output_trace_dir\": \"%s\", \"with_stack\": %s, \"with_modules\": %s}", out,
           flag ? "true" : "false", flag ? "true" : "false");
  CHECK(acc_profile_begin(acc, kwargs));
  CHECK(acc_model_forward(model, tx, ty, NULL, &loss));
  CHECK(acc_backward(acc, loss));
  CHECK(acc_profile_end(acc));
  acc_tensor_destroy(loss);
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
}

/* acc_accelerator_create refuses `config` with `code`, naming `needle`. */
static void refuse_config(const char* config, acc_status code, const char* needle) {
  acc_accelerator* acc = NULL;
  EXPECT_ERR(acc_accelerator_create(config, &acc), code, needle);
  acc_accelerator_destroy(acc);
}

static void refuse(void) {
  /* the accelerator's profile_kwargs, checked at creation */
  refuse_config("{\"profile_kwargs\": {\"with_stak\": true}}", ACC_ERR_INVALID_CONFIG, "with_stak");
  refuse_config("{\"profile_kwargs\": {\"record_shapes\": 3}}", ACC_ERR_INVALID_CONFIG, "record_shapes");
  refuse_config("{\"profile_kwargs\": {\"activities\": [\"gpu\"]}}", ACC_ERR_INVALID_CONFIG, "activities");
  refuse_config("{\"profile_kwargs\": {\"activities\": []}}", ACC_ERR_INVALID_CONFIG, "profile_kwargs.activities");
  refuse_config("{\"profile_kwargs\": {\"activities\": [\"cuda\"]}}", ACC_ERR_UNSUPPORTED,
                "profile_kwargs.activities (acc_accelerator_create): \"cuda\" needs a CUDA device");
  refuse_config("{\"profile_kwargs\": {\"activities\": [\"cpu\", \"xpu\"]}}", ACC_ERR_UNSUPPORTED, "\"xpu\"");
  refuse_config("{\"profile_kwargs\": {\"schedule_option\": {\"wait\": 1, \"warmup\": 1}}}", ACC_ERR_INVALID_CONFIG,
                "'active' must be an integer >= 1 (required)");
  refuse_config("{\"profile_kwargs\": {\"schedule_option\": {\"wait\": 1, \"warmup\": 1, \"active\": 0}}}",
                ACC_ERR_INVALID_CONFIG, "'active' must be an integer >= 1; got 0");
  refuse_config("{\"profile_kwargs\": {\"schedule_option\": {\"wait\": -1, \"warmup\": 1, \"active\": 1}}}",
                ACC_ERR_INVALID_CONFIG, "'wait'");
  refuse_config("{\"profile_kwargs\": {\"schedule_option\": {\"wait\": 1, \"warmup\": 1, \"active\": 1, \"skip\": 2}}}",
                ACC_ERR_INVALID_CONFIG, "unknown key 'skip'");
  refuse_config("{\"profile_kwargs\": {\"schedule_option\": [1, 1, 1]}}", ACC_ERR_INVALID_CONFIG,
                "profile_kwargs.schedule_option");
  refuse_config("{\"profile_kwargs\": {\"output_trace_dir\": \"\"}}", ACC_ERR_INVALID_CONFIG,
                "profile_kwargs.output_trace_dir");

  /* acc_profile_begin's own ProfileKwargs, and the call order */
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(NULL, &acc));
  EXPECT_ERR(acc_profile_step(acc), ACC_ERR_INVALID_STATE, "no profile is running");
  EXPECT_ERR(acc_profile_end(acc), ACC_ERR_INVALID_STATE, "no profile is running");
  EXPECT_ERR(acc_profile_begin(NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "accelerator is NULL");
  EXPECT_ERR(acc_profile_begin(acc, "{\"profile_memry\": true}"), ACC_ERR_INVALID_CONFIG, "profile_memry");
  EXPECT_ERR(acc_profile_begin(acc, "{\"schedule_option\": {\"wait\": 0, \"warmup\": 1, \"active\": \"2\"}}"),
             ACC_ERR_INVALID_CONFIG, "'active'");
  EXPECT_ERR(acc_profile_begin(acc, "[\"cpu\"]"), ACC_ERR_INVALID_CONFIG, "expected a JSON object");
  EXPECT_ERR(acc_profile_begin(acc, "{\"with_flops\": tru"), ACC_ERR_INVALID_CONFIG, "malformed JSON");
  EXPECT_ERR(acc_profile_begin(acc, "{\"activities\": [\"cuda\"]}"), ACC_ERR_UNSUPPORTED, "(acc_profile_begin)");
  CHECK(acc_profile_begin(acc, "{\"activities\": [\"cpu\"]}"));
  EXPECT_ERR(acc_profile_begin(acc, NULL), ACC_ERR_INVALID_STATE, "profile is running");
  acc_accelerator* other;
  CHECK(acc_accelerator_create(NULL, &other));
  EXPECT_ERR(acc_profile_begin(other, NULL), ACC_ERR_INVALID_STATE, "already running in this process");
  acc_accelerator_destroy(other);
  EXPECT_OK(acc_profile_step(acc));
  EXPECT_OK(acc_profile_end(acc));
  /* a profile left running ends with its accelerator, and the next one starts */
  CHECK(acc_profile_begin(acc, NULL));
  acc_accelerator_destroy(acc);
  CHECK(acc_accelerator_create(NULL, &acc));
  EXPECT_OK(acc_profile_begin(acc, NULL));
  EXPECT_OK(acc_profile_end(acc));
  acc_accelerator_destroy(acc);
}

static acc_accelerator* g_acc;

static void* begin_and_return(void* arg) {
  (void)arg;
  EXPECT_OK(acc_profile_begin(g_acc, NULL));
  return NULL; /* the thread ends with its profile running */
}

/* Nothing is recorded: no work between begin and the end of the profile or of the process. */
static void exit_with_profile(const char* how) {
  CHECK(acc_accelerator_create(NULL, &g_acc));
  if (strcmp(how, "end") == 0) {
    CHECK(acc_profile_begin(g_acc, NULL));
    CHECK(acc_profile_end(g_acc));
    acc_accelerator_destroy(g_acc);
  } else if (strcmp(how, "running") == 0) {
    CHECK(acc_profile_begin(g_acc, NULL)); /* neither ended nor destroyed: the process exits with it */
  } else {
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, begin_and_return, NULL) == 0);
    EXPECT(pthread_join(t, NULL) == 0);
    acc_accelerator_destroy(g_acc);
  }
}

static void trace(const char* dir, int expect_io) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(NULL, &acc));
  char kwargs[4200], file[4200];
  snprintf(kwargs, sizeof kwargs, "{\"output_trace_dir\": \"%s\"}", dir);
  const char* rank = getenv("RANK");
  snprintf(file, sizeof file, "'%s/profile_%s.json'", dir, rank ? rank : "0");
  CHECK(acc_profile_begin(acc, kwargs));
  if (expect_io) {
    EXPECT_ERR(acc_profile_end(acc), ACC_ERR_IO, file);
  } else EXPECT_OK(acc_profile_end(acc));
  acc_accelerator_destroy(acc);
}

int main(int argc, char** argv) {
  if (argc >= 4 && strcmp(argv[1], "train") == 0) train(atoi(argv[2]), argv[3], argc >= 5 ? argv[4] : NULL);
  else if (argc == 5 && strcmp(argv[1], "torchscript") == 0) torchscript(argv[2], argv[3], atoi(argv[4]));
  else if (argc == 2 && strcmp(argv[1], "refuse") == 0) refuse();
  else if (argc == 3 && strcmp(argv[1], "exit") == 0 &&
           (!strcmp(argv[2], "end") || !strcmp(argv[2], "running") || !strcmp(argv[2], "thread")))
    exit_with_profile(argv[2]);
  else if (argc == 4 && strcmp(argv[1], "trace") == 0) trace(argv[2], strcmp(argv[3], "io") == 0);
  else {
    fprintf(stderr, "usage: mp_profile train STEPS CONFIG_JSON [PROFILE_KWARGS_JSON] | torchscript PATH OUT FLAG | "
                    "refuse | exit end|running|thread | trace DIR ok|io\n");
    return 2;
  }
  return finish();
}
