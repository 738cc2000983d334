/* Single-process tests of data loading through the C ABI, after Accelerate's tests/test_data_loader.py:
 * skip_first_batches (keeping the epoch), end_of_dataloader for the shard and the dispatcher, the
 * seedable sampler and the generator's reproducibility, iterable datasets, explicit batches of varying
 * size, byte-string lists and the gather of objects, named batches (acc_batch) through datasets, loaders
 * and the named forward. Multi-process sharding is in tests/mp. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

/* Sample i of a range dataset is the float i (a 1-D tensor: batches are 1-D). */
static acc_dataset* range_dataset(int64_t n) {
  float* x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; ++i) x[i] = (float)i;
  acc_tensor* t = NULL;
  acc_dataset* ds = NULL;
  EXPECT_OK(acc_tensor_from_host(x, sizeof(float) * (size_t)n, ACC_FLOAT32, &n, 1, &t));
  EXPECT_OK(acc_dataset_from_tensors(t, NULL, &ds));
  acc_tensor_destroy(t);
  free(x);
  return ds;
}

static acc_accelerator* make_acc(const char* json) {
  acc_accelerator* acc = NULL;
  acc_status st = acc_accelerator_create(json, &acc);
  if (st != ACC_OK) fprintf(stderr, "acc_accelerator_create(%s): %s\n", json, acc_last_error_message());
  return acc;
}

/* One pass: the batches as integers, -1 after each batch; end_of_dataloader checked on every batch.
 * Returns the number of batches. */
enum { MAX_OUT = 512 };
static int run_epoch(acc_dataloader* dl, int64_t* out, int* ends_ok) {
  int batches = 0, pos = 0, last_end = 0;
  *ends_ok = 1;
  for (;;) {
    acc_tensor *x = NULL, *y = NULL;
    int32_t has = 0, end = 0;
    if (acc_dataloader_next(dl, &x, &y, &has) != ACC_OK) {
      fprintf(stderr, "acc_dataloader_next: %s\n", acc_last_error_message());
      *ends_ok = 0;
      return -1;
    }
    if (!has) break;
    int64_t k = 0;
    EXPECT_OK(acc_tensor_numel(x, &k));
    float v[64];
    EXPECT(k <= 64);
    EXPECT_OK(acc_tensor_to_host(x, v, sizeof(float) * (size_t)k));
    for (int64_t i = 0; i < k && pos < MAX_OUT - 1; ++i) out[pos++] = (int64_t)v[i];
    out[pos++] = -1;
    EXPECT_OK(acc_dataloader_end_of_epoch(dl, &end));
    if (last_end) *ends_ok = 0; /* only the last batch may be flagged */
    last_end = end;
    acc_tensor_destroy(x);
    acc_tensor_destroy(y);
    ++batches;
  }
  if (batches > 0 && !last_end) *ends_ok = 0;
  out[pos] = -2;
  return batches;
}

/* Compares a run_epoch output with batches written as "0 1 2 3|4 5 6 7|..." */
static int batches_are(const int64_t* got, const char* want) {
  const char* p = want;
  int i = 0;
  while (*p) {
    if (*p == '|') {
      if (got[i++] != -1) return 0;
      ++p;
    } else if (*p == ' ') {
      ++p;
    } else {
      char* end;
      long v = strtol(p, &end, 10);
      if (got[i++] != v) return 0;
      p = end;
    }
  }
  return got[i] == -1 && got[i + 1] == -2;
}

