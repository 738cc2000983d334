/* One rank of a multi-process test, started by `acc launch`. Usage: mp_worker MODE [args]
 *   collectives                      rank r holds [1+2r, 2+2r]: gather, reduce sum/mean/max
 *   gather_for_metrics N BATCH       every sample of an N-sample set exactly once, in order
 *   train BATCH STEPS OPT OUT        MLP regression; every process holds the same weights, the main
 *                                    process saves them to OUT
 *   exit_on_rank RANK STATUS PIDDIR  that rank exits with STATUS; the others block in a barrier
 *   rendezvous SECONDS               only joins (collective timeout SECONDS): prints the status and message
 *   stalled_peer                     collective timeout 1.5 s; rank 1 stalls 5 s: rank 0's all-reduce fails
 *                                    with ACC_ERR_DISTRIBUTED and a message without a C++ backtrace
 *   data SPLIT EVEN DISPATCH SEEDABLE  dataloader_config flags (0/1; DISPATCH -1: unset): map-style,
 *                                    explicit-batch and iterable loaders, plain and shuffled, with and
 *                                    without drop_last; gather_for_metrics (tensors and objects) sees
 *                                    each sample once; skip_first_batches drops exactly one batch
 *   named DISPATCH                   named samples (int64, bool and float tensors), map-style and
 *                                    iterable, sharded or dispatched: every batch's tensors belong to
 *                                    the same samples, gather_for_metrics sees each sample once
 *   debug_mode ON                    ON 1 (launched with --debug): collectives with matching inputs work; each
 *                                    mismatch (gather's shape, reduce's dtype, broadcast's source, pad's dims,
 *                                    two different collectives, broadcast_object's source) fails on every rank
 *                                    with ACC_ERR_DISTRIBUTED, printed as "rank R: MESSAGE"; the group works
 *                                    after. ON 0: rank 1 gathers a different shape; prints what happens
 * Prints "N passed, N failed" and exits non-zero on any failed check. */
#include <acc/acc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mp_common.h"

static acc_tensor* floats(const float* v, int64_t n) {
  acc_tensor* t;
  CHECK(acc_tensor_from_host(v, (size_t)n * sizeof(float), ACC_FLOAT32, &n, 1, &t));
  return t;
}

/* The rendezvous store listens on MASTER_ADDR only (127.0.0.1 here), never on every interface: every listening
 * socket on MASTER_PORT in /proc/net/tcp{,6} is on the loopback address, and there is one. */
static void store_listens_on_loopback(void) {
  const char* port_text = getenv("MASTER_PORT");
  if (!port_text) return;
  const unsigned port = (unsigned)atoi(port_text);
  int found = 0;
  const char* tables[2] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int k = 0; k < 2; ++k) {
    FILE* f = fopen(tables[k], "r");
    if (!f) continue;
    char line[512], local[64];
    unsigned state;
    if (!fgets(line, sizeof line, f)) line[0] = 0; /* the header */
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, " %*d: %63s %*s %x", local, &state) != 2 || state != 0x0A) continue; /* 0A: LISTEN */
      char* colon = strrchr(local, ':');
      if (!colon || (unsigned)strtoul(colon + 1, NULL, 16) != port) continue;
      *colon = 0;
      ++found;
      if (strcmp(local, "0100007F") != 0) {
        ++g_failed;
        fprintf(stderr, "the store listens on %s:%u (%s), not on 127.0.0.1 only\n", local, port, tables[k]);
      }
    }
    fclose(f);
  }
  EXPECT(found == 1);
}

static void collectives(acc_accelerator* acc, int rank) {
  if (rank == 0) store_listens_on_loopback();
  float mine[2] = {1.0f + 2 * rank, 2.0f + 2 * rank};
  acc_tensor* t = floats(mine, 2);
  acc_tensor* out;
  const float gathered[4] = {1, 2, 3, 4}, sum[2] = {4, 6}, mean[2] = {2, 3}, max[2] = {3, 4};
  CHECK(acc_gather(acc, t, &out));
  EXPECT(equals(out, gathered, 4));
  acc_tensor_destroy(out);
  CHECK(acc_reduce(acc, t, ACC_REDUCE_SUM, &out));
  EXPECT(equals(out, sum, 2));
  acc_tensor_destroy(out);
  CHECK(acc_reduce(acc, t, ACC_REDUCE_MEAN, &out));
  EXPECT(equals(out, mean, 2));
  acc_tensor_destroy(out);
  CHECK(acc_reduce(acc, t, ACC_REDUCE_MAX, &out));
  EXPECT(equals(out, max, 2));
  acc_tensor_destroy(out);
  acc_tensor_destroy(t);
  CHECK(acc_wait_for_everyone(acc));
}

