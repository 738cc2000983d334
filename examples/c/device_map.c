/*
 * Prints the device map Accelerate's load_checkpoint_and_dispatch would use for a Hugging Face model under a
 * memory budget, and how much goes where, without loading a weight: the model is built empty from its
 * config.json (acc_model_from_config with "device": "meta"), then planned (acc_infer_auto_device_map).
 *
 *   device_map CONFIG_JSON [OPTIONS_JSON]
 *   device_map llama-7b/config.json '{"max_memory": {"0": "10GiB", "1": "10GiB", "cpu": "30GB"}, "dtype": "float16"}'
 *
 * OPTIONS_JSON: acc_infer_auto_device_map's options ("device_map", "max_memory", "no_split_module_classes",
 * "dtype", ...); its "dtype" also builds the model in that dtype. Default: {} (the CPU's available memory).
 */
#define _POSIX_C_SOURCE 200809L
#include <acc/acc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static char* slurp(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = malloc((size_t)n + 1);
  if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) exit(1);
  text[n] = 0;
  fclose(f);
  return text;
}

/* The value after "\"name\": " in a flat JSON object: a device (0, "cpu") or a size. */
static const char* value_of(const char* json, const char* name, char* out, size_t cap) {
  char needle[600];
  snprintf(needle, sizeof needle, "\"%.512s\": ", name);
  const char* at = strstr(json, needle);
  if (!at) return NULL;
  at += strlen(needle);
  if (*at == '"') ++at; /* a device name: without its quotes */
  size_t n = strcspn(at, "\",}");
  if (n >= cap) n = cap - 1;
  memcpy(out, at, n);
  out[n] = 0;
  return out;
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: device_map CONFIG_JSON [OPTIONS_JSON]\n");
    return 2;
  }
  char* config = slurp(argv[1]);
  const char* options = argc == 3 ? argv[2] : "{}";
  /* The model in the dtype the plan is for ("dtype" of the options, else the config's). */
  char dtype[32] = "", build[96] = "{\"device\": \"meta\"}";
  if (value_of(options, "dtype", dtype, sizeof dtype))
    snprintf(build, sizeof build, "{\"device\": \"meta\", \"dtype\": %s}", dtype);
  acc_model* model;
  CHECK(acc_model_from_config(config, build, &model));
  int64_t parameters;
  CHECK(acc_model_num_parameters(model, &parameters));
  const char* sizes;
  CHECK(acc_model_module_sizes(model, NULL, &sizes));
  char* sizes_copy = strdup(sizes); /* borrowed until the next call on the model */
  const char* map;
  CHECK(acc_infer_auto_device_map(model, options, &map));
  printf("%lld parameters, %.3f MB of weights\n", (long long)parameters, atof(strchr(sizes_copy, ':') + 1) / 1e6);
  /* One line per entry of the map: where it goes and its size; then the total per device. */
  const char* devices[16];
  double totals[16];
  int n_devices = 0;
  const char* p = map;
  while ((p = strchr(p, '"'))) {
    const char* end = strchr(p + 1, '"');
    char name[512], device[32], size[32];
    snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
    value_of(map, name, device, sizeof device);
    const double bytes = value_of(sizes_copy, name, size, sizeof size) ? atof(size) : 0;
    printf("  %-40s %-8s %10.3f MB\n", *name ? name : "(the whole model)", device, bytes / 1e6);
    int d = 0;
    while (d < n_devices && strcmp(devices[d], device)) ++d;
    if (d == n_devices && n_devices < 16) devices[n_devices] = strdup(device), totals[n_devices++] = 0;
    if (d < 16) totals[d] += bytes;
    p = strchr(end + 1, ',');
    if (!p) break;
  }
  for (int d = 0; d < n_devices; ++d) printf("%-8s %10.3f MB\n", devices[d], totals[d] / 1e6);
  free(sizes_copy);
  free(config);
  acc_model_destroy(model);
  return 0;
}