/* test_skip_batch_sampler, test_skip_data_loader, test_skip_first_batches, test_end_of_dataloader */
static void test_skip_and_end(void) {
  int64_t out[MAX_OUT];
  int ends_ok;
  acc_dataset* ds = range_dataset(16);
  acc_dataloader *dl, *skip, *skip2;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4}", &dl));
  EXPECT_OK(acc_dataloader_skip_first_batches(dl, 2, &skip));
  EXPECT(run_epoch(skip, out, &ends_ok) == 2 && ends_ok);
  EXPECT(batches_are(out, "8 9 10 11|12 13 14 15"));
  EXPECT(run_epoch(skip, out, &ends_ok) == 2); /* every pass skips */
  int64_t len;
  EXPECT_OK(acc_dataloader_length(skip, &len));
  EXPECT(len == 2);
  EXPECT_OK(acc_dataloader_skip_first_batches(skip, 1, &skip2)); /* skips add up */
  EXPECT(run_epoch(skip2, out, &ends_ok) == 1 && batches_are(out, "12 13 14 15"));
  acc_dataloader_destroy(skip2);
  EXPECT_OK(acc_dataloader_skip_first_batches(dl, 9, &skip2)); /* more than there are: empty passes */
  EXPECT(run_epoch(skip2, out, &ends_ok) == 0);
  acc_dataloader_destroy(skip2);
  EXPECT_ERR(acc_dataloader_skip_first_batches(dl, -1, &skip2), ACC_ERR_INVALID_ARGUMENT, "num_batches");
  EXPECT(skip2 == NULL);
  acc_dataloader_destroy(skip);
  /* end_of_dataloader on the fourth batch, and again on the second pass */
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT(run_epoch(dl, out, &ends_ok) == 4 && ends_ok);
    EXPECT(batches_are(out, "0 1 2 3|4 5 6 7|8 9 10 11|12 13 14 15"));
  }
  int64_t epoch;
  EXPECT_OK(acc_dataloader_epoch(dl, &epoch));
  EXPECT(epoch == 2);
  acc_dataloader_destroy(dl);

  /* The same through a prepared loader, with the shard and with the dispatcher. */
  const char* configs[] = {NULL, "{\"dataloader_config\": {\"dispatch_batches\": true}}"};
  for (int c = 0; c < 2; ++c) {
    acc_accelerator* acc = make_acc(configs[c]);
    EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4}", &dl));
    EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
    for (int pass = 0; pass < 2; ++pass) {
      EXPECT(run_epoch(dl, out, &ends_ok) == 4 && ends_ok);
      EXPECT(batches_are(out, "0 1 2 3|4 5 6 7|8 9 10 11|12 13 14 15"));
    }
    EXPECT_OK(acc_dataloader_skip_first_batches(dl, 2, &skip));
    EXPECT_ERR(acc_prepare(acc, NULL, NULL, NULL, skip), ACC_ERR_INVALID_STATE, "already prepared");
    EXPECT(run_epoch(skip, out, &ends_ok) == 2 && ends_ok && batches_are(out, "8 9 10 11|12 13 14 15"));
    acc_dataloader_destroy(skip);
    EXPECT_OK(acc_dataloader_length(dl, &len));
    EXPECT(len == 4);
    acc_dataloader_destroy(dl);
    acc_accelerator_destroy(acc);
  }
  /* A short last batch is not padded with one process (Accelerate leaves it unsharded). */
  acc_dataset* ten = range_dataset(10);
  acc_accelerator* acc = make_acc(NULL);
  EXPECT_OK(acc_dataloader_create(ten, "{\"batch_size\": 4}", &dl));
  EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
  EXPECT(run_epoch(dl, out, &ends_ok) == 3 && ends_ok && batches_are(out, "0 1 2 3|4 5 6 7|8 9"));
  acc_dataloader_destroy(dl);
  acc_accelerator_destroy(acc);
  acc_dataset_destroy(ten);
  acc_dataset_destroy(ds);
}

/* Orders of two passes of a shuffling loader (batch 1 over 8 samples) prepared by `config`. */
static void two_orders(const char* config, const char* loader, int64_t* a, int64_t* b) {
  int ends_ok;
  acc_accelerator* acc = make_acc(config);
  acc_dataset* ds = range_dataset(8);
  acc_dataloader* dl;
  EXPECT_OK(acc_dataloader_create(ds, loader, &dl));
  EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
  EXPECT(run_epoch(dl, a, &ends_ok) == 8);
  EXPECT(run_epoch(dl, b, &ends_ok) == 8);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
}

static int same(const int64_t* a, const int64_t* b) {
  for (int i = 0;; ++i) {
    if (a[i] != b[i]) return 0;
    if (a[i] == -2) return 1;
  }
}