static void gather_for_metrics(acc_accelerator* acc, int64_t n, int batch) {
  float* x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
  acc_tensor* inputs = floats(x, n);
  acc_dataset* ds;
  CHECK(acc_dataset_from_tensors(inputs, NULL, &ds));
  acc_dataloader* dl;
  char opts[64];
  snprintf(opts, sizeof opts, "{\"batch_size\": %d}", batch);
  CHECK(acc_dataloader_create(ds, opts, &dl));
  CHECK(acc_prepare(acc, NULL, NULL, NULL, dl));
  int64_t seen = 0, in_order = 1;
  for (int epoch = 0; epoch < 2; ++epoch) { /* twice: the state resets between epochs */
    seen = 0;
    for (;;) {
      acc_tensor *bx, *all;
      int32_t has;
      CHECK(acc_dataloader_next(dl, &bx, NULL, &has));
      if (!has) break;
      CHECK(acc_gather_for_metrics(acc, bx, &all));
      int64_t k;
      CHECK(acc_tensor_numel(all, &k));
      float* v = malloc((size_t)k * sizeof(float));
      CHECK(acc_tensor_to_host(all, v, (size_t)k * sizeof(float)));
      for (int64_t i = 0; i < k; ++i) in_order &= v[i] == (float)(seen + i);
      seen += k;
      free(v);
      acc_tensor_destroy(all);
      acc_tensor_destroy(bx);
    }
    EXPECT(seen == n);
    EXPECT(in_order);
  }
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tensor_destroy(inputs);
  free(x);
}

/* 1 when every process holds process 0's model state to the bit (float32 tensors): DDP keeps the replicas equal, the
 * same averaged gradients giving the same steps. Collective. */
static int replicas_equal(acc_accelerator* acc, const acc_model* model) {
  int64_t count;
  CHECK(acc_model_state_size(model, &count));
  int equal = count > 0;
  for (int64_t i = 0; i < count; ++i) {
    acc_tensor *mine, *root;
    int64_t n;
    CHECK(acc_model_state_get(model, i, NULL, &mine));
    CHECK(acc_broadcast(acc, mine, 0, &root));
    CHECK(acc_tensor_numel(mine, &n));
    const size_t bytes = sizeof(float) * (size_t)n;
    float* a = malloc(bytes + 1);
    float* b = malloc(bytes + 1);
    CHECK(acc_tensor_to_host(mine, a, bytes));
    CHECK(acc_tensor_to_host(root, b, bytes));
    equal &= memcmp(a, b, bytes) == 0;
    free(a);
    free(b);
    acc_tensor_destroy(mine);
    acc_tensor_destroy(root);
  }
  return equal;
}

/* Regression data: y = sin(3 x0) + x1 x2, 256 samples, the same on every process. */
static void train(acc_accelerator* acc, int batch, int steps, const char* opt_type, const char* out) {
  enum { N = 256 };
  static float x[N * 3], y[N];
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < 3; ++j) x[3 * i + j] = (float)sin(0.1 * i * (j + 1) + j);
    y[i] = (float)(sin(3 * x[3 * i]) + x[3 * i + 1] * x[3 * i + 2]);
  }
  const int64_t xs[2] = {N, 3}, ys[2] = {N, 1};
  char opts[128];
  snprintf(opts, sizeof opts, "{\"batch_size\": %d}", batch);
  struct loader data = loader_from_host(ACC_FLOAT32, x, xs, y, ys, opts);
  acc_model* model;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [3, 32, 32, 1], \"activation\": \"gelu\"}", &model));
  snprintf(opts, sizeof opts, "{\"type\": \"%s\", \"lr\": %s}", opt_type, strcmp(opt_type, "sgd") ? "0.01" : "0.1");
  acc_optimizer* opt;
  CHECK(acc_optimizer_create(model, opts, &opt));
  CHECK(acc_prepare(acc, model, opt, NULL, data.dl));
  for (int step = 0; step < steps;) step += train_step(acc, model, opt, data.dl);
  int32_t is_main;
  CHECK(acc_is_main_process(acc, &is_main));
  EXPECT(replicas_equal(acc, model));
  if (is_main) CHECK(acc_model_save_safetensors(model, out));
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  loader_destroy(&data);
}

/* ---- data: every sharding mode of dataloader_config over three kinds of data ---- */

/* An iterable dataset: the stream 0, 1, ..., limit-1 as scalar floats. */
struct stream {
  int64_t next, limit;
};
static acc_status stream_start(void* user, int64_t epoch) {
  (void)epoch;
  ((struct stream*)user)->next = 0;
  return ACC_OK;
}
static acc_status stream_next(void* user, acc_tensor** input, acc_tensor** target, int32_t* has) {
  struct stream* s = user;
  (void)target;
  *has = s->next < s->limit;
  if (!*has) return ACC_OK;
  float v = (float)s->next++;
  return acc_tensor_from_host(&v, sizeof v, ACC_FLOAT32, NULL, 0, input);
}

enum { MAX_VALUES = 4096 };
struct record {
  int64_t values[MAX_VALUES], sizes[MAX_VALUES];
  int64_t count, batches;
};

