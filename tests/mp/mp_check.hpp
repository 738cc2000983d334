// Check counting for the C++ multi-process workers (the C ones have ../c/check.h through mp_common.h): expect()
// counts one check; a failed one prints "rank R FAILED: what" and the counts and ends the process at once with
// status 1, since a rank that went on would enter collectives its peers do not match and hang them until the test's
// timeout (they fail on the dead rank instead, and acc launch ends them). finish() prints "rank R: N passed, N failed"
// and gives the exit status. R is the launcher's RANK.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

int passed = 0, failed = 0;

int launch_rank() {
  static const int rank = std::getenv("RANK") ? std::atoi(std::getenv("RANK")) : 0;
  return rank;
}

int finish() {
  std::printf("rank %d: %d passed, %d failed\n", launch_rank(), passed, failed);
  std::fflush(stdout);
  return failed ? 1 : 0;
}

void expect(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
    return;
  }
  ++failed;
  std::fprintf(stderr, "rank %d FAILED: %s\n", launch_rank(), what.c_str());
  std::fflush(stderr);
  finish();
  // _Exit: no destructors, which could wait on the peers.
  std::_Exit(1);
}

}  // namespace
