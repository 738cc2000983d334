/* Multi-process scenarios of the training loop, started by `acc launch`. Usage: mp_loop MODE [args]
 *   accumulate BATCH ACCUM MICRO_STEPS OUT  MLP with gradient accumulation; main saves weights to OUT
 *   process_control DIR                     split, pad, broadcast, trigger, main_process_first
 * Prints "N passed, N failed"; exits non-zero on any failed check. */
#include <acc/acc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp_common.h"

static void accumulate(int batch, int accum, int micro_steps, const char* out) {
  char cfg[96];
  snprintf(cfg, sizeof cfg, "{\"seed\": 9, \"gradient_accumulation_steps\": %d}", accum);
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(cfg, &acc));
  char opts[64];
  snprintf(opts, sizeof opts, "{\"batch_size\": %d}", batch);
  struct loader data = regression_loader(192, opts);
  acc_dataloader* dl = data.dl;
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [3, 24, 1], \"activation\": \"tanh\"}", &model));
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, "{\"type\": \"sgd\", \"lr\": 0.2}", &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, dl));
  int syncs = 0;
  for (int step = 0; step < micro_steps;) {
    acc_tensor *bx, *by, *loss;
    int32_t has, sync;
    CHECK(acc_dataloader_next(dl, &bx, &by, &has));
    if (!has) continue;
    CHECK(acc_accumulate_begin(acc, model));
    CHECK(acc_model_forward(model, bx, by, NULL, &loss));
    CHECK(acc_backward(acc, loss));
    CHECK(acc_optimizer_step(opt));
    CHECK(acc_optimizer_zero_grad(opt));
    CHECK(acc_sync_gradients(acc, &sync));
    syncs += sync;
    CHECK(acc_accumulate_end(acc, model));
    acc_tensor_destroy(loss);
    acc_tensor_destroy(bx);
    acc_tensor_destroy(by);
    ++step;
  }
  EXPECT(syncs == micro_steps / accum);
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  if (is_main) CHECK(acc_model_save_safetensors(model, out));
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  loader_destroy(&data);
  acc_accelerator_destroy(acc);
}