/* SeedableRandomSampler and test_reproducibility */
static void test_shuffling(void) {
  int64_t a[MAX_OUT], b[MAX_OUT], c[MAX_OUT], d[MAX_OUT];
  int ends_ok;
  const char* seedable = "{\"dataloader_config\": {\"use_seedable_sampler\": true, \"data_seed\": 42}}";
  two_orders(seedable, "{\"shuffle\": true}", a, b);
  EXPECT(!same(a, b)); /* each epoch reshuffles */
  /* SeedableRandomSampler: torch.randperm(8) from a generator seeded 42 + epoch (LibTorch's kernel,
   * which torch.randperm runs; torch.manual_seed(42) then torch.randperm(8) gives 6 3 0 7 2 1 4 5). */
  EXPECT(batches_are(a, "6|3|0|7|2|1|4|5"));
  EXPECT(batches_are(b, "4|5|7|1|3|2|6|0"));
  /* The loader's own seed does not matter to the seedable sampler; the data_seed does. */
  two_orders(seedable, "{\"shuffle\": true, \"seed\": 9}", c, d);
  EXPECT(same(a, c) && same(b, d));
  two_orders("{\"dataloader_config\": {\"use_seedable_sampler\": true, \"data_seed\": 43}}", "{\"shuffle\": true}", c,
             d);
  EXPECT(same(b, c));
  /* Without data_seed the sampler takes the default generator's seed: the accelerator's "seed". */
  two_orders("{\"seed\": 42, \"dataloader_config\": {\"use_seedable_sampler\": true}}", "{\"shuffle\": true}", c, d);
  EXPECT(same(a, c) && same(b, d));
  /* set_epoch goes back to an epoch's permutation; skip_first_batches keeps the epoch. */
  acc_accelerator* acc = make_acc(seedable);
  acc_dataset* ds = range_dataset(8);
  acc_dataloader *dl, *skip;
  EXPECT_OK(acc_dataloader_create(ds, "{\"shuffle\": true}", &dl));
  EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
  EXPECT_OK(acc_dataloader_set_epoch(dl, 1));
  EXPECT_OK(acc_dataloader_skip_first_batches(dl, 2, &skip));
  int64_t epoch;
  EXPECT_OK(acc_dataloader_epoch(skip, &epoch));
  EXPECT(epoch == 1);
  EXPECT(run_epoch(skip, c, &ends_ok) == 6 && ends_ok);
  EXPECT(same(c, b + 4)); /* epoch 1's order without its first two batches ("4|5|") */
  EXPECT(run_epoch(dl, c, &ends_ok) == 8 && same(c, b));
  EXPECT_OK(acc_dataloader_set_epoch(dl, 0));
  EXPECT(run_epoch(dl, c, &ends_ok) == 8 && same(c, a));
  acc_dataloader_destroy(skip);
  acc_dataloader_destroy(dl);
  acc_accelerator_destroy(acc);

  /* test_reproducibility: the generator is seeded from the default one, which set_seed seeds. */
  two_orders("{\"seed\": 21}", "{\"shuffle\": true}", a, b);
  two_orders("{\"seed\": 21}", "{\"shuffle\": true}", c, d);
  EXPECT(same(a, c) && same(b, d));
  EXPECT(!same(a, b));
  two_orders("{\"seed\": 42}", "{\"shuffle\": true}", c, d);
  EXPECT(!same(a, c));
  /* A loader seed: the generator's stream of permutations, whatever the accelerator's seed. */
  two_orders("{\"seed\": 1}", "{\"shuffle\": true, \"seed\": 5}", a, b);
  two_orders("{\"seed\": 2}", "{\"shuffle\": true, \"seed\": 5}", c, d);
  EXPECT(same(a, c) && same(b, d) && !same(a, b));
  /* Without the seedable sampler, set_epoch does not change the permutation stream. */
  acc = make_acc(NULL);
  EXPECT_OK(acc_dataloader_create(ds, "{\"shuffle\": true, \"seed\": 5}", &dl));
  EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
  EXPECT_OK(acc_dataloader_set_epoch(dl, 7));
  EXPECT(run_epoch(dl, c, &ends_ok) == 8 && same(c, a));
  acc_dataloader_destroy(dl);
  acc_accelerator_destroy(acc);
  acc_dataset_destroy(ds);
  /* The stateful data loader is torchdata's; refused clearly. */
  acc = make_acc("{\"dataloader_config\": {\"use_stateful_dataloader\": true}}");
  ds = range_dataset(4);
  EXPECT_OK(acc_dataloader_create(ds, NULL, &dl));
  EXPECT_ERR(acc_prepare(acc, NULL, NULL, NULL, dl), ACC_ERR_UNSUPPORTED, "use_stateful_dataloader");
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_accelerator_destroy(acc);
}

/* An iterable dataset: the stream 0, 1, ..., limit-1; start records the epochs it was given. */
struct stream {
  int64_t next, limit, fail_at;
  int64_t epochs[64];
  int starts;
};
static int g_stream_freed;
static acc_status stream_start(void* user, int64_t epoch) {
  struct stream* s = user;
  if (s->starts < 64) s->epochs[s->starts] = epoch;
  ++s->starts;
  s->next = 0;
  return ACC_OK;
}
static acc_status stream_next(void* user, acc_tensor** input, acc_tensor** target, int32_t* has) {
  struct stream* s = user;
  (void)target;
  if (s->next == s->fail_at) return 7;
  if (s->next >= s->limit) {
    *has = 0;
    return ACC_OK;
  }
  float v = (float)s->next++;
  *has = 1;
  return acc_tensor_from_host(&v, sizeof v, ACC_FLOAT32, NULL, 0, input);
}
static void stream_free(void* user) {
  (void)user;
  ++g_stream_freed;
}