static void record_batch(struct record* r, const float* v, int64_t k) {
  if (r->batches < MAX_VALUES) r->sizes[r->batches] = k;
  ++r->batches;
  for (int64_t i = 0; i < k && r->count < MAX_VALUES; ++i) r->values[r->count++] = (int64_t)v[i];
}

/* One pass over `dl`, gathering every batch for metrics as a tensor and as objects (one per sample).
 * Processes whose loader ended early (even_batches false) join the others' gathers with nothing, so
 * every gather has all processes. `mine` records this process's batches, `all` what was gathered. */
static void gather_pass(acc_accelerator* acc, acc_dataloader* dl, struct record* mine, struct record* all) {
  int done = 0;
  memset(mine, 0, sizeof *mine);
  memset(all, 0, sizeof *all);
  for (;;) {
    acc_tensor* x = NULL;
    int32_t has = 0;
    if (!done) {
      CHECK(acc_dataloader_next(dl, &x, NULL, &has));
      done = !has;
    }
    float flag = (float)has, *v = NULL;
    int64_t one = 1, k = 0;
    acc_tensor *f, *any;
    CHECK(acc_tensor_from_host(&flag, sizeof flag, ACC_FLOAT32, &one, 1, &f));
    CHECK(acc_reduce(acc, f, ACC_REDUCE_MAX, &any));
    double go;
    CHECK(acc_tensor_item(any, &go));
    acc_tensor_destroy(f);
    acc_tensor_destroy(any);
    if (go == 0) break;
    if (!has) CHECK(acc_tensor_from_host(NULL, 0, ACC_FLOAT32, &k, 1, &x));
    CHECK(acc_tensor_numel(x, &k));
    v = malloc(sizeof(float) * (size_t)(k + 1));
    CHECK(acc_tensor_to_host(x, v, sizeof(float) * (size_t)k));
    if (has) record_batch(mine, v, k);
    acc_bytes_list* items;
    CHECK(acc_bytes_list_create(&items));
    for (int64_t i = 0; i < k; ++i) {
      char text[32];
      int len = snprintf(text, sizeof text, "%d", (int)v[i]);
      CHECK(acc_bytes_list_append(items, text, (size_t)len));
    }
    acc_tensor* g;
    acc_bytes_list* objs;
    CHECK(acc_gather_for_metrics(acc, x, &g));
    CHECK(acc_gather_object_for_metrics(acc, items, &objs));
    int64_t gn, on;
    CHECK(acc_tensor_numel(g, &gn));
    CHECK(acc_bytes_list_count(objs, &on));
    float* gv = malloc(sizeof(float) * (size_t)(gn + 1));
    CHECK(acc_tensor_to_host(g, gv, sizeof(float) * (size_t)gn));
    int objects_match = gn == on;
    for (int64_t i = 0; objects_match && i < gn; ++i) {
      const void* data;
      size_t size;
      char text[32], want[32];
      CHECK(acc_bytes_list_get(objs, i, &data, &size));
      snprintf(want, sizeof want, "%d", (int)gv[i]);
      memcpy(text, data, size < 31 ? size : 31);
      text[size < 31 ? size : 31] = '\0';
      objects_match = strcmp(text, want) == 0;
    }
    EXPECT(objects_match);
    record_batch(all, gv, gn);
    free(gv);
    free(v);
    acc_bytes_list_destroy(objs);
    acc_bytes_list_destroy(items);
    acc_tensor_destroy(g);
    acc_tensor_destroy(x);
  }
}

/* Sample i of the named datasets: {"ids": [i, i, i] int64, "mask": [i odd] * 3 bool, "label": i float}. */
static void named_sample(int64_t i, int64_t* ids, uint8_t* mask, float* label) {
  for (int k = 0; k < 3; ++k) {
    ids[k] = i;
    mask[k] = (uint8_t)(i % 2);
  }
  *label = (float)i;
}

static acc_batch* named_rows(int64_t first, int64_t n) {
  int64_t ids[64 * 3];
  uint8_t mask[64 * 3];
  float label[64];
  for (int64_t i = 0; i < n; ++i) named_sample(first + i, ids + 3 * i, mask + 3 * i, label + i);
  int64_t shape2[2] = {n, 3}, shape1[1] = {n};
  acc_tensor *t_ids, *t_mask, *t_label;
  CHECK(acc_tensor_from_host(ids, sizeof(int64_t) * 3 * (size_t)n, ACC_INT64, shape2, 2, &t_ids));
  CHECK(acc_tensor_from_host(mask, 3 * (size_t)n, ACC_BOOL, shape2, 2, &t_mask));
  CHECK(acc_tensor_from_host(label, sizeof(float) * (size_t)n, ACC_FLOAT32, shape1, 1, &t_label));
  acc_batch* b;
  CHECK(acc_batch_create(&b));
  CHECK(acc_batch_set(b, "ids", t_ids));
  CHECK(acc_batch_set(b, "mask", t_mask));
  CHECK(acc_batch_set(b, "label", t_label));
  acc_tensor_destroy(t_ids);
  acc_tensor_destroy(t_mask);
  acc_tensor_destroy(t_label);
  return b;
}