static void process_control(const char* dir) {
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(NULL, &acc));
  int32_t rank, world, flag;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  /* split_between_processes: 17 items -> the first 17 % world processes get one more */
  int64_t start, count, padded, total = 0;
  CHECK(acc_split_between_processes(acc, 17, 1, &start, &count, &padded));
  int64_t want = 17 / world + (rank < 17 % world ? 1 : 0);
  EXPECT(count == want);
  EXPECT(padded == 17 / world + (17 % world ? 1 : 0));
  acc_tensor *t, *out;
  float counts_f = (float)count;
  CHECK(acc_tensor_from_host(&counts_f, sizeof counts_f, ACC_FLOAT32, NULL, 0, &t));
  CHECK(acc_gather(acc, t, &out));
  float lengths[8];
  CHECK(acc_tensor_to_host(out, lengths, sizeof(float) * (size_t)world));
  for (int r = 0; r < world; ++r) total += (int64_t)lengths[r];
  EXPECT(total == 17);
  if (world == 4) EXPECT(lengths[0] == 5 && lengths[1] == 4 && lengths[2] == 4 && lengths[3] == 4);
  acc_tensor_destroy(t);
  acc_tensor_destroy(out);
  /* the tensor form, padded with the last row */
  float items[17];
  for (int i = 0; i < 17; ++i) items[i] = (float)i;
  int64_t n17 = 17;
  CHECK(acc_tensor_from_host(items, sizeof items, ACC_FLOAT32, &n17, 1, &t));
  CHECK(acc_split_tensor_between_processes(acc, t, 1, &out));
  float share[17]; /* up to every item: 9 per rank on 2 processes (8 overflowed; found by ASan) */
  int64_t got;
  CHECK(acc_tensor_numel(out, &got));
  EXPECT(got == padded);
  CHECK(acc_tensor_to_host(out, share, sizeof(float) * (size_t)got));
  EXPECT(share[0] == (float)start);
  EXPECT(share[got - 1] == (count < padded ? 16.0f : (float)(start + count - 1)));
  acc_tensor_destroy(t);
  acc_tensor_destroy(out);
  /* pad_across_processes: rank r holds r+1 ones, padded with -1 to world, at the end or the start */
  float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, padded_v[8];
  int64_t len = rank + 1;
  CHECK(acc_tensor_from_host(ones, sizeof(float) * (size_t)len, ACC_FLOAT32, &len, 1, &t));
  for (int first = 0; first <= 1; ++first) {
    CHECK(acc_pad_across_processes(acc, t, 0, -1, first, &out));
    CHECK(acc_tensor_numel(out, &got));
    EXPECT(got == world);
    CHECK(acc_tensor_to_host(out, padded_v, sizeof(float) * (size_t)world));
    int ok = 1;
    for (int i = 0; i < world; ++i) {
      int real = first ? i >= world - len : i < len;
      ok &= padded_v[i] == (real ? 1.0f : -1.0f);
    }
    EXPECT(ok);
    acc_tensor_destroy(out);
  }
  acc_tensor_destroy(t);
  /* broadcast from the last process */
  float mine = 100.0f + (float)rank, got_v = 0;
  CHECK(acc_tensor_from_host(&mine, sizeof mine, ACC_FLOAT32, NULL, 0, &t));
  CHECK(acc_broadcast(acc, t, world - 1, &out));
  CHECK(acc_tensor_to_host(out, &got_v, sizeof got_v));
  EXPECT(got_v == 100.0f + (float)(world - 1));
  acc_tensor_destroy(t);
  acc_tensor_destroy(out);
  /* broadcast_object: the last process's items, of different sizes, everywhere */
  acc_bytes_list *objects, *got_items;
  CHECK(acc_bytes_list_create(&objects));
  char word[64];
  for (int i = 0; i <= rank; ++i) {
    snprintf(word, sizeof word, "rank %d item %d", rank, i);
    CHECK(acc_bytes_list_append(objects, word, strlen(word)));
  }
  CHECK(acc_broadcast_object(acc, objects, world - 1, &got_items));
  int64_t n_items;
  CHECK(acc_bytes_list_count(got_items, &n_items));
  EXPECT(n_items == world);
  const void* bytes;
  size_t n_bytes;
  CHECK(acc_bytes_list_get(got_items, n_items - 1, &bytes, &n_bytes));
  snprintf(word, sizeof word, "rank %d item %d", world - 1, world - 1);
  EXPECT(n_bytes == strlen(word) && memcmp(bytes, word, n_bytes) == 0);
  acc_bytes_list_destroy(objects);
  acc_bytes_list_destroy(got_items);
  /* triggers: only rank 1 sets it; everyone sees it once */
  if (rank == 1) CHECK(acc_set_trigger(acc));
  CHECK(acc_check_trigger(acc, &flag));
  EXPECT(flag == 1);
  CHECK(acc_check_trigger(acc, &flag));
  EXPECT(flag == 0);
  /* main_process_first: the main process writes a file the others must see inside the scope */
  char path[4096];
  snprintf(path, sizeof path, "%s/first.txt", dir);
  CHECK(acc_main_process_first_begin(acc, 0));
  if (rank == 0) {
    usleep(300000); /* a slow main process: the others must still wait for it */
    FILE* f = fopen(path, "w");
    if (f) fclose(f);
  } else {
    EXPECT(access(path, F_OK) == 0);
  }
  CHECK(acc_main_process_first_end(acc, 0));

  /* A second accelerator joins the same process group. With rng_types ["torch"], every epoch of a
   * prepared loader starts from rank 0's generator: models drawn after that agree across processes. */
  acc_accelerator* acc2;
  CHECK(acc_accelerator_create("{\"rng_types\": [\"torch\"]}", &acc2));
  CHECK(acc_set_seed(acc2, 100, 1, 0)); /* a different seed on every process */
  float rows4[4] = {0, 1, 2, 3};
  int64_t n4 = 4;
  acc_dataset* ds;
  acc_dataloader* dl;
  CHECK(acc_tensor_from_host(rows4, sizeof rows4, ACC_FLOAT32, &n4, 1, &t));
  CHECK(acc_dataset_from_tensors(t, NULL, &ds));
  CHECK(acc_dataloader_create(ds, "{\"batch_size\": 1}", &dl));
  CHECK(acc_prepare(acc2, NULL, NULL, NULL, dl));
  for (int synced = 0; synced <= 1; ++synced) {
    if (synced) {
      acc_tensor* bx;
      CHECK(acc_dataloader_next(dl, &bx, NULL, &flag)); /* the epoch starts: generators sync */
      acc_tensor_destroy(bx);
    }
    acc_model* m;
    acc_tensor* w;
    const char* name;
    float first[4];
    CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [1, 1]}", &m));
    CHECK(acc_model_state_get(m, 0, &name, &w));
    CHECK(acc_gather(acc2, w, &out));
    CHECK(acc_tensor_to_host(out, first, sizeof(float) * (size_t)world));
    int same = 1;
    for (int r = 1; r < world; ++r) same &= first[r] == first[0];
    EXPECT(same == synced);
    acc_tensor_destroy(out);
    acc_tensor_destroy(w);
    acc_model_destroy(m);
  }
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tensor_destroy(t);
  acc_accelerator_destroy(acc2);

  /* A prepared scheduler advances num_processes steps per optimizer step, or one with split_batches. */
  for (int split = 0; split <= 1; ++split) {
    acc_accelerator* a;
    CHECK(acc_accelerator_create(split ? "{\"dataloader_config\": {\"split_batches\": true}}" : NULL, &a));
    acc_model* m;
    acc_optimizer* o;
    acc_scheduler* sch;
    double lr;
    CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [1, 1]}", &m));
    CHECK(acc_optimizer_create(m, "{\"type\": \"sgd\", \"lr\": 1.0}", &o));
    CHECK(acc_scheduler_create(o, "{\"type\": \"constant\", \"warmup_steps\": 100}", &sch));
    CHECK(acc_prepare(a, m, o, sch, NULL));
    CHECK(acc_optimizer_step(o));
    CHECK(acc_scheduler_step(sch));
    CHECK(acc_scheduler_last_lr(sch, &lr));
    EXPECT(fabs(lr - (split ? 1 : world) / 100.0) < 1e-12);
    acc_scheduler_destroy(sch);
    acc_optimizer_destroy(o);
    acc_model_destroy(m);
    acc_accelerator_destroy(a);
  }
  acc_accelerator_destroy(acc);
}

int main(int argc, char** argv) {
  if (argc == 6 && !strcmp(argv[1], "accumulate")) {
    accumulate(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5]);
  } else if (argc == 3 && !strcmp(argv[1], "process_control")) {
    process_control(argv[2]);
  } else {
    fprintf(stderr, "mp_loop: bad mode or arguments\n");
    return 2;
  }
  return finish();
}