static void test_iterable(void) {
  int64_t out[MAX_OUT];
  int ends_ok;
  static struct stream s = {0, 10, -1, {0}, 0};
  acc_dataset* ds;
  EXPECT_OK(acc_dataset_from_iterator(stream_start, stream_next, &s, stream_free, &ds));
  int32_t iterable;
  EXPECT_OK(acc_dataset_is_iterable(ds, &iterable));
  EXPECT(iterable == 1);
  int64_t len;
  EXPECT_ERR(acc_dataset_length(ds, &len), ACC_ERR_UNSUPPORTED, "no length");
  acc_dataloader* dl;
  EXPECT_ERR(acc_dataloader_create(ds, "{\"shuffle\": true}", &dl), ACC_ERR_INVALID_CONFIG, "shuffle");
  int64_t idx[2] = {0, 1}, sizes[1] = {2};
  EXPECT_ERR(acc_dataloader_create_from_batches(ds, idx, 2, sizes, 1, NULL, &dl), ACC_ERR_INVALID_ARGUMENT, "iterable");
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4}", &dl));
  EXPECT_ERR(acc_dataloader_length(dl, &len), ACC_ERR_UNSUPPORTED, "iterable");
  EXPECT(run_epoch(dl, out, &ends_ok) == 3 && ends_ok && batches_are(out, "0 1 2 3|4 5 6 7|8 9"));
  EXPECT(run_epoch(dl, out, &ends_ok) == 3 && ends_ok);
  EXPECT(s.starts == 2 && s.epochs[0] == 0 && s.epochs[1] == 1);
  acc_dataloader* skip;
  EXPECT_OK(acc_dataloader_skip_first_batches(dl, 1, &skip));
  EXPECT(run_epoch(skip, out, &ends_ok) == 2 && ends_ok && batches_are(out, "4 5 6 7|8 9"));
  EXPECT(s.epochs[2] == 2); /* the skipping loader kept the epoch */
  acc_dataloader_destroy(skip);
  acc_dataloader_destroy(dl);
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4, \"drop_last\": true}", &dl));
  EXPECT(run_epoch(dl, out, &ends_ok) == 2 && ends_ok && batches_are(out, "0 1 2 3|4 5 6 7"));
  acc_dataloader_destroy(dl);
  /* Prepared with one process: dispatched by default, or not; the same batches either way. */
  const char* configs[] = {NULL, "{\"dataloader_config\": {\"dispatch_batches\": false}}",
                           "{\"dataloader_config\": {\"split_batches\": true}}"};
  for (int c = 0; c < 3; ++c) {
    acc_accelerator* acc = make_acc(configs[c]);
    EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4}", &dl));
    EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
    EXPECT(run_epoch(dl, out, &ends_ok) == 3 && ends_ok && batches_are(out, "0 1 2 3|4 5 6 7|8 9"));
    EXPECT_OK(acc_dataloader_set_epoch(dl, 5));
    EXPECT(run_epoch(dl, out, &ends_ok) == 3);
    EXPECT(s.epochs[s.starts - 1] == 5);
    acc_dataloader_destroy(dl);
    acc_accelerator_destroy(acc);
  }
  /* A failing callback is ACC_ERR_CALLBACK; the loader reads one batch ahead, as Accelerate does. */
  s.fail_at = 5;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4}", &dl));
  acc_tensor *x = NULL, *y = NULL;
  int32_t has = 0;
  EXPECT_ERR(acc_dataloader_next(dl, &x, &y, &has), ACC_ERR_CALLBACK, "returned 7");
  EXPECT(x == NULL && has == 0);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  EXPECT(g_stream_freed == 1);
  EXPECT_ERR(acc_dataset_from_iterator(NULL, NULL, &s, stream_free, &ds), ACC_ERR_INVALID_ARGUMENT, "next is NULL");
  EXPECT(g_stream_freed == 2); /* released on failure too */
}

