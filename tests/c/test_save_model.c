/* acc_save_model (Accelerate's save_model; docs/checkpoints.md, "save_model"): model.safetensors, or shards and
 * model.safetensors.index.json past max_shard_size; {"format": "pt"} metadata; the GPT's tied head not written;
 * stale shards of an earlier save removed; sizes parsed as Accelerate does, bad ones refused naming the string.
 *
 * `test_save_model DIR` only writes files for tests/checkpoint/read_save_model.py (which reads them with the
 * safetensors package): DIR/full (unsharded), DIR/sharded ("2KB"), DIR/reference.safetensors
 * (acc_model_save_safetensors) and DIR/raw/{names.txt, N.bin}: every state tensor's float32 values from
 * acc_tensor_to_host. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Also run by mp-save_model on several processes: a failed check ends the process (mp_common.h), so that it never
 * goes on into collectives its peers do not match. */
#include "../mp/mp_common.h"

static const char* kGpt =
    "{\"type\": \"gpt\", \"vocab_size\": 16, \"block_size\": 8, \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8}";
/* Three linear layers: each weight 16*16*4 = 1024 bytes, each bias 64 bytes. */
static const char* kMlp = "{\"type\": \"mlp\", \"sizes\": [16, 16, 16, 16]}";

static int exists(const char* dir, const char* file) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  struct stat st;
  return stat(path, &st) == 0;
}

static int count_files(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));)
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

/* The whole file (NUL-terminated; *size without the NUL), or NULL. */
static char* slurp(const char* dir, const char* file, size_t* size) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  buf[got] = 0;
  if (size) *size = got;
  return buf;
}

/* A safetensors file's header JSON and its data size. */
static char* header_of(const char* dir, const char* file, uint64_t* data_size) {
  size_t size = 0;
  char* all = slurp(dir, file, &size);
  if (!all || size < 8) {
    free(all);
    return NULL;
  }
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= (uint64_t)(unsigned char)all[i] << (8 * i);
  if (8 + len > size) {
    free(all);
    return NULL;
  }
  char* h = malloc(len + 1);
  memcpy(h, all + 8, len);
  h[len] = 0;
  if (data_size) *data_size = size - 8 - len;
  free(all);
  return h;
}

static int occurrences(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = text; (p = strstr(p, needle)); p += strlen(needle)) ++n;
  return n;
}

static void write_files(const char* dir) {
  acc_model* gpt = NULL;
  CHECK(acc_model_create(kGpt, &gpt));
  char path[1200];
  snprintf(path, sizeof path, "%s/full", dir);
  CHECK(acc_save_model(gpt, path, NULL));
  snprintf(path, sizeof path, "%s/sharded", dir);
  CHECK(acc_save_model(gpt, path, "2KB"));
  snprintf(path, sizeof path, "%s/reference.safetensors", dir);
  CHECK(acc_model_save_safetensors(gpt, path));
  snprintf(path, sizeof path, "%s/raw", dir);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/raw/names.txt", dir);
  FILE* names = fopen(path, "w");
  int64_t n = 0;
  CHECK(acc_model_state_size(gpt, &n));
  for (int64_t i = 0; i < n; ++i) {
    const char* name;
    acc_tensor* t;
    int64_t numel;
    CHECK(acc_model_state_get(gpt, i, &name, &t));
    CHECK(acc_tensor_numel(t, &numel));
    float* values = malloc((size_t)numel * sizeof(float) + 1);
    CHECK(acc_tensor_to_host(t, values, (size_t)numel * sizeof(float)));
    fprintf(names, "%s\n", name);
    snprintf(path, sizeof path, "%s/raw/%lld.bin", dir, (long long)i);
    FILE* f = fopen(path, "wb");
    fwrite(values, sizeof(float), (size_t)numel, f);
    fclose(f);
    free(values);
    acc_tensor_destroy(t);
  }
  fclose(names);
  acc_model_destroy(gpt);
}

/* `test_save_model prepared DIR` under `acc launch` (tests/mp/mp_test.py, case save_model): every process calls
 * acc_save_model on the prepared GPT; the main process writes DIR/out (and DIR/reference.safetensors), and when
 * the call returns on any process the files are complete. Then a save the main process cannot write fails on
 * every process. */