static acc_status named_next(void* user, acc_batch* sample, int32_t* has) {
  struct stream* s = user;
  *has = s->next < s->limit;
  if (!*has) return ACC_OK;
  acc_batch* rows = named_rows(s->next++, 1);
  /* one sample: the rows' first (and only) row of each tensor, taken through the batch API */
  for (int64_t k = 0; k < 3; ++k) {
    const char* name;
    acc_tensor *t, *row;
    CHECK(acc_batch_name(rows, k, &name));
    CHECK(acc_batch_get(rows, name, &t));
    int32_t ndim = 0;
    int64_t shape[2];
    CHECK(acc_tensor_ndim(t, &ndim));
    CHECK(acc_tensor_shape(t, shape, 2));
    unsigned char buf[64];
    size_t nbytes;
    CHECK(acc_tensor_nbytes(t, &nbytes));
    CHECK(acc_tensor_to_host(t, buf, nbytes));
    acc_dtype dt;
    CHECK(acc_tensor_dtype(t, &dt));
    CHECK(acc_tensor_from_host(buf, nbytes, dt, shape + 1, ndim - 1, &row));
    CHECK(acc_batch_set(sample, name, row));
    acc_tensor_destroy(row);
    acc_tensor_destroy(t);
  }
  acc_batch_destroy(rows);
  return ACC_OK;
}

static void named_batches(acc_accelerator* acc, int world) {
  const int64_t n = 13;
  for (int iterable = 0; iterable < 2; ++iterable) {
    struct stream s = {0, n};
    acc_dataset* ds;
    if (iterable) {
      CHECK(acc_dataset_from_batch_iterator(stream_start, named_next, &s, NULL, &ds));
    } else {
      acc_batch* columns = named_rows(0, n);
      CHECK(acc_dataset_from_batch(columns, &ds));
      acc_batch_destroy(columns);
    }
    acc_dataloader* dl;
    CHECK(acc_dataloader_create(ds, "{\"batch_size\": 2}", &dl));
    CHECK(acc_prepare(acc, NULL, NULL, NULL, dl));
    char seen[64] = {0};
    int64_t gathered = 0;
    for (;;) {
      acc_batch* b;
      CHECK(acc_dataloader_next_batch(dl, &b));
      if (!b) break;
      int64_t count;
      const char* name;
      CHECK(acc_batch_count(b, &count));
      EXPECT(count == 3);
      CHECK(acc_batch_name(b, 1, &name));
      EXPECT(!strcmp(name, "mask"));
      acc_tensor *ids, *mask, *label, *g;
      CHECK(acc_batch_get(b, "ids", &ids));
      CHECK(acc_batch_get(b, "mask", &mask));
      CHECK(acc_batch_get(b, "label", &label));
      int64_t rows;
      acc_dtype dt;
      CHECK(acc_tensor_numel(label, &rows));
      CHECK(acc_tensor_dtype(mask, &dt));
      EXPECT(dt == ACC_BOOL);
      int64_t iv[64 * 3];
      uint8_t mv[64 * 3];
      float lv[64];
      CHECK(acc_tensor_to_host(ids, iv, sizeof(int64_t) * 3 * (size_t)rows));
      CHECK(acc_tensor_to_host(mask, mv, 3 * (size_t)rows));
      CHECK(acc_tensor_to_host(label, lv, sizeof(float) * (size_t)rows));
      for (int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < 3; ++k)
          EXPECT(iv[3 * r + k] == (int64_t)lv[r] && mv[3 * r + k] == (uint8_t)((int64_t)lv[r] % 2));
      CHECK(acc_gather_for_metrics(acc, label, &g));
      int64_t gn;
      float gv[256];
      CHECK(acc_tensor_numel(g, &gn));
      CHECK(acc_tensor_to_host(g, gv, sizeof(float) * (size_t)gn));
      for (int64_t i = 0; i < gn; ++i) {
        int64_t v = (int64_t)gv[i];
        EXPECT(v >= 0 && v < n && !seen[v]);
        if (v >= 0 && v < n) seen[v] = 1;
      }
      gathered += gn;
      /* a batch of three tensors has no (input, target) reading */
      acc_tensor_destroy(ids);
      acc_tensor_destroy(mask);
      acc_tensor_destroy(label);
      acc_tensor_destroy(g);
      acc_batch_destroy(b);
    }
    EXPECT(gathered == n);
    acc_tensor* x;
    int32_t has;
    EXPECT(acc_dataloader_next(dl, &x, NULL, &has) == ACC_ERR_INVALID_ARGUMENT &&
           strstr(acc_last_error_message(), "by name") && x == NULL && has == 0);
    acc_dataloader_destroy(dl);
    acc_dataset_destroy(ds);
  }
  (void)world;
}