/* test_batch_sampler_with_varying_batch_size, through a loader of explicit batches */
static void test_explicit_batches(void) {
  int64_t out[MAX_OUT];
  int ends_ok;
  acc_dataset* ds = range_dataset(14);
  const int64_t idx[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, sizes[] = {3, 2, 4, 3, 2};
  acc_dataloader* dl;
  EXPECT_OK(acc_dataloader_create_from_batches(ds, idx, 14, sizes, 5, NULL, &dl));
  EXPECT(run_epoch(dl, out, &ends_ok) == 5 && ends_ok && batches_are(out, "0 1 2|3 4|5 6 7 8|9 10 11|12 13"));
  int64_t len;
  EXPECT_OK(acc_dataloader_length(dl, &len));
  EXPECT(len == 5);
  acc_dataloader* skip;
  EXPECT_OK(acc_dataloader_skip_first_batches(dl, 3, &skip));
  EXPECT(run_epoch(skip, out, &ends_ok) == 2 && batches_are(out, "9 10 11|12 13"));
  acc_dataloader_destroy(skip);
  acc_accelerator* acc = make_acc(NULL);
  EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
  EXPECT(run_epoch(dl, out, &ends_ok) == 5 && ends_ok && batches_are(out, "0 1 2|3 4|5 6 7 8|9 10 11|12 13"));
  acc_dataloader_destroy(dl);
  acc_accelerator_destroy(acc);
  /* split_batches cannot split batches of varying size */
  acc = make_acc("{\"dataloader_config\": {\"split_batches\": true}}");
  EXPECT_OK(acc_dataloader_create_from_batches(ds, idx, 14, sizes, 5, "{\"drop_last\": true}", &dl));
  EXPECT_ERR(acc_prepare(acc, NULL, NULL, NULL, dl), ACC_ERR_INVALID_ARGUMENT, "split_batches");
  acc_dataloader_destroy(dl);
  acc_accelerator_destroy(acc);
  acc = make_acc("{\"dataloader_config\": {\"dispatch_batches\": true}}");
  EXPECT_OK(acc_dataloader_create_from_batches(ds, idx, 14, sizes, 5, NULL, &dl));
  EXPECT_ERR(acc_prepare(acc, NULL, NULL, NULL, dl), ACC_ERR_INVALID_ARGUMENT, "dispatch_batches");
  acc_dataloader_destroy(dl);
  acc_accelerator_destroy(acc);
  const int64_t bad[] = {0, 14}, two[] = {2}, zero[] = {2, 0};
  EXPECT_ERR(acc_dataloader_create_from_batches(ds, bad, 2, two, 1, NULL, &dl), ACC_ERR_INVALID_ARGUMENT, "index 14");
  EXPECT_ERR(acc_dataloader_create_from_batches(ds, idx, 13, sizes, 5, NULL, &dl), ACC_ERR_INVALID_ARGUMENT,
             "num_indices is 13");
  EXPECT_ERR(acc_dataloader_create_from_batches(ds, idx, 2, zero, 2, NULL, &dl), ACC_ERR_INVALID_ARGUMENT,
             "batch_sizes[1]");
  EXPECT_ERR(acc_dataloader_create_from_batches(ds, idx, 14, sizes, 5, "{\"batch_size\": 2}", &dl),
             ACC_ERR_INVALID_CONFIG, "batch_size");
  EXPECT_ERR(acc_dataloader_create_from_batches(ds, NULL, 14, sizes, 5, NULL, &dl), ACC_ERR_INVALID_ARGUMENT,
             "indices is NULL");
  EXPECT(dl == NULL);
  EXPECT_OK(acc_dataloader_create_from_batches(ds, NULL, 0, NULL, 0, NULL, &dl));
  EXPECT(run_epoch(dl, out, &ends_ok) == 0);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

static void test_objects(void) {
  acc_bytes_list* list;
  EXPECT_OK(acc_bytes_list_create(&list));
  EXPECT_OK(acc_bytes_list_append(list, "first", 5));
  EXPECT_OK(acc_bytes_list_append(list, NULL, 0));
  EXPECT_OK(acc_bytes_list_append(list, "a\0b", 3)); /* bytes, not C strings */
  EXPECT_ERR(acc_bytes_list_append(list, NULL, 2), ACC_ERR_INVALID_ARGUMENT, "data is NULL");
  /* a size no buffer can have is a bad argument, not an internal error */
  EXPECT_ERR(acc_bytes_list_append(list, "x", SIZE_MAX), ACC_ERR_INVALID_ARGUMENT, "size 18446744073709551615");
  int64_t count;
  EXPECT_OK(acc_bytes_list_count(list, &count));
  EXPECT(count == 3);
  const void* data;
  size_t size;
  EXPECT_OK(acc_bytes_list_get(list, 2, &data, &size));
  EXPECT(size == 3 && memcmp(data, "a\0b", 3) == 0);
  EXPECT_OK(acc_bytes_list_get(list, 1, &data, &size));
  EXPECT(size == 0 && data != NULL);
  EXPECT_ERR(acc_bytes_list_get(list, 3, &data, &size), ACC_ERR_INVALID_ARGUMENT, "index 3");
  EXPECT(data == NULL && size == 0);

  acc_accelerator* acc = make_acc(NULL);
  acc_bytes_list* all;
  EXPECT_OK(acc_gather_object(acc, list, &all));
  EXPECT_OK(acc_bytes_list_count(all, &count));
  EXPECT(count == 3);
  EXPECT_OK(acc_bytes_list_get(all, 0, &data, &size));
  EXPECT(size == 5 && memcmp(data, "first", 5) == 0);
  acc_bytes_list_destroy(all);
  acc_bytes_list* empty;
  EXPECT_OK(acc_bytes_list_create(&empty));
  EXPECT_OK(acc_gather_object(acc, empty, &all));
  EXPECT_OK(acc_bytes_list_count(all, &count));
  EXPECT(count == 0);
  acc_bytes_list_destroy(all);
  EXPECT_ERR(acc_gather_object(acc, NULL, &all), ACC_ERR_INVALID_ARGUMENT, "items is NULL");

  /* gather_for_metrics over objects, one per sample, along a prepared loader: all 10, once each. */
  acc_dataset* ds = range_dataset(10);
  acc_dataloader* dl;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 4}", &dl));
  EXPECT_OK(acc_prepare(acc, NULL, NULL, NULL, dl));
  int64_t seen = 0;
  for (;;) {
    acc_tensor* x;
    int32_t has;
    EXPECT_OK(acc_dataloader_next(dl, &x, NULL, &has));
    if (!has) break;
    int64_t k, remainder;
    float v[4];
    EXPECT_OK(acc_tensor_numel(x, &k));
    EXPECT_OK(acc_tensor_to_host(x, v, sizeof(float) * (size_t)k));
    acc_bytes_list* items;
    EXPECT_OK(acc_bytes_list_create(&items));
    for (int64_t i = 0; i < k; ++i) {
      char text[16];
      int n = snprintf(text, sizeof text, "sample %d", (int)v[i]);
      EXPECT_OK(acc_bytes_list_append(items, text, (size_t)n));
    }
    EXPECT_OK(acc_gather_object_for_metrics(acc, items, &all));
    EXPECT_OK(acc_bytes_list_count(all, &count));
    for (int64_t i = 0; i < count; ++i) {
      char want[16];
      int n = snprintf(want, sizeof want, "sample %d", (int)(seen + i));
      EXPECT_OK(acc_bytes_list_get(all, i, &data, &size));
      EXPECT(size == (size_t)n && memcmp(data, want, size) == 0);
    }
    EXPECT_OK(acc_dataloader_remainder(dl, &remainder));
    EXPECT(remainder == 0); /* one process never pads */
    seen += count;
    acc_bytes_list_destroy(all);
    acc_bytes_list_destroy(items);
    acc_tensor_destroy(x);
  }
  EXPECT(seen == 10);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_bytes_list_destroy(empty);
  acc_bytes_list_destroy(list);
  acc_bytes_list_destroy(NULL);
  acc_accelerator_destroy(acc);
}

static acc_tensor* int64s(const int64_t* v, const int64_t* shape, int32_t ndim) {
  int64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) n *= shape[d];
  acc_tensor* t = NULL;
  EXPECT_OK(acc_tensor_from_host(v, sizeof(int64_t) * (size_t)n, ACC_INT64, shape, ndim, &t));
  return t;
}

