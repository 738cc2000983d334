/* Big-model inference through the C ABI: a Llama of 7 billion parameters built empty (acc_model_from_config
 * with "device": "meta") costs no weight memory; its module sizes and device maps (acc_model_module_sizes,
 * acc_infer_auto_device_map); bad options named. tests/cpp/test_device_map checks the maps against Accelerate's. */
#include <stdint.h>
#include <unistd.h>

#include "check.h"

static const char* kLlama7b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 32000, \"hidden_size\": 4096, \"intermediate_size\": 11008,"
    " \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 32, \"max_position_embeddings\": 4096,"
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

  const char* sizes = NULL;
  EXPECT_OK(acc_model_module_sizes(m, "float16", &sizes));
  EXPECT(sizes && json_int(sizes, "") == 2 * n && json_int(sizes, "model.layers.0") == 2 * 202383360LL);
  EXPECT_OK(acc_model_module_sizes(m, NULL, &sizes)); /* the parameters' own dtype: float16 here */
  EXPECT(sizes && json_int(sizes, "") == 2 * n);

  /* Two accelerators of 5 GiB and the CPU: the embedding and the first layers on 0, the next on 1, the rest
   * (and lm_head) on the CPU. */
  const char* map = NULL;
  EXPECT_OK(acc_infer_auto_device_map(
      m, "{\"device_map\": \"sequential\", \"max_memory\": {\"0\": \"5GiB\", \"1\": \"5GiB\", \"cpu\": \"64GB\"}}", &map));
  if (map) printf("device map: %s\n", map);
  EXPECT(map && strstr(map, "\"model.embed_tokens\": 0") && strstr(map, "\"model.layers.0\": 0") &&
         strstr(map, "\"model.layers.20\": 1") && strstr(map, "\"model.layers.31\": \"cpu\"") &&
         strstr(map, "\"lm_head\": \"cpu\""));
  /* Bad options. */
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"max_memory\": {\"npu0\": \"1GB\"}}", &map), ACC_ERR_INVALID_CONFIG, "npu0");
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"max_memory\": {\"0\": \"lots\"}}", &map), ACC_ERR_INVALID_CONFIG, "lots");
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"device_map\": \"everywhere\"}", &map), ACC_ERR_INVALID_CONFIG, "everywhere");
  EXPECT_ERR(acc_infer_auto_device_map(m, "{\"offload\": true}", &map), ACC_ERR_INVALID_CONFIG, "offload");
  EXPECT_ERR(acc_infer_auto_device_map(m, NULL, NULL), ACC_ERR_INVALID_ARGUMENT, "out_json is NULL");
  EXPECT_ERR(acc_model_module_sizes(m, "int8", &sizes), ACC_ERR_INVALID_CONFIG, "int8");
  EXPECT_ERR(acc_model_from_config(kLlama7b, "{\"device\": \"gpu\"}", &m), ACC_ERR_INVALID_CONFIG, "device");
  acc_model_destroy(m);
  return finish();
}