/* flags: split, even, dispatch (-1 unset), seedable */
static void data_modes(acc_accelerator* acc, int world, int split, int even, int dispatch, int seedable) {
  static const int64_t lengths[] = {1, 5, 13, 24};
  int64_t sizes_split[2] = {world, 2 * world}, sizes_whole[2] = {2, 3};
  const int64_t* sizes = split ? sizes_split : sizes_whole;
  int32_t rank;
  CHECK(acc_process_index(acc, &rank));
  static struct record mine, all, first, skipped;
  int combos = 0;
  for (int src = 0; src < 3; ++src)            /* map-style, explicit batches of varying size, iterable */
    for (int li = 0; li < 4; ++li)
      for (int bi = 0; bi < 2; ++bi)
        for (int drop = 0; drop < 2; ++drop)
          for (int shuffle = 0; shuffle < (src == 2 ? 1 : 2); ++shuffle) {
            const int64_t n = lengths[li], bs = sizes[bi];
            float x[64];
            for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
            acc_tensor* t;
            acc_dataset* ds;
            struct stream s = {0, n};
            if (src == 2) {
              CHECK(acc_dataset_from_iterator(stream_start, stream_next, &s, NULL, &ds));
            } else {
              int64_t len = n;
              CHECK(acc_tensor_from_host(x, sizeof(float) * (size_t)n, ACC_FLOAT32, &len, 1, &t));
              CHECK(acc_dataset_from_tensors(t, NULL, &ds));
              acc_tensor_destroy(t);
            }
            char opts[160];
            acc_dataloader* dl;
            int64_t want = n, total = split ? bs : bs * world;
            if (src == 1) {
              /* batches of 1, 2, 3, 1, 2, 3, ... indices */
              int64_t idx[64], bsz[64], nb = 0, used = 0;
              for (int64_t i = 0; i < n; ++i) idx[i] = i;
              while (used < n) {
                int64_t b = 1 + nb % 3;
                if (b > n - used) b = n - used;
                bsz[nb++] = b;
                used += b;
              }
              snprintf(opts, sizeof opts, "{\"drop_last\": %s}", drop ? "true" : "false");
              CHECK(acc_dataloader_create_from_batches(ds, idx, (size_t)n, bsz, nb, opts, &dl));
              if (drop) {
                want = 0;
                for (int64_t b = 0; b < nb / world * world; ++b) want += bsz[b];
              }
            } else {
              /* shuffle with a different loader seed on each process: the generators must follow rank 0 */
              if (shuffle)
                snprintf(opts, sizeof opts, "{\"batch_size\": %d, \"drop_last\": %s, \"shuffle\": true, \"seed\": %d}",
                         (int)bs, drop ? "true" : "false", 5 + rank);
              else
                snprintf(opts, sizeof opts, "{\"batch_size\": %d, \"drop_last\": %s}", (int)bs,
                         drop ? "true" : "false");
              CHECK(acc_dataloader_create(ds, opts, &dl));
              if (drop) want = n / total * total;
            }
            acc_status st = acc_prepare(acc, NULL, NULL, NULL, dl);
            if (src == 1 && (split || dispatch == 1)) { /* batches of varying size cannot be split or dispatched */
              EXPECT(st == ACC_ERR_INVALID_ARGUMENT &&
                     strstr(acc_last_error_message(), split ? "split_batches" : "dispatch_batches"));
              acc_dataloader_destroy(dl);
              acc_dataset_destroy(ds);
              continue;
            }
            if (st != ACC_OK) {
              fprintf(stderr, "acc_prepare: %s\n", acc_last_error_message());
              exit(1);
            }
            acc_dataloader* skip;
            CHECK(acc_dataloader_skip_first_batches(dl, 1, &skip));
            for (int epoch = 0; epoch < 2; ++epoch) {
              gather_pass(acc, dl, &mine, &all);
              if (epoch == 0) first = mine;
              int exact = all.count == want, sorted = 1;
              char seen[64] = {0};
              for (int64_t i = 0; i < all.count; ++i) {
                int64_t v = all.values[i];
                if (v < 0 || v >= n || seen[v]) exact = 0;
                if (v >= 0 && v < n) seen[v] = 1;
                if (v != i) sorted = 0;
              }
              if (!exact || (!shuffle && !sorted)) {
                fprintf(stderr,
                        "rank %d: src %d n %d bs %d drop %d shuffle %d epoch %d: gathered %d samples, want %d:", rank,
                        src, (int)n, (int)bs, drop, shuffle, epoch, (int)all.count, (int)want);
                for (int64_t i = 0; i < all.count; ++i) fprintf(stderr, " %d", (int)all.values[i]);
                fprintf(stderr, "\n");
              }
              EXPECT(exact);
              EXPECT(shuffle || sorted);
              if (src != 2) {
                int64_t len;
                CHECK(acc_dataloader_length(dl, &len));
                EXPECT(len == mine.batches);
              }
            }
            /* skip_first_batches: the same batches as the first pass (the same epoch) but the first */
            if (!shuffle) {
              memset(&skipped, 0, sizeof skipped);
              for (;;) {
                acc_tensor* bx;
                int32_t has;
                CHECK(acc_dataloader_next(skip, &bx, NULL, &has));
                if (!has) break;
                int64_t k;
                float v[64];
                CHECK(acc_tensor_numel(bx, &k));
                CHECK(acc_tensor_to_host(bx, v, sizeof(float) * (size_t)k));
                record_batch(&skipped, v, k);
                acc_tensor_destroy(bx);
              }
              int64_t skip_batches = first.batches > 0 ? first.batches - 1 : 0,
                      skip_values = first.batches > 0 ? first.sizes[0] : 0;
              int same = skipped.batches == skip_batches && skipped.count == first.count - skip_values;
              for (int64_t i = 0; same && i < skipped.count; ++i)
                same = skipped.values[i] == first.values[i + skip_values];
              EXPECT(same);
            }
            acc_dataloader_destroy(skip);
            acc_dataloader_destroy(dl);
            acc_dataset_destroy(ds);
            ++combos;
          }
  if (rank == 0)
    printf("split_batches %d, even_batches %d, dispatch_batches %d, seedable sampler %d: %d loader combinations "
           "checked\n",
           split, even, dispatch, seedable, combos);
}