/* Sample i of the callback dataset: {"input_ids": [i, i+1, i+2], "labels": the same}. */
static acc_status gpt_sample(void* user, int64_t index, acc_batch* sample) {
  (void)user;
  int64_t v[3] = {index % 7, (index + 1) % 7, (index + 2) % 7}, shape[1] = {3};
  acc_tensor* t = int64s(v, shape, 1);
  acc_status st = acc_batch_set(sample, "input_ids", t);
  if (st == ACC_OK) st = acc_batch_set(sample, "labels", t);
  acc_tensor_destroy(t);
  return st;
}

static acc_status failing_sample(void* user, int64_t index, acc_batch* sample) {
  (void)user;
  (void)sample;
  return index == 2 ? 42 : ACC_OK; /* index 0 and 1: no tensor at all */
}

/* Callbacks that destroy the sample batch libacc lends them (a double free before). */
static acc_status destroying_sample(void* user, int64_t index, acc_batch* sample) {
  (void)user;
  int64_t v[1] = {index}, shape[1] = {1};
  acc_tensor* t = int64s(v, shape, 1);
  acc_status st = acc_batch_set(sample, "input_ids", t);
  acc_tensor_destroy(t);
  acc_batch_destroy(sample);
  return st;
}
static acc_status destroying_next(void* user, acc_batch* sample, int32_t* has_sample) {
  *has_sample = 1;
  return destroying_sample(user, 0, sample);
}

/* One tensor handle as both input and target: libacc takes it once and frees it once. */
static acc_status same_tensor_sample(void* user, int64_t index, acc_tensor** input, acc_tensor** target) {
  (void)user;
  float v[1] = {(float)index};
  int64_t shape[1] = {1};
  acc_status st = acc_tensor_from_host(v, sizeof v, ACC_FLOAT32, shape, 1, input);
  *target = *input;
  return st;
}

