// Check counting for the C++ multi-process workers (the C ones have ../c/check.h): expect() counts one check and
// prints a failed one; finish() prints "rank R: N passed, N failed" and gives the exit status.
#pragma once
#include <cstdio>
#include <string>

namespace {

int passed = 0, failed = 0;

void expect(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
}

int finish(int rank) {
  std::printf("rank %d: %d passed, %d failed\n", rank, passed, failed);
  return failed ? 1 : 0;
}

}  // namespace
