/* A minimal test harness for the C tests: counts checks, prints failures with their location and the
 * library's last error, and ends with the plain "N passed, N failed" line. */
#ifndef ACC_TEST_CHECK_H
#define ACC_TEST_CHECK_H
#include <acc/acc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_passed, g_failed;

/* What a failed EXPECT does after counting and printing it: nothing here, the test goes on to its next check. The
 * multi-process workers (tests/mp/mp_common.h) define it before including this to end the process instead. */
#ifndef EXPECT_FAILED
#define EXPECT_FAILED() ((void)0)
#endif

#define EXPECT(cond)                                                                           \
  do {                                                                                         \
    if (cond) {                                                                                \
      ++g_passed;                                                                              \
    } else {                                                                                   \
      ++g_failed;                                                                              \
      fprintf(stderr, "%s:%d: EXPECT(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              acc_last_error_message());                                                       \
      EXPECT_FAILED();                                                                         \
    }                                                                                          \
  } while (0)

/* The call returns `code` and the message names `needle`. */
#define EXPECT_ERR(call, code, needle)                                                                        \
  do {                                                                                                        \
    acc_status st_ = (call);                                                                                  \
    const char* msg_ = acc_last_error_message();                                                              \
    if (st_ == (code) && strstr(msg_, (needle)) != NULL) {                                                    \
      ++g_passed;                                                                                             \
    } else {                                                                                                  \
      ++g_failed;                                                                                             \
      fprintf(stderr, "%s:%d: %s returned %s \"%s\"; expected %s naming \"%s\"\n", __FILE__, __LINE__, #call, \
              acc_status_name(st_), msg_, #code, needle);                                                     \
      EXPECT_FAILED();                                                                                        \
    }                                                                                                         \
  } while (0)

#define EXPECT_OK(call) EXPECT_ERR(call, ACC_OK, "")

/* The call must succeed: otherwise print it with the library's message and end the process. For
 * programs whose later steps depend on the call (the multi-process workers). */
#define CHECK(call)                                                                            \
  do {                                                                                         \
    acc_status st_ = (call);                                                                   \
    if (st_ != ACC_OK) {                                                                       \
      fprintf(stderr, "%s: %s (%s)\n", #call, acc_last_error_message(), acc_status_name(st_)); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* 1 when the float32 tensor holds exactly `n` values within 1e-6 of `want`. */
static inline int equals(acc_tensor* t, const float* want, int64_t n) {
  int64_t got_n;
  CHECK(acc_tensor_numel(t, &got_n));
  if (got_n != n || n > 64) return 0;
  float got[64];
  CHECK(acc_tensor_to_host(t, got, (size_t)n * sizeof(float)));
  for (int64_t i = 0; i < n; ++i)
    if (fabsf(got[i] - want[i]) > 1e-6f) return 0;
  return 1;
}

static int finish(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
#endif
