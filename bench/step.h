/* What the C sides of the benchmarks (bench/NAME_step.c, bench/zero_memory.cpp) share: a failed call ends the run with the library's
 * message, a monotonic clock, and the 32-bit hash the Python sides use for the same token ids. */
#ifndef ACC_BENCH_STEP_H
#define ACC_BENCH_STEP_H
#include <acc/acc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
#endif