static void test_lent_sample(void) {
  acc_dataset* ds = NULL;
  acc_dataloader* dl = NULL;
  acc_batch* got = NULL;
  EXPECT_OK(acc_dataset_from_batch_callback(3, destroying_sample, NULL, NULL, &ds));
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 2}", &dl));
  EXPECT_ERR(acc_dataloader_next_batch(dl, &got), ACC_ERR_CALLBACK,
             "dataset callback for index 0 called acc_batch_destroy on the sample batch");
  EXPECT(got == NULL);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  EXPECT_OK(acc_dataset_from_batch_iterator(NULL, destroying_next, NULL, NULL, &ds));
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 2}", &dl));
  EXPECT_ERR(acc_dataloader_next_batch(dl, &got), ACC_ERR_CALLBACK, "dataset next callback called acc_batch_destroy");
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);

  acc_tensor *x = NULL, *y = NULL;
  int32_t has = 0;
  float xv[2] = {0, 0}, yv[2] = {0, 0};
  EXPECT_OK(acc_dataset_from_callback(4, same_tensor_sample, NULL, NULL, &ds));
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 2}", &dl));
  EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
  EXPECT(acc_last_error_code() == ACC_OK); /* no second destroy refused along the way */
  EXPECT(has == 1 && acc_tensor_to_host(x, xv, sizeof xv) == ACC_OK && acc_tensor_to_host(y, yv, sizeof yv) == ACC_OK);
  EXPECT(xv[1] == 1 && yv[1] == 1);
  acc_tensor_destroy(x);
  acc_tensor_destroy(y);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
}

