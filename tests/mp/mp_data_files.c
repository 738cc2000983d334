/* A dataset from files under several processes (tests/mp/mp_test.py case_data_files): every rank builds
 * tests/data/prep/text.jsonl tokenized (the tiny tokenizer, padded by DataCollatorWithPadding) and a loader over it,
 * prepared as acc_prepare shards any loader, beside a loader over the row numbers 0..N-1 prepared the same way: each
 * batch of the files loader must be the collated rows the number loader names (BatchSamplerShard's plan), row for
 * row. The rank prints the rows it got ("rows: 0 1 2 3 ...") for the test to check that the ranks' shards are
 * disjoint and cover the dataset.
 *   mp_data_files SOURCE_ROOT BATCH_SIZE SHUFFLE */
#include <stdint.h>
#include <stdio.h>

#include "mp_common.h"

static int64_t* host_of(const acc_batch* b, const char* name, int64_t shape[2]) {
  acc_tensor* t = NULL;
  int64_t n = 0;
  CHECK(acc_batch_get(b, name, &t));
  CHECK(acc_tensor_shape(t, shape, 2));
  CHECK(acc_tensor_numel(t, &n));
  int64_t* v = (int64_t*)malloc((size_t)n * sizeof(int64_t));
  CHECK(acc_tensor_to_host(t, v, (size_t)n * sizeof(int64_t)));
  acc_tensor_destroy(t);
  return v;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: mp_data_files SOURCE_ROOT BATCH_SIZE SHUFFLE\n");
    return 2;
  }
  char dir[1024], file[1024], options[256];
  snprintf(dir, sizeof dir, "%s/tests/text/tiny/bytebpe", argv[1]);
  snprintf(file, sizeof file, "%s/tests/data/prep/text.jsonl", argv[1]);
  snprintf(options, sizeof options, "{\"batch_size\": %s, \"shuffle\": %s, \"seed\": 11}", argv[2],
           atoi(argv[3]) ? "true" : "false");
  acc_accelerator* acc = NULL;
  acc_tokenizer* tok = NULL;
  acc_dataset *ds = NULL, *numbers_ds = NULL;
  acc_dataloader *dl = NULL, *numbers = NULL;
  CHECK(acc_accelerator_create("{}", &acc));
  CHECK(acc_tokenizer_from_pretrained(dir, &tok));
  CHECK(acc_dataset_from_files(file, tok, "{\"mode\": \"tokenize\", \"collator\": \"with_padding\"}", &ds));
  int64_t n = 0;
  CHECK(acc_dataset_length(ds, &n));
  EXPECT(n == 24);
  int64_t* idx = (int64_t*)malloc((size_t)n * sizeof(int64_t));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  const int64_t shape[2] = {n, 1};
  acc_tensor* col = NULL;
  CHECK(acc_tensor_from_host(idx, (size_t)n * sizeof(int64_t), ACC_INT64, shape, 2, &col));
  CHECK(acc_dataset_from_tensors(col, NULL, &numbers_ds));
  CHECK(acc_dataloader_create(ds, options, &dl));
  CHECK(acc_dataloader_create(numbers_ds, options, &numbers));
  CHECK(acc_prepare(acc, NULL, NULL, NULL, dl));
  CHECK(acc_prepare(acc, NULL, NULL, NULL, numbers));
  printf("rank %s rows:", getenv("RANK") ? getenv("RANK") : "0");
  for (;;) {
    acc_batch *b = NULL, *nb = NULL;
    CHECK(acc_dataloader_next_batch(dl, &b));
    CHECK(acc_dataloader_next_batch(numbers, &nb));
    EXPECT((b == NULL) == (nb == NULL));
    if (!b || !nb) break;
    int64_t s[2] = {0, 0}, ns[2] = {0, 0}, ms[2] = {0, 0};
    int64_t* ids = host_of(b, "input_ids", s);
    int64_t* mask = host_of(b, "attention_mask", ms);
    acc_tensor* nt = NULL;
    CHECK(acc_batch_get(nb, "input", &nt));
    CHECK(acc_tensor_shape(nt, ns, 2));
    int64_t* rows = (int64_t*)malloc((size_t)ns[0] * sizeof(int64_t));
    CHECK(acc_tensor_to_host(nt, rows, (size_t)ns[0] * sizeof(int64_t)));
    acc_tensor_destroy(nt);
    EXPECT(s[0] == ns[0]);
    for (int64_t r = 0; r < s[0] && r < ns[0]; ++r) {
      /* Row r of this batch is dataset row rows[r], collated alone (no padding), then padded on the right. */
      acc_batch* one = NULL;
      int64_t os[2] = {0, 0};
      CHECK(acc_dataset_get_batch(ds, &rows[r], 1, &one));
      int64_t* want = host_of(one, "input_ids", os);
      int64_t real = 0;
      for (int64_t k = 0; k < s[1]; ++k) real += mask[r * s[1] + k];
      EXPECT(real == os[1]);
      for (int64_t k = 0; k < os[1] && k < s[1]; ++k) EXPECT(ids[r * s[1] + k] == want[k]);
      free(want);
      acc_batch_destroy(one);
      printf(" %lld", (long long)rows[r]);
    }
    free(ids);
    free(mask);
    free(rows);
    acc_batch_destroy(b);
    acc_batch_destroy(nb);
  }
  printf("\n");
  acc_dataloader_destroy(dl);
  acc_dataloader_destroy(numbers);
  acc_dataset_destroy(ds);
  acc_dataset_destroy(numbers_ds);
  acc_tensor_destroy(col);
  acc_tokenizer_destroy(tok);
  acc_accelerator_destroy(acc);
  free(idx);
  return finish();
}
