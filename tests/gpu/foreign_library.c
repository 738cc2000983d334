/* A shared library that is not libacc's CUDA plugin, with a constructor that would end the process: pointing
 * ACC_CUDA_PLUGIN at it must refuse it before dlopen runs any of its code. */
#include <stdio.h>
#include <unistd.h>

__attribute__((constructor)) static void loaded(void) {
  fprintf(stderr, "foreign_library: constructor ran (libacc loaded a file that is no plugin)\n");
  _exit(3);
}

int foreign_library_symbol(void) { return 1; }