static void test_named_batches(void) {
  /* the handle: set keeps insertion order and replaces in place; get shares the data */
  acc_batch* b = NULL;
  EXPECT_OK(acc_batch_create(&b));
  int64_t rows[6] = {0, 1, 2, 3, 4, 5}, shape[2] = {2, 3}, mask_shape[1] = {2};
  acc_tensor* ids = int64s(rows, shape, 2);
  int64_t mask_v[2] = {1, 0};
  acc_tensor* mask = int64s(mask_v, mask_shape, 1);
  EXPECT_OK(acc_batch_set(b, "input_ids", ids));
  EXPECT_OK(acc_batch_set(b, "attention_mask", mask));
  EXPECT_OK(acc_batch_set(b, "input_ids", ids));
  int64_t count = 0;
  const char* name = NULL;
  int32_t has = -1;
  EXPECT_OK(acc_batch_count(b, &count));
  EXPECT(count == 2);
  EXPECT_OK(acc_batch_name(b, 0, &name));
  EXPECT(name && !strcmp(name, "input_ids"));
  EXPECT_OK(acc_batch_name(b, 1, &name));
  EXPECT(name && !strcmp(name, "attention_mask"));
  EXPECT_OK(acc_batch_contains(b, "labels", &has));
  EXPECT(has == 0);
  acc_tensor* got = NULL;
  EXPECT_OK(acc_batch_get(b, "attention_mask", &got));
  int64_t back[2] = {-1, -1};
  EXPECT_OK(acc_tensor_to_host(got, back, sizeof back));
  EXPECT(back[0] == 1 && back[1] == 0);
  acc_tensor_destroy(got);
  /* bad input names the culprit */
  EXPECT_ERR(acc_batch_get(b, "labels", &got), ACC_ERR_INVALID_ARGUMENT, "input_ids, attention_mask");
  EXPECT(got == NULL);
  EXPECT_ERR(acc_batch_set(b, "", ids), ACC_ERR_INVALID_ARGUMENT, "empty");
  EXPECT_ERR(acc_batch_set(b, NULL, ids), ACC_ERR_INVALID_ARGUMENT, "name");
  EXPECT_ERR(acc_batch_set(b, "x", NULL), ACC_ERR_INVALID_ARGUMENT, "tensor");
  EXPECT_ERR(acc_batch_set(NULL, "x", ids), ACC_ERR_INVALID_ARGUMENT, "batch");
  EXPECT_ERR(acc_batch_name(b, 2, &name), ACC_ERR_INVALID_ARGUMENT, "outside [0, 2)");
  EXPECT_ERR(acc_batch_count(NULL, &count), ACC_ERR_INVALID_ARGUMENT, "batch");

  /* a dataset of named columns: rows of each, names kept; mismatched rows refused by name */
  acc_dataset* ds = NULL;
  int64_t mask2[2] = {1, 0}, mask2_shape[2] = {2, 1};
  acc_tensor* m2 = int64s(mask2, mask2_shape, 2);
  int64_t s3[1] = {3};
  acc_tensor* three = int64s(rows, s3, 1);
  EXPECT_OK(acc_batch_set(b, "attention_mask", three));
  EXPECT_ERR(acc_dataset_from_batch(b, &ds), ACC_ERR_INVALID_ARGUMENT,
             "'attention_mask' has 3 rows but 'input_ids' has 2");
  EXPECT_OK(acc_batch_set(b, "attention_mask", m2));
  EXPECT_OK(acc_dataset_from_batch(b, &ds));
  acc_batch_destroy(b); /* the dataset copied the columns */
  acc_dataloader* dl = NULL;
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 2}", &dl));
  acc_batch* got_b = NULL;
  EXPECT_OK(acc_dataloader_next_batch(dl, &got_b));
  EXPECT(got_b != NULL);
  if (got_b) {
    EXPECT_OK(acc_batch_get(got_b, "input_ids", &got));
    int64_t v[6];
    EXPECT_OK(acc_tensor_to_host(got, v, sizeof v));
    EXPECT(v[0] == 0 && v[5] == 5);
    acc_tensor_destroy(got);
    acc_batch_destroy(got_b);
  }
  EXPECT_OK(acc_dataloader_next_batch(dl, &got_b));
  EXPECT(got_b == NULL); /* end of the epoch */
  /* two tensors: the (input, target) reading still works */
  acc_tensor *x = NULL, *y = NULL;
  EXPECT_OK(acc_dataloader_next(dl, &x, &y, &has));
  EXPECT(has == 1 && x && y);
  acc_tensor_destroy(x);
  acc_tensor_destroy(y);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tensor_destroy(ids);
  acc_tensor_destroy(mask);
  acc_tensor_destroy(m2);
  acc_tensor_destroy(three);

  /* a callback dataset of Hugging Face-style samples into the GPT's named forward */
  EXPECT_OK(acc_dataset_from_batch_callback(5, gpt_sample, NULL, NULL, &ds));
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 2}", &dl));
  acc_model* gpt = NULL;
  EXPECT_OK(acc_model_create("{\"type\": \"gpt\", \"vocab_size\": 7, \"block_size\": 3, \"n_layer\": 1, "
                             "\"n_head\": 1, \"n_embd\": 8}",
                             &gpt));
  EXPECT_OK(acc_dataloader_next_batch(dl, &got_b));
  acc_batch* out = NULL;
  EXPECT_OK(acc_model_forward_batch(gpt, got_b, &out));
  if (out) {
    acc_tensor* loss = NULL;
    EXPECT_OK(acc_batch_get(out, "loss", &loss));
    double l = 0;
    EXPECT_OK(acc_tensor_item(loss, &l));
    EXPECT(l > 0 && l < 10); /* ~ln 7 at initialisation */
    acc_tensor* logits = NULL;
    int64_t lshape[3] = {0, 0, 0};
    EXPECT_OK(acc_batch_get(out, "logits", &logits));
    EXPECT_OK(acc_tensor_shape(logits, lshape, 3));
    EXPECT(lshape[0] == 2 && lshape[1] == 3 && lshape[2] == 7);
    acc_tensor_destroy(loss);
    acc_tensor_destroy(logits);
    acc_batch_destroy(out);
  }
  /* a name the model does not take is refused by name */
  EXPECT_OK(acc_batch_set(got_b, "token_type_ids", ids = int64s(rows, shape, 2)));
  EXPECT_ERR(acc_model_forward_batch(gpt, got_b, &out), ACC_ERR_INVALID_ARGUMENT, "token_type_ids");
  EXPECT(out == NULL);
  EXPECT_ERR(acc_model_forward_batch(gpt, NULL, &out), ACC_ERR_INVALID_ARGUMENT, "batch");
  acc_tensor_destroy(ids);
  acc_batch_destroy(got_b);
  acc_model_destroy(gpt);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);

  /* callbacks that fail, or fill nothing, name the index */
  EXPECT_OK(acc_dataset_from_batch_callback(3, failing_sample, NULL, NULL, &ds));
  EXPECT_OK(acc_dataloader_create(ds, "{\"batch_size\": 1}", &dl));
  EXPECT_ERR(acc_dataloader_next_batch(dl, &got_b), ACC_ERR_CALLBACK, "no tensor for index 0");
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  EXPECT_ERR(acc_dataset_from_batch_callback(3, NULL, NULL, NULL, &ds), ACC_ERR_INVALID_ARGUMENT, "get");
}

int main(void) {
  test_skip_and_end();
  test_shuffling();
  test_iterable();
  test_explicit_batches();
  test_objects();
  test_named_batches();
  test_lent_sample();
  return finish();
}