/* A float32 tensor of `shape` (ndim dims) holding 0, 1, 2, ... */
static acc_tensor* iota(const int64_t* shape, int ndim, int32_t dtype) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  double* v = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  float* f = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  for (int64_t i = 0; i < n; ++i) v[i] = f[i] = (float)i;
  acc_tensor* t;
  if (dtype == ACC_FLOAT64) CHECK(acc_tensor_from_host(v, (size_t)n * sizeof(double), ACC_FLOAT64, shape, ndim, &t));
  else CHECK(acc_tensor_from_host(f, (size_t)n * sizeof(float), ACC_FLOAT32, shape, ndim, &t));
  free(v);
  free(f);
  return t;
}

static void expect_shape(acc_tensor* t, int64_t d0, int64_t d1) {
  int64_t shape[2] = {0, 0};
  int32_t nd = 0;
  CHECK(acc_tensor_ndim(t, &nd));
  EXPECT(nd == 2 && acc_tensor_shape(t, shape, 2) == ACC_OK && shape[0] == d0 && shape[1] == d1);
}

/* The call fails on this rank with ACC_ERR_DISTRIBUTED naming `needle`; the message goes to stdout (the
 * test compares the ranks' messages). */
#define EXPECT_MISMATCH(call, needle)                        \
  do {                                                       \
    EXPECT_ERR(call, ACC_ERR_DISTRIBUTED, needle);           \
    printf("rank %d: %s\n", rank, acc_last_error_message()); \
  } while (0)

