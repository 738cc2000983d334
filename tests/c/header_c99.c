/* Built with -std=c99 -Wall -Wextra -pedantic -Werror: the public header must be clean C99. */
#include <acc/acc.h>
#include <stdio.h>

int main(void) {
  acc_status st = acc_abi_check(ACC_ABI_VERSION);
  printf("acc %s, ABI check: %s\n", acc_version(), acc_status_name(st));
  return st == ACC_OK ? 0 : 1;
}