static int prepared_run(const char* dir) {
  acc_accelerator* acc = NULL;
  acc_model* gpt = NULL;
  CHECK(acc_accelerator_create("{\"seed\": 3}", &acc));
  CHECK(acc_model_create(kGpt, &gpt));
  CHECK(acc_prepare(acc, gpt, NULL, NULL, NULL));
  int32_t rank = 0;
  CHECK(acc_process_index(acc, &rank));
  char out[700], file[800];
  snprintf(out, sizeof out, "%s/out", dir);
  CHECK(acc_save_model(gpt, out, "2KB"));
  /* Returned: the main process has written everything. */
  EXPECT(exists(out, "model.safetensors.index.json"));
  EXPECT(exists(out, "model-00001-of-00005.safetensors"));
  EXPECT(exists(out, "model-00005-of-00005.safetensors"));
  if (rank == 0) {
    snprintf(file, sizeof file, "%s/reference.safetensors", dir);
    CHECK(acc_model_save_safetensors(gpt, file));
  }
  /* The main process cannot write under a regular file: it fails with the IO error, the others with
   * ACC_ERR_DISTRIBUTED ("failed on another process"). */
  snprintf(file, sizeof file, "%s/out/model-00001-of-00005.safetensors/x", dir);
  acc_status st = acc_save_model(gpt, file, NULL);
  if (rank == 0) EXPECT(st != ACC_OK && strstr(acc_last_error_message(), "model-00001-of-00005.safetensors") != NULL);
  else EXPECT(st == ACC_ERR_DISTRIBUTED && strstr(acc_last_error_message(), "another process") != NULL);
  /* Still usable afterwards. */
  CHECK(acc_save_model(gpt, out, NULL));
  EXPECT(exists(out, "model.safetensors") && !exists(out, "model.safetensors.index.json"));
  acc_model_destroy(gpt);
  acc_accelerator_destroy(acc);
  printf("rank %d: %d passed, %d failed\n", rank, g_passed, g_failed);
  return g_failed ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "prepared") == 0) return prepared_run(argv[2]);
  if (argc > 1) {
    write_files(argv[1]);
    return 0;
  }
  char root[] = "/tmp/acc-save-model-XXXXXX";
  if (!mkdtemp(root)) return 1;
  char dir[600];

  /* Unsharded: one model.safetensors with the format metadata, the tied head not written. */
  acc_model* gpt = NULL;
  EXPECT_OK(acc_model_create(kGpt, &gpt));
  snprintf(dir, sizeof dir, "%s/gpt", root);
  EXPECT_OK(acc_save_model(gpt, dir, NULL));
  EXPECT(exists(dir, "model.safetensors"));
  EXPECT(!exists(dir, "model.safetensors.index.json"));
  EXPECT(count_files(dir) == 1);
  uint64_t full_data = 0;
  char* h = header_of(dir, "model.safetensors", &full_data);
  EXPECT(h != NULL);
  int64_t n_state = 0;
  EXPECT_OK(acc_model_state_size(gpt, &n_state));
  if (h) {
    EXPECT(strstr(h, "\"__metadata__\":{\"format\":\"pt\"}") != NULL);
    EXPECT(strstr(h, "\"transformer.wte.weight\"") != NULL);
    EXPECT(strstr(h, "lm_head") == NULL);
    EXPECT(occurrences(h, "data_offsets") == n_state);
    free(h);
  }

  /* Sharded ("2KB" = 2000 bytes): model-0000i-of-0000N.safetensors and the index; the unsharded file of the
   * earlier save is removed (a loader would take it over the index). */
  EXPECT_OK(acc_save_model(gpt, dir, "2KB"));
  EXPECT(!exists(dir, "model.safetensors"));
  EXPECT(exists(dir, "model.safetensors.index.json"));
  int files = count_files(dir) - 1;
  EXPECT(files > 2);
  char* index = slurp(dir, "model.safetensors.index.json", NULL);
  EXPECT(index != NULL);
  if (index) {
    char want[128];
    snprintf(want, sizeof want, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
             (unsigned long long)full_data);
    EXPECT(strncmp(index, want, strlen(want)) == 0);
    EXPECT(occurrences(index, "safetensors\"") == n_state);
    for (int i = 1; i <= files; ++i) {
      char name[64];
      snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i, files);
      EXPECT(exists(dir, name));
      EXPECT(strstr(index, name) != NULL);
      uint64_t data = 0;
      char* sh = header_of(dir, name, &data);
      EXPECT(sh && strstr(sh, "\"__metadata__\":{\"format\":\"pt\"}") != NULL);
      EXPECT(data <= 2000 || (sh && occurrences(sh, "data_offsets") == 1));  /* a bigger tensor alone */
      free(sh);
    }
    free(index);
  }
  /* Unsharded again: the shards and the index go. */
  EXPECT_OK(acc_save_model(gpt, dir, "10GiB"));
  EXPECT(exists(dir, "model.safetensors"));
  EXPECT(count_files(dir) == 1);

  /* Stale shards: 3 files, then 2 (the third is removed); other files are left alone. */
  acc_model* mlp = NULL;
  EXPECT_OK(acc_model_create(kMlp, &mlp));
  snprintf(dir, sizeof dir, "%s/mlp", root);
  EXPECT_OK(acc_save_model(mlp, dir, "1100"));  /* [w0 b0] [w1 b1] [w2 b2] */
  EXPECT(exists(dir, "model-00001-of-00003.safetensors"));
  EXPECT(exists(dir, "model-00003-of-00003.safetensors"));
  FILE* keep = NULL;
  char keep_path[700];
  snprintf(keep_path, sizeof keep_path, "%s/config.json", dir);
  keep = fopen(keep_path, "w");
  if (keep) fclose(keep);
  EXPECT_OK(acc_save_model(mlp, dir, "2.2KB"));  /* [w0 b0 w1 b1] [w2 b2] */
  EXPECT(exists(dir, "model-00001-of-00002.safetensors"));
  EXPECT(exists(dir, "model-00002-of-00002.safetensors"));
  EXPECT(!exists(dir, "model-00001-of-00003.safetensors"));
  EXPECT(!exists(dir, "model-00002-of-00003.safetensors"));
  EXPECT(!exists(dir, "model-00003-of-00003.safetensors"));
  EXPECT(exists(dir, "config.json"));
  EXPECT(count_files(dir) == 4);
  index = slurp(dir, "model.safetensors.index.json", NULL);
  EXPECT(index && strstr(index, "\"total_size\": 3264\n") != NULL);
  EXPECT(index && strstr(index, "\"layers.2.weight\": \"model-00002-of-00002.safetensors\"") != NULL);
  EXPECT(index && strstr(index, "\"layers.1.bias\": \"model-00001-of-00002.safetensors\"") != NULL);
  free(index);
  /* A tensor larger than the limit gets a shard of its own, before the one being filled. */
  EXPECT_OK(acc_save_model(mlp, dir, "100"));
  EXPECT(exists(dir, "model-00006-of-00006.safetensors"));
  EXPECT(count_files(dir) == 8);

  /* Sizes: bad ones are refused naming the string; nothing is written. */
  snprintf(dir, sizeof dir, "%s/bad", root);
  EXPECT_ERR(acc_save_model(mlp, dir, "10XB"), ACC_ERR_INVALID_ARGUMENT, "'10XB'");
  EXPECT_ERR(acc_save_model(mlp, dir, "GB"), ACC_ERR_INVALID_ARGUMENT, "'GB'");
  EXPECT_ERR(acc_save_model(mlp, dir, "-1GB"), ACC_ERR_INVALID_ARGUMENT, "'-1GB'");
  EXPECT_ERR(acc_save_model(mlp, dir, "ten"), ACC_ERR_INVALID_ARGUMENT, "'ten'");
  EXPECT(!exists(root, "bad"));
  EXPECT_ERR(acc_save_model(mlp, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "dir");
  EXPECT_ERR(acc_save_model(NULL, dir, NULL), ACC_ERR_INVALID_ARGUMENT, "model");
  /* A file where the directory should be. */
  snprintf(dir, sizeof dir, "%s/mlp/config.json", root);
  EXPECT_ERR(acc_save_model(mlp, dir, NULL), ACC_ERR_INVALID_ARGUMENT, "should be a directory");

  /* A prepared model: saved by the main process (here the only one), the same files. */
  acc_accelerator* acc = NULL;
  EXPECT_OK(acc_accelerator_create("{\"seed\": 3}", &acc));
  EXPECT_OK(acc_prepare(acc, mlp, NULL, NULL, NULL));
  snprintf(dir, sizeof dir, "%s/prepared", root);
  EXPECT_OK(acc_save_model(mlp, dir, "2.2KB"));
  EXPECT(exists(dir, "model-00002-of-00002.safetensors"));
  EXPECT(count_files(dir) == 3);

  acc_accelerator_destroy(acc);
  acc_model_destroy(mlp);
  acc_model_destroy(gpt);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) ++g_failed;
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
