/* The examples' error check: a call that does not return ACC_OK prints what failed, libacc's message and the
 * status name, and exits. (train_mlp.c keeps its own copy: it is the one-file example the package test builds.) */
#ifndef ACC_EXAMPLES_CHECK_H
#define ACC_EXAMPLES_CHECK_H
#include <acc/acc.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    acc_status st_ = (call);                                                                          \
    if (st_ != ACC_OK) {                                                                              \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, acc_last_error_message(), acc_status_name(st_)); \
      exit(1);                                                                                        \
    }                                                                                                 \
  } while (0)

#endif
