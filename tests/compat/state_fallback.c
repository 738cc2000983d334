/* A program as a libacc 1.1 user wrote it (tests/compat): a few SGD steps of an MLP under whatever strategy the
 * launcher sets, then the main process alone asks for the first state tensor with acc_model_state_get. 1.1
 * answered ACC_ERR_INVALID_STATE where the parameters are sharded (ZeRO-3 / FSDP), and the program then saved
 * through acc_save_model on every process instead: the main process broadcasts the answer first. Built against
 * 1.1's header and version script it must behave so against today's library; built against today's header
 * (-DGATHER_ON_EVERY_RANK) every process asks, and the tensor is gathered (symbol version ACC_1.4).
 *   acc launch --num_processes 2 state_fallback OUT_DIR
 * Prints "state: <name> (<n> values)" or "refused: <message>", then "saved" after acc_save_model; exits 0. */
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    acc_status st_ = (call);                                                                          \
    if (st_ != ACC_OK) {                                                                              \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, acc_last_error_message(), acc_status_name(st_)); \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: state_fallback OUT_DIR\n");
    return 2;
  }
  acc_accelerator* acc;
  CHECK(acc_accelerator_create("{\"seed\": 3}", &acc));
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 8, 1]}", &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.1}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, NULL));
  float x[8 * 4], y[8];
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) x[4 * i + j] = (float)((i + j) % 5) / 4.0f;
    y[i] = x[4 * i] - x[4 * i + 3];
  }
  const int64_t xs[2] = {8, 4}, ys[2] = {8, 1};
  acc_tensor *tx, *ty, *loss;
  CHECK(acc_tensor_from_host(x, sizeof x, ACC_FLOAT32, xs, 2, &tx));
  CHECK(acc_tensor_from_host(y, sizeof y, ACC_FLOAT32, ys, 2, &ty));
  for (int step = 0; step < 3; ++step) {
    CHECK(acc_model_forward(model, tx, ty, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    acc_tensor_destroy(loss);
  }
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  unsigned char refused = 0;
#ifdef GATHER_ON_EVERY_RANK
  const int ask = 1;
#else
  const int ask = is_main;
#endif
  if (ask) {
    const char* name;
    acc_tensor* t;
    const acc_status st = acc_model_state_get(model, 0, &name, &t);
    if (st == ACC_OK) {
      int64_t n;
      CHECK(acc_tensor_numel(t, &n));
      if (is_main) printf("state: %s (%lld values)\n", name, (long long)n);
      acc_tensor_destroy(t);
    } else if (st == ACC_ERR_INVALID_STATE) {
      printf("refused: %s\n", acc_last_error_message());
      refused = 1;
    } else {
      fprintf(stderr, "acc_model_state_get: %s (%s)\n", acc_last_error_message(), acc_status_name(st));
      return 1;
    }
  }
  acc_bytes_list *mine, *answer;
  CHECK(acc_bytes_list_create(&mine));
  CHECK(acc_bytes_list_append(mine, &refused, 1));
  CHECK(acc_broadcast_object(acc, mine, 0, &answer));
  const void* data;
  size_t size;
  CHECK(acc_bytes_list_get(answer, 0, &data, &size));
  if (size == 1 && *(const unsigned char*)data) {
    CHECK(acc_save_model(model, argv[1], NULL));
    if (is_main) printf("saved\n");
  }
  acc_bytes_list_destroy(answer);
  acc_bytes_list_destroy(mine);
  acc_tensor_destroy(tx);
  acc_tensor_destroy(ty);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  acc_accelerator_destroy(acc);
  return 0;
}
