/* Big-model inference through the C ABI: a Llama of 7 billion parameters built empty (acc_model_from_config
 * with "device": "meta") costs no weight memory; its module sizes and device maps (acc_model_module_sizes,
 * acc_infer_auto_device_map); bad options named. tests/cpp/test_device_map checks the maps against Accelerate's. */
#include <stdint.h>
#include <unistd.h>

#include "check.h"

static const char* kLlama7b = "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 32000, \"hidden_size\": "
                              "4096, \"intermediate_size\": 11008,"
                              " \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 32, "
                              "\"max_position_embeddings\": 4096,"
                              " \"tie_word_embeddings\": false}";

/* Resident memory of this process, bytes. */
static long long rss(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long long pages = 0, resident = 0;
  if (!f) return -1;
  if (fscanf(f, "%lld %lld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

/* The integer after "\"key\": " in a JSON text, or -1. */
static long long json_int(const char* json, const char* key) {
  char needle[256];
  snprintf(needle, sizeof needle, "\"%s\": ", key);
  const char* at = strstr(json, needle);
  return at ? atoll(at + strlen(needle)) : -1;
}

/* VmHWM, the peak resident memory since the last reset_peak(), bytes. */
static long long peak(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = atoll(line + 6);
  if (f) fclose(f);
  return kb * 1024;
}

static void reset_peak(void) {
  FILE* f = fopen("/proc/self/clear_refs", "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
}

/* Greedy tokens and peak resident memory (over the load and the generation, above `base`) of the model in dir,
 * loaded with `options`. */
static long long run(const char* dir, const char* options, int64_t* tokens, long long base) {
  reset_peak();
  acc_model* m = NULL;
  CHECK(acc_model_from_pretrained(dir, options, &m));
  const int64_t prompt[6] = {5, 17, 300, 42, 9, 1000};
  const int64_t shape[2] = {1, 6};
  acc_tensor *x, *out;
  CHECK(acc_tensor_from_host(prompt, sizeof prompt, ACC_INT64, shape, 2, &x));
  CHECK(acc_generate(m, x, NULL, "{\"max_new_tokens\": 8, \"eos_token_id\": []}", NULL, NULL, &out));
  CHECK(acc_tensor_to_host(out, tokens, 14 * sizeof(int64_t)));
  const long long used = peak() - base;
  acc_tensor_destroy(out);
  acc_tensor_destroy(x);
  acc_model_destroy(m);
  return used;
}

/* Disk offload: a model about 3 times larger than the memory budget generates the same tokens as in memory, its
 * peak resident memory within the budget plus a layer plus the runtime's working memory. */
static void disk_offload(void) {
  const char* config =
      "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 4096, \"hidden_size\": 512, \"intermediate_size\": "
      "1536,"
      " \"num_hidden_layers\": 12, \"num_attention_heads\": 8, \"initializer_range\": 0.2, \"eos_token_id\": 2}";
  char dir[] = "/tmp/acc_offload_XXXXXX";
  EXPECT(mkdtemp(dir) != NULL);
  acc_model* m = NULL;
  CHECK(acc_model_from_config(config, NULL, &m));
  CHECK(acc_model_save_pretrained(m, dir, NULL));
  acc_model_destroy(m);
  const long long base = rss();
  int64_t in_memory[14], offloaded[14];
  const long long budget = 60 * 1000 * 1000, layer = 4LL * (4 * 512 * 512 + 3 * 512 * 1536 + 2 * 512);
  const long long disk =
      run(dir, "{\"device_map\": \"sequential\", \"max_memory\": {\"cpu\": \"60MB\"}}", offloaded, base);
  const long long all = run(dir, NULL, in_memory, base);
  printf("weights %.0f MB, budget %.0f MB, a layer %.1f MB: peak resident memory above the runtime's %.1f MB with disk "
         "offload, %.1f MB in memory\n",
         (4096.0 * 512 * 2 + 12.0 * layer / 4 + 512) * 4 / 1e6, budget / 1e6, layer / 1e6, disk / 1e6, all / 1e6);
  EXPECT(memcmp(in_memory, offloaded, sizeof in_memory) == 0);
#if !defined(__SANITIZE_ADDRESS__) /* AddressSanitizer's shadow memory and quarantine are resident too */
  EXPECT(disk < budget + layer + 40 * 1000 * 1000);
#endif
  EXPECT(all > 150 * 1000 * 1000);
  const char* files[] = {"config.json", "generation_config.json", "model.safetensors"};
  char path[512];
  for (int i = 0; i < 3; ++i) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
}

int main(void) {
  const long long before = rss();
  acc_model* m = NULL;
  EXPECT_OK(acc_model_from_config(kLlama7b, "{\"device\": \"meta\", \"dtype\": \"float16\"}", &m));
  if (!m) return finish();
  const long long grown = rss() - before;
  int64_t n = 0;
  EXPECT_OK(acc_model_num_parameters(m, &n));
  printf("Llama 7B built empty: %lld parameters, resident memory grew by %.1f MB\n", (long long)n, grown / 1e6);
  EXPECT(n == 6738415616LL);
  EXPECT(grown < 100 * 1000 * 1000);

  /* As Accelerate counts them: the weights and model.rotary_emb's float32 inv_freq and original_inv_freq (64 each,
   * which no checkpoint holds). */
  const char* sizes = NULL;
  EXPECT_OK(acc_model_module_sizes(m, "float16", &sizes));
  EXPECT(sizes && json_int(sizes, "") == 2 * n + 2 * 128 && json_int(sizes, "model.layers.0") == 2 * 202383360LL);
  EXPECT(sizes && json_int(sizes, "model.rotary_emb") == 2 * 128);
  EXPECT_OK(acc_model_module_sizes(m, NULL, &sizes)); /* the tensors' own dtypes: float16 weights here */
  EXPECT(sizes && json_int(sizes, "") == 2 * n + 4 * 128);

  /* Two accelerators of 5 GiB and the CPU: the embedding and the first layers on 0, the next on 1, the rest
   * (and lm_head) on the CPU. */
  const char* map = NULL;
  EXPECT_OK(acc_infer_auto_device_map(
      m, "{\"device_map\": \"sequential\", \"max_memory\": {\"0\": \"5GiB\", \"1\": \"5GiB\", \"cpu\": \"64GB\"}}",
      &map));
  if (map) printf("device map: %s\n", map);
  EXPECT(map && strstr(map, "\"model.embed_tokens\": 0") && strstr(map, "\"model.layers.0\": 0") &&
         strstr(map, "\"model.layers.20\": 1") && strstr(map, "\"model.layers.31\": \"cpu\"") &&
         strstr(map, "\"lm_head\": \"cpu\""));
  /* A budget too small for any layer: everything on the disk, as Accelerate plans it. */
  EXPECT_OK(acc_infer_auto_device_map(m, "{\"device_map\": \"sequential\", \"max_memory\": {\"cpu\": \"1MB\"}}", &map));
  EXPECT(map && !strcmp(map, "{\"\": \"disk\"}"));
  /* Bad options. */
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"max_memory\": {\"npu0\": \"1GB\"}}", &map), ACC_ERR_INVALID_CONFIG,
             "npu0");
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"max_memory\": {\"0\": \"lots\"}}", &map), ACC_ERR_INVALID_CONFIG, "lots");
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"device_map\": \"everywhere\"}", &map), ACC_ERR_INVALID_CONFIG,
             "everywhere");
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"offload\": true}", &map), ACC_ERR_INVALID_CONFIG, "offload");
  EXPECT_ERR(acc_infer_auto_device_map(m, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "out_json is NULL");
  EXPECT_ERR(acc_model_module_sizes(m, "int8", &sizes), ACC_ERR_INVALID_CONFIG, "int8");
  EXPECT_ERR(acc_model_from_config(kLlama7b, "{\"device\": \"gpu\"}", &m), ACC_ERR_INVALID_CONFIG, "device");
  acc_model_destroy(m);
  disk_offload();
  return finish();
}
