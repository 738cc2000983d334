/* The examples' corpus: the text files of a directory (the demo uses the license texts every Debian system
 * ships, /usr/share/common-licenses) as one byte string, and nanoGPT's token file layout for it: one token a
 * byte, vocabulary 256. */
#ifndef ACC_EXAMPLES_CORPUS_H
#define ACC_EXAMPLES_CORPUS_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static inline int by_name(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* Concatenates the regular files of `dir` (sorted by name) into one byte buffer. */
static inline unsigned char* read_corpus(const char* dir, size_t* len) {
  DIR* d = opendir(dir);
  if (!d) {
    fprintf(stderr, "cannot open text directory %s\n", dir);
    exit(1);
  }
  char* names[256];
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) && n < 256)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], by_name);
  unsigned char* buf = NULL;
  *len = 0;
  for (int i = 0; i < n; ++i) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    struct stat st;
    FILE* f = fopen(path, "rb");
    if (f && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      buf = realloc(buf, *len + (size_t)st.st_size);
      *len += fread(buf + *len, 1, (size_t)st.st_size, f);
    }
    if (f) fclose(f);
    free(names[i]);
  }
  return buf;
}

/* Writes bytes as little-endian uint16 token ids (nanoGPT's .bin layout). */
static inline void write_tokens(const char* path, const unsigned char* bytes, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  for (size_t i = 0; i < n; ++i) {
    unsigned char le[2] = {bytes[i], 0};
    fwrite(le, 1, 2, f);
  }
  fclose(f);
}

#endif