static void debug_mode(acc_accelerator* acc, int rank, int on) {
  acc_tensor *t, *out = NULL;
  const int64_t mine[2] = {2, rank == 0 ? 2 : 3};
  if (!on) {
    /* Debug off: rank 1 gathers [2, 3] while rank 0 gathers [2, 2]; report what the library does. */
    t = iota(mine, 2, ACC_FLOAT32);
    acc_status st = acc_gather(acc, t, &out);
    int64_t shape[2] = {-1, -1};
    if (st == ACC_OK) CHECK(acc_tensor_shape(out, shape, 2));
    printf("rank %d: debug off: %s: %s; shape [%lld, %lld]\n", rank, acc_status_name(st),
           st == ACC_OK ? "" : acc_last_error_message(), (long long)shape[0], (long long)shape[1]);
    fflush(stdout);
    _exit(0); /* the group may be broken: end plainly */
  }
  /* Matching inputs work, also where Accelerate allows the sizes to differ. */
  collectives(acc, rank);
  const int64_t rows[2] = {1 + rank, 3}; /* gather: dim 0 may differ */
  t = iota(rows, 2, ACC_FLOAT32);
  CHECK(acc_gather(acc, t, &out));
  expect_shape(out, 3, 3);
  acc_tensor_destroy(out);
  CHECK(acc_gather_for_metrics(acc, t, &out));
  expect_shape(out, 3, 3);
  acc_tensor_destroy(out);
  CHECK(acc_pad_across_processes(acc, t, 0, 0, 0, &out)); /* pad: the padded dim differs */
  expect_shape(out, 2, 3);
  acc_tensor_destroy(out);
  acc_tensor_destroy(t);
  const int64_t same[2] = {2, 2};
  t = iota(same, 2, ACC_FLOAT32);
  CHECK(acc_broadcast(acc, t, 1, &out));
  expect_shape(out, 2, 2);
  acc_tensor_destroy(out);
  acc_tensor_destroy(t);
  acc_bytes_list *items, *all;
  CHECK(acc_bytes_list_create(&items));
  for (int i = 0; i <= rank; ++i) CHECK(acc_bytes_list_append(items, "ab", 2)); /* objects: counts differ */
  int64_t count = 0;
  CHECK(acc_gather_object(acc, items, &all));
  CHECK(acc_bytes_list_count(all, &count));
  EXPECT(count == 3);
  acc_bytes_list_destroy(all);
  CHECK(acc_broadcast_object(acc, items, 1, &all));
  CHECK(acc_bytes_list_count(all, &count));
  EXPECT(count == 2);
  acc_bytes_list_destroy(all);

  /* Mismatches: the same error on every rank, naming the operation and each rank's input. */
  t = iota(mine, 2, ACC_FLOAT32);
  EXPECT_MISMATCH(acc_gather(acc, t, &out), "process 1: `gather`: float32 [2, 3] on cpu");
  EXPECT(out == NULL);
  EXPECT_MISMATCH(acc_gather_for_metrics(acc, t, &out), "process 0: `gather_for_metrics`: float32 [2, 2] on cpu");
  EXPECT_MISMATCH(acc_reduce(acc, t, ACC_REDUCE_SUM, &out), "`reduce` (sum)");
  acc_tensor_destroy(t);
  t = iota(same, 2, rank == 0 ? ACC_FLOAT32 : ACC_FLOAT64);
  EXPECT_MISMATCH(acc_reduce(acc, t, ACC_REDUCE_MAX, &out), "process 1: `reduce` (max): float64 [2, 2] on cpu");
  acc_tensor_destroy(t);
  t = iota(same, 2, ACC_FLOAT32);
  EXPECT_MISMATCH(acc_broadcast(acc, t, rank, &out), "process 1: `broadcast` from process 1");
  EXPECT_MISMATCH(rank == 0 ? acc_gather(acc, t, &out) : acc_reduce(acc, t, ACC_REDUCE_SUM, &out),
                  "the processes are in different collectives");
  acc_tensor_destroy(t);
  t = iota(mine, rank == 0 ? 2 : 1, ACC_FLOAT32); /* rank 0 [2, 2], rank 1 [2] */
  EXPECT_MISMATCH(acc_pad_across_processes(acc, t, 1, 0, 0, &out), "`pad_across_processes` along dim 1");
  acc_tensor_destroy(t);
  EXPECT_MISMATCH(acc_broadcast_object(acc, items, rank, &all), "`broadcast_object` from process 0");
  acc_bytes_list_destroy(items);

  /* The check completed on every rank: the group still works. */
  collectives(acc, rank);
}

/* parallelism_config.tp_size = world (the launch's PARALLELISM_CONFIG_TP_SIZE), through the C API: a model without a
 * tensor-parallel plan refused by acc_prepare naming the key and its source; acc_generate on a prepared split Llama
 * gives the tokens of the same model whole (unprepared, in this process). */
