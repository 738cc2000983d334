/* A minimal test harness for the C tests: counts checks, prints failures with their location and the
 * library's last error, and ends with the plain "N passed, N failed" line. */
#ifndef ACC_TEST_CHECK_H
#define ACC_TEST_CHECK_H
#include <acc/acc.h>
#include <stdio.h>
#include <string.h>

static int g_passed, g_failed;

#define EXPECT(cond)                                                                      \
  do {                                                                                    \
    if (cond) {                                                                           \
      ++g_passed;                                                                         \
    } else {                                                                              \
      ++g_failed;                                                                         \
      fprintf(stderr, "%s:%d: EXPECT(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              acc_last_error_message());                                                  \
    }                                                                                     \
  } while (0)

/* The call returns `code` and the message names `needle`. */
#define EXPECT_ERR(call, code, needle)                                                              \
  do {                                                                                              \
    acc_status st_ = (call);                                                                        \
    const char* msg_ = acc_last_error_message();                                                    \
    if (st_ == (code) && strstr(msg_, (needle)) != NULL) {                                          \
      ++g_passed;                                                                                   \
    } else {                                                                                        \
      ++g_failed;                                                                                   \
      fprintf(stderr, "%s:%d: %s returned %s \"%s\"; expected %s naming \"%s\"\n", __FILE__, __LINE__, \
              #call, acc_status_name(st_), msg_, #code, needle);                                    \
    }                                                                                               \
  } while (0)

#define EXPECT_OK(call) EXPECT_ERR(call, ACC_OK, "")

static int finish(void) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
#endif
