/* What the C sides of the benchmarks (bench/NAME_step.c, bench/zero_memory.cpp) share: a failed call ends the run with the library's
 * message, a monotonic clock, the 32-bit hash the Python sides use for the same token ids, and the resident memory. */
#ifndef ACC_BENCH_STEP_H
#define ACC_BENCH_STEP_H
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                 \
  do {                                                              \
    if ((call) != ACC_OK) {                                         \
      fprintf(stderr, "%s: %s\n", #call, acc_last_error_message()); \
      exit(1);                                                      \
    }                                                               \
  } while (0)

static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A 32-bit integer hash: token ids are mix(i) % vocab on both sides. */
static inline uint32_t mix(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

/* A line of /proc/self/status in MB ("VmHWM", "VmRSS"): the kernel's kB; -1 where it is missing. */
static inline double status_mb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  double mb = -1;
  const size_t len = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, len) == 0 && line[len] == ':') mb = atof(line + len + 1) / 1024.0;
  if (f) fclose(f);
  return mb;
}
#endif
