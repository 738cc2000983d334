/* Datasets from files through the C ABI (acc.h, "Datasets from files").
 *   test_data_files SOURCE_ROOT checks        the ABI's contract: handles, options and columns named in errors,
 *                                             loaders over the dataset, acc_dataset_get_batch, the cache
 *   test_data_files SOURCE_ROOT dump PLAN OUT  for each line of PLAN ("input<TAB>options JSON<TAB>batch size"), a
 *                                             dataset of tests/data/prep/<input> with the tiny tokenizer, read by a
 *                                             loader in order; every batch written to OUT as one JSON line, which
 *                                             check_data_files.py compares with tests/data/prep/expected. */
#include "check.h"

#include <stdint.h>

static acc_tokenizer* tiny(const char* root) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tests/text/tiny/bytebpe", root);
  acc_tokenizer* tok = NULL;
  if (acc_tokenizer_from_pretrained(dir, &tok) != ACC_OK) {
    fprintf(stderr, "tokenizer: %s\n", acc_last_error_message());
    exit(1);
  }
  return tok;
}

/* One batch as {"name": {"shape": [...], "data": [...]}, ...}. */
static int write_batch(FILE* out, const acc_batch* b) {
  int64_t n = 0;
  if (acc_batch_count(b, &n) != ACC_OK) return 0;
  fputc('{', out);
  for (int64_t i = 0; i < n; ++i) {
    const char* name = NULL;
    acc_tensor* t = NULL;
    int32_t ndim = 0;
    int64_t shape[8], numel = 0;
    if (acc_batch_name(b, i, &name) != ACC_OK || acc_batch_get(b, name, &t) != ACC_OK) return 0;
    int ok = acc_tensor_ndim(t, &ndim) == ACC_OK && ndim <= 8 && acc_tensor_shape(t, shape, 8) == ACC_OK &&
             acc_tensor_numel(t, &numel) == ACC_OK;
    int64_t* data = ok ? (int64_t*)malloc((size_t)(numel > 0 ? numel : 1) * sizeof(int64_t)) : NULL;
    ok = ok && data && acc_tensor_to_host(t, data, (size_t)numel * sizeof(int64_t)) == ACC_OK;
    acc_tensor_destroy(t);
    if (!ok) {
      free(data);
      return 0;
    }
    fprintf(out, "%s\"%s\": {\"shape\": [", i ? ", " : "", name);
    for (int32_t d = 0; d < ndim; ++d) fprintf(out, "%s%lld", d ? ", " : "", (long long)shape[d]);
    fputs("], \"data\": [", out);
    for (int64_t k = 0; k < numel; ++k) fprintf(out, "%s%lld", k ? ", " : "", (long long)data[k]);
    fputs("]}", out);
    free(data);
  }
  fputc('}', out);
  return 1;
}

static int dump(const char* root, const char* plan_path, const char* out_path) {
  FILE* plan = fopen(plan_path, "r");
  FILE* out = fopen(out_path, "w");
  if (!plan || !out) {
    fprintf(stderr, "cannot open %s or %s\n", plan_path, out_path);
    return 2;
  }
  acc_tokenizer* tok = tiny(root);
  static char line[1 << 16];
  while (fgets(line, sizeof line, plan)) {
    char* input = strtok(line, "\t");
    char* options = strtok(NULL, "\t");
    char* size = strtok(NULL, "\t\n");
    if (!input || !options || !size) continue;
    char path[1024], loader_options[64];
    snprintf(path, sizeof path, "%s/tests/data/prep/%s", root, input);
    snprintf(loader_options, sizeof loader_options, "{\"batch_size\": %s}", size);
    acc_dataset* ds = NULL;
    acc_dataloader* dl = NULL;
    if (acc_dataset_from_files(path, tok, options, &ds) != ACC_OK ||
        acc_dataloader_create(ds, loader_options, &dl) != ACC_OK) {
      fprintf(out, "{\"error\": \"%s\"}\n", acc_last_error_message());
      ++g_failed;
      acc_dataset_destroy(ds);
      continue;
    }
    fputs("{\"batches\": [", out);
    acc_batch* b = NULL;
    int first = 1;
    while (acc_dataloader_next_batch(dl, &b) == ACC_OK && b) {
      if (!first) fputs(", ", out);
      first = 0;
      EXPECT(write_batch(out, b));
      acc_batch_destroy(b);
      b = NULL;
    }
    fputs("]}\n", out);
    ++g_passed;
    acc_dataloader_destroy(dl);
    acc_dataset_destroy(ds);
  }
  fclose(plan);
  fclose(out);
  acc_tokenizer_destroy(tok);
  return finish();
}

static int64_t first_dim(const acc_batch* b, const char* name, int dim) {
  acc_tensor* t = NULL;
  int64_t shape[8] = {0};
  if (acc_batch_get(b, name, &t) != ACC_OK) return -1;
  int ok = acc_tensor_shape(t, shape, 8) == ACC_OK;
  acc_tensor_destroy(t);
  return ok ? shape[dim] : -1;
}

