/* Dataset files to batches through libacc (bench/data.py drives it beside datasets + transformers + a DataLoader):
 * acc_dataset_from_files (read, tokenize, group or pack, on `threads` threads), then a loader reads every batch
 * (collated, padded) once, each copied to host memory as a consumer would. Prints one JSON line: seconds to build,
 * seconds to batch, rows, batches, tokens (the input_ids elements of every batch) and a checksum of the ids.
 *   data_bench FILE TOKENIZER_DIR OPTIONS_JSON BATCH_SIZE */
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define TRY(call)                                                          \
  do {                                                                     \
    if ((call) != ACC_OK) {                                                \
      fprintf(stderr, "%s failed: %s\n", #call, acc_last_error_message()); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: data_bench FILE TOKENIZER_DIR OPTIONS_JSON BATCH_SIZE\n");
    return 2;
  }
  acc_tokenizer* tok = NULL;
  acc_dataset* ds = NULL;
  acc_dataloader* dl = NULL;
  char loader[64];
  snprintf(loader, sizeof loader, "{\"batch_size\": %s}", argv[4]);
  TRY(acc_tokenizer_from_pretrained(argv[2], &tok));
  const double t0 = now();
  TRY(acc_dataset_from_files(argv[1], tok, argv[3], &ds));
  const double t1 = now();
  TRY(acc_dataloader_create(ds, loader, &dl));
  int64_t rows = 0, batches = 0, tokens = 0;
  uint64_t sum = 0;
  int64_t* buf = NULL;
  size_t cap = 0;
  for (;;) {
    acc_batch* b = NULL;
    TRY(acc_dataloader_next_batch(dl, &b));
    if (!b) break;
    acc_tensor* t = NULL;
    int64_t n = 0, shape[2] = {0, 0};
    TRY(acc_batch_get(b, "input_ids", &t));
    TRY(acc_tensor_numel(t, &n));
    TRY(acc_tensor_shape(t, shape, 2));
    if ((size_t)n > cap) {
      cap = (size_t)n;
      buf = (int64_t*)realloc(buf, cap * sizeof(int64_t));
    }
    TRY(acc_tensor_to_host(t, buf, (size_t)n * sizeof(int64_t)));
    for (int64_t i = 0; i < n; ++i) sum = sum * 1000003u + (uint64_t)buf[i];
    acc_tensor_destroy(t);
    acc_batch_destroy(b);
    rows += shape[0];
    tokens += n;
    ++batches;
  }
  const double t2 = now();
  printf("{\"build_s\": %.6f, \"batch_s\": %.6f, \"rows\": %lld, \"batches\": %lld, \"tokens\": %lld, \"checksum\": "
         "\"%llu\"}\n",
         t1 - t0, t2 - t1, (long long)rows, (long long)batches, (long long)tokens, (unsigned long long)sum);
  free(buf);
  acc_dataloader_destroy(dl);
  acc_dataset_destroy(ds);
  acc_tokenizer_destroy(tok);
  return 0;
}