static void tensor_parallel(acc_accelerator* acc, int world) {
  acc_model* mlp = NULL;
  CHECK(acc_model_create("{\"type\": \"mlp\", \"sizes\": [4, 8, 1]}", &mlp));
  char want[128];
  snprintf(want, sizeof want, "'parallelism_config.tp_size' = %d (from env PARALLELISM_CONFIG_TP_SIZE)", world);
  EXPECT_ERR(acc_prepare(acc, mlp, NULL, NULL, NULL), ACC_ERR_UNSUPPORTED, want);
  EXPECT(strstr(acc_last_error_message(), "has no tensor-parallel plan") != NULL);
  acc_model_destroy(mlp);
  const char* llama =
      "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"vocab_size\": 64, "
      "\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
      "\"num_key_value_heads\": 4, \"head_dim\": 4, \"max_position_embeddings\": 64, \"initializer_range\": 0.2}";
  acc_model *whole = NULL, *split = NULL;
  CHECK(acc_set_seed(acc, 7, 0, 0));
  CHECK(acc_model_from_config(llama, NULL, &whole));
  CHECK(acc_set_seed(acc, 7, 0, 0));
  CHECK(acc_model_from_config(llama, NULL, &split));
  CHECK(acc_prepare(acc, split, NULL, NULL, NULL));
  const int64_t prompt_ids[6] = {3, 14, 15, 9, 2, 6}, shape[2] = {2, 3};
  acc_tensor* prompt = NULL;
  CHECK(acc_tensor_from_host(prompt_ids, sizeof prompt_ids, ACC_INT64, shape, 2, &prompt));
  const char* greedy = "{\"max_new_tokens\": 5, \"do_sample\": false}";
  acc_tensor *a = NULL, *b = NULL;
  CHECK(acc_generate(whole, prompt, NULL, greedy, NULL, NULL, &a));
  CHECK(acc_generate(split, prompt, NULL, greedy, NULL, NULL, &b));
  int64_t ta[16] = {0}, tb[16] = {0}, n = 0;
  CHECK(acc_tensor_numel(a, &n));
  EXPECT(n == 16);
  CHECK(acc_tensor_to_host(a, ta, sizeof ta));
  CHECK(acc_tensor_to_host(b, tb, sizeof tb));
  EXPECT(memcmp(ta, tb, sizeof ta) == 0);
  acc_tensor_destroy(a);
  acc_tensor_destroy(b);
  acc_tensor_destroy(prompt);
  acc_model_destroy(split);
  acc_model_destroy(whole);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* mode = argv[1];
  if (!strcmp(mode, "exit_on_rank") && argc == 5) {
    /* Record the pid first, so the test can check that nothing is left behind. */
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.pid", argv[4], getenv("RANK") ? getenv("RANK") : "0");
    FILE* f = fopen(path, "w");
    if (f) {
      fprintf(f, "%d\n", (int)getpid());
      fclose(f);
    }
  }
  char config[256] = "";
  if (!strcmp(mode, "train")) snprintf(config, sizeof config, "{\"seed\": 42}");
  if (!strcmp(mode, "rendezvous") && argc == 3) {
    acc_accelerator* solo = NULL;
    snprintf(config, sizeof config, "{\"init_process_group_kwargs\": {\"timeout\": %s}}", argv[2]);
    acc_status st = acc_accelerator_create(config, &solo);
    printf("rendezvous: %s: %s\n", acc_status_name(st), acc_last_error_message());
    acc_accelerator_destroy(solo);
    return st == ACC_OK ? 0 : 1;
  }
  if (!strcmp(mode, "debug_mode")) /* debug off, the mismatched gather may wait for its peer: not for long */
    snprintf(config, sizeof config, "{\"init_process_group_kwargs\": {\"timeout\": 10}}");
  if (!strcmp(mode, "stalled_peer"))
    snprintf(config, sizeof config, "{\"init_process_group_kwargs\": {\"timeout\": 1.5}}");
  if (!strcmp(mode, "data") && argc == 6)
    snprintf(config, sizeof config,
             "{\"dataloader_config\": {\"split_batches\": %s, \"even_batches\": %s, \"use_seedable_sampler\": %s, "
             "\"data_seed\": 11%s%s}}",
             atoi(argv[2]) ? "true" : "false", atoi(argv[3]) ? "true" : "false", atoi(argv[5]) ? "true" : "false",
             atoi(argv[4]) < 0 ? "" : ", \"dispatch_batches\": ",
             atoi(argv[4]) < 0 ? ""
             : atoi(argv[4])   ? "true"
                               : "false");
  if (!strcmp(mode, "named") && argc == 3)
    snprintf(config, sizeof config, "{\"dataloader_config\": {\"dispatch_batches\": %s}}",
             atoi(argv[2]) ? "true" : "false");
  acc_accelerator* acc;
  CHECK(acc_accelerator_create(config, &acc));
  int32_t rank, world;
  CHECK(acc_process_index(acc, &rank));
  CHECK(acc_num_processes(acc, &world));
  if (!strcmp(mode, "collectives")) {
    collectives(acc, rank);
  } else if (!strcmp(mode, "gather_for_metrics") && argc == 4) {
    gather_for_metrics(acc, atoll(argv[2]), atoi(argv[3]));
  } else if (!strcmp(mode, "train") && argc == 6) {
    train(acc, atoi(argv[2]), atoi(argv[3]), argv[4], argv[5]);
  } else if (!strcmp(mode, "data") && argc == 6) {
    data_modes(acc, world, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
  } else if (!strcmp(mode, "named") && argc == 3) {
    named_batches(acc, world);
  } else if (!strcmp(mode, "tensor_parallel")) {
    tensor_parallel(acc, world);
  } else if (!strcmp(mode, "debug_mode") && argc == 3 && world == 2) {
    debug_mode(acc, rank, atoi(argv[2]));
  } else if (!strcmp(mode, "stalled_peer")) {
    if (rank == 1) {
      sleep(5);
    } else {
      float one = 1;
      acc_tensor* t = floats(&one, 1);
      acc_tensor* out = NULL;
      EXPECT_ERR(acc_reduce(acc, t, ACC_REDUCE_SUM, &out), ACC_ERR_DISTRIBUTED, "all_reduce failed");
      const char* msg = acc_last_error_message();
      EXPECT(strstr(msg, "frame #") == NULL && strstr(msg, "Exception raised from") == NULL && !strchr(msg, '\n'));
      printf("rank 0: %s\n", msg);
      acc_tensor_destroy(t);
    }
    /* The group is broken: leave without the collective destroy would not need, but end the process plainly. */
    fflush(stdout);
    _exit(g_failed ? 1 : 0);
  } else if (!strcmp(mode, "exit_on_rank") && argc == 5) {
    if (rank == atoi(argv[2])) exit(atoi(argv[3]));
    CHECK(acc_wait_for_everyone(acc)); /* blocks: the failed rank never arrives */
    sleep(600);
  } else {
    fprintf(stderr, "mp_worker: bad mode or arguments\n");
    return 2;
  }
  acc_accelerator_destroy(acc);
  if (g_failed) fprintf(stderr, "rank %d: %d checks failed\n", rank, g_failed);
  return finish();
}