static int checks(const char* root, const char* scratch) {
  acc_tokenizer* tok = tiny(root);
  char text[1024], messages[1024], folder[1024];
  snprintf(text, sizeof text, "%s/tests/data/prep/text.jsonl", root);
  snprintf(messages, sizeof messages, "%s/tests/data/prep/messages.jsonl", root);
  snprintf(folder, sizeof folder, "%s/tests/data/prep", root);
  acc_dataset* ds = NULL;

  /* Bad input: named, nothing left behind. */
  EXPECT_ERR(acc_dataset_from_files(text, NULL, NULL, &ds), ACC_ERR_INVALID_ARGUMENT, "tok");
  EXPECT(ds == NULL);
  EXPECT_ERR(acc_dataset_from_files(text, tok, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "out");
  EXPECT_ERR(acc_dataset_from_files(NULL, tok, NULL, &ds), ACC_ERR_INVALID_ARGUMENT, "files");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"block_sise\": 8}", &ds), ACC_ERR_INVALID_CONFIG, "block_sise");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"mode\": \"pretrain\"}", &ds), ACC_ERR_INVALID_CONFIG,
             "\"group_texts\"");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"block_size\": 0}", &ds), ACC_ERR_INVALID_CONFIG, "'block_size'");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"collator\": \"padded\"}", &ds), ACC_ERR_INVALID_CONFIG,
             "'collator'");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "[1]", &ds), ACC_ERR_INVALID_CONFIG, "JSON object");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"files\": [\"a.jsonl\"]}", &ds), ACC_ERR_INVALID_CONFIG, "once");
  /* A column the file lacks: named, with the columns there are. */
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"columns\": [\"body\"]}", &ds), ACC_ERR_INVALID_ARGUMENT, "'body'");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"columns\": [\"body\"]}", &ds), ACC_ERR_INVALID_ARGUMENT, "text");
  EXPECT_ERR(acc_dataset_from_files(text, tok, "{\"mode\": \"tokenize\", \"text_column\": \"body\"}", &ds),
             ACC_ERR_INVALID_ARGUMENT, "'body'");
  EXPECT_ERR(acc_dataset_from_files("/nonexistent/rows.jsonl", tok, NULL, &ds), ACC_ERR_IO, "/nonexistent/rows.jsonl");
  EXPECT(ds == NULL);
  EXPECT_ERR(acc_dataset_get_batch(NULL, NULL, 1, NULL), ACC_ERR_INVALID_ARGUMENT, "out");

  /* A loader over messages with assistant-only loss and TRL's collator: batches of the padded length of their rows. */
  EXPECT(acc_dataset_from_files(messages, tok, "{\"assistant_only_loss\": true}", &ds) == ACC_OK);
  int64_t n = 0;
  EXPECT(acc_dataset_length(ds, &n) == ACC_OK && n == 12);
  acc_dataloader* dl = NULL;
  EXPECT(acc_dataloader_create(ds, "{\"batch_size\": 4, \"shuffle\": true, \"seed\": 3}", &dl) == ACC_OK);
  int batches = 0, rows = 0;
  acc_batch* b = NULL;
  while (acc_dataloader_next_batch(dl, &b) == ACC_OK && b) {
    int64_t r = first_dim(b, "input_ids", 0);
    EXPECT(first_dim(b, "labels", 1) == first_dim(b, "input_ids", 1));
    EXPECT(first_dim(b, "attention_mask", 1) == first_dim(b, "input_ids", 1));
    rows += (int)r;
    ++batches;
    acc_batch_destroy(b);
    b = NULL;
  }
  EXPECT(batches == 3 && rows == 12);
  acc_dataloader_destroy(dl);
  /* get_batch: the collator's batch of the rows asked for; indices outside the dataset named. */
  int64_t idx[2] = {9, 0};
  EXPECT(acc_dataset_get_batch(ds, idx, 2, &b) == ACC_OK && first_dim(b, "input_ids", 0) == 2);
  acc_batch_destroy(b);
  b = NULL;
  int64_t bad[1] = {12};
  EXPECT_ERR(acc_dataset_get_batch(ds, bad, 1, &b), ACC_ERR_INVALID_ARGUMENT, "12");
  acc_dataset_destroy(ds);
  ds = NULL;

  /* Packing: one padding-free row per batch, position_ids restarting per sample. */
  EXPECT(acc_dataset_from_files(text, tok, "{\"packing\": true, \"max_length\": 128}", &ds) == ACC_OK);
  int64_t zero[1] = {0};
  EXPECT(acc_dataset_get_batch(ds, zero, 1, &b) == ACC_OK);
  if (b) {
    acc_tensor* pos = NULL;
    EXPECT(acc_batch_get(b, "position_ids", &pos) == ACC_OK);
    int64_t len = first_dim(b, "position_ids", 1), restarts = 0;
    int64_t* p = (int64_t*)malloc((size_t)len * sizeof(int64_t));
    EXPECT(p && acc_tensor_to_host(pos, p, (size_t)len * sizeof(int64_t)) == ACC_OK);
    for (int64_t i = 0; p && i < len; ++i) restarts += p[i] == 0;
    EXPECT(p && p[0] == 0 && restarts > 1);
    free(p);
    acc_tensor_destroy(pos);
    acc_batch_destroy(b);
    b = NULL;
  }
  acc_dataset_destroy(ds);
  ds = NULL;

  /* The cache: a second build reads the cache file and gives the same batches. */
  char options[2048];
  snprintf(options, sizeof options, "{\"mode\": \"group_texts\", \"block_size\": 16, \"cache_dir\": \"%s/cache\"}",
           scratch);
  acc_batch* a = NULL;
  EXPECT(acc_dataset_from_files(text, tok, options, &ds) == ACC_OK);
  EXPECT(acc_dataset_get_batch(ds, idx + 1, 1, &a) == ACC_OK);
  acc_dataset_destroy(ds);
  ds = NULL;
  EXPECT(acc_dataset_from_files(text, tok, options, &ds) == ACC_OK);
  EXPECT(acc_dataset_get_batch(ds, idx + 1, 1, &b) == ACC_OK);
  EXPECT(a && b && first_dim(a, "input_ids", 1) == 16 && first_dim(b, "labels", 1) == 16);
  acc_batch_destroy(a);
  acc_batch_destroy(b);
  acc_dataset_destroy(ds);
  ds = NULL;

  /* A folder of files of several schemas is refused naming the folder's trouble, not crashing. */
  acc_status st = acc_dataset_from_files(folder, tok, NULL, &ds);
  EXPECT(st != ACC_OK && ds == NULL && strlen(acc_last_error_message()) > 0);

  /* From the accelerator's data settings: the same dataset as the options, the settings in the run record with their
   * source, a bad setting named with its value and source. */
  char config[4096], record[1024];
  snprintf(
      config, sizeof config,
      "{\"project_dir\": \"%s/run\", \"data\": {\"files\": \"%s\", \"mode\": \"group_texts\", \"block_size\": 16}}",
      scratch, text);
  acc_accelerator* accel = NULL;
  EXPECT(acc_accelerator_create(config, &accel) == ACC_OK);
  EXPECT(acc_dataset_from_config(accel, tok, &ds) == ACC_OK);
  EXPECT(acc_dataset_get_batch(ds, idx + 1, 1, &b) == ACC_OK && b && first_dim(b, "labels", 1) == 16);
  acc_batch_destroy(b);
  b = NULL;
  acc_dataset_destroy(ds);
  ds = NULL;
  EXPECT_ERR(acc_dataset_from_config(NULL, tok, &ds), ACC_ERR_INVALID_ARGUMENT, "acc");
  acc_accelerator_destroy(accel);
  snprintf(record, sizeof record, "%s/run/acc_run_config.json", scratch);
  FILE* f = fopen(record, "r");
  static char text_of_record[1 << 20];
  size_t got = f ? fread(text_of_record, 1, sizeof text_of_record - 1, f) : 0;
  if (f) fclose(f);
  text_of_record[got] = '\0';
  EXPECT(strstr(text_of_record, "\"data.block_size\"") != NULL);
  EXPECT(strstr(text_of_record, "\"block_size\": 16") != NULL);
  accel = NULL;
  EXPECT(acc_accelerator_create("{\"data\": {\"mode\": \"tokenize\"}}", &accel) == ACC_OK);
  EXPECT_ERR(acc_dataset_from_config(accel, tok, &ds), ACC_ERR_INVALID_CONFIG,
             "'data.files' = null (from the default)");
  acc_accelerator_destroy(accel);
  accel = NULL;
  EXPECT_ERR(acc_accelerator_create("{\"data\": {\"block_size\": 0}}", &accel), ACC_ERR_INVALID_CONFIG,
             "data.block_size");
  EXPECT_ERR(acc_accelerator_create("{\"data\": {\"packing_strategy\": \"best\"}}", &accel), ACC_ERR_INVALID_CONFIG,
             "data.packing_strategy");
  EXPECT(accel == NULL);

  acc_tokenizer_destroy(tok);
  return finish();
}

int main(int argc, char** argv) {
  if (argc == 5 && !strcmp(argv[2], "dump")) return dump(argv[1], argv[3], argv[4]);
  if (argc == 4 && !strcmp(argv[2], "checks")) return checks(argv[1], argv[3]);
  fprintf(stderr, "usage: test_data_files SOURCE_ROOT checks SCRATCH | dump PLAN OUT\n");
  return 2;
}
