/* enable_cpu_affinity with real processes (test_affinity.py): creates an accelerator with the config JSON given as
 * argv[1] and prints "rank R cores C,C,..." with the cores sched_getaffinity reports afterwards. */
#define _GNU_SOURCE
#include <acc/acc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  acc_accelerator* acc = NULL;
  if (acc_accelerator_create(argc > 1 ? argv[1] : NULL, &acc) != ACC_OK) {
    fprintf(stderr, "acc_accelerator_create: %s\n", acc_last_error_message());
    return 1;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    perror("sched_getaffinity");
    return 1;
  }
  const char* rank = getenv("RANK");
  printf("rank %s cores ", rank ? rank : "0");
  int first = 1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) {
      printf(first ? "%d" : ",%d", c);
      first = 0;
    }
  printf("\n");
  fflush(stdout);
  acc_accelerator_destroy(acc);
  return 0;
}
