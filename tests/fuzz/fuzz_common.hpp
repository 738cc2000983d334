// Shared by the libFuzzer targets of tests/fuzz: which exceptions count as the code under test refusing an input
// (expected), and a per-process scratch file for the APIs that read files.
//
// A target catches acc::config::Error (and the few other types an API documents) and returns; any other exception
// escaping the API under test is itself a finding: guarded() prints it and aborts, so libFuzzer stores the input.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <ios>
#include <string>
#include <string_view>
#include <typeinfo>

#include "acc/config.hpp"

namespace acc_fuzz {

// Runs fn(); expected refusals return quietly, anything else aborts with the exception's type and message.
// Extra expected types are named by the template parameters (e.g. acc::cli::UsageError).
template <typename... Expected, typename Fn>
void guarded(Fn&& fn) {
  try {
    try {
      fn();
    } catch (const acc::config::Error&) {
      // the documented refusal
    } catch (const std::ios_base::failure&) {
      // an I/O error of the scratch file, not a parser finding
    }
  } catch (const std::exception& e) {
    if ((... || (dynamic_cast<const Expected*>(&e) != nullptr))) return;
    std::fprintf(stderr, "==fuzz== unexpected exception %s escaped the API under test: %s\n", typeid(e).name(),
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "==fuzz== unexpected non-std exception escaped the API under test\n");
    std::abort();
  }
}

// A scratch file for this process (libFuzzer's -jobs/-workers run several processes; each gets its own), with the
// extension the API dispatches on. Rewritten on every input.
inline const std::string& scratch_path(std::string_view ext) {
  static const std::string path = [&] {
    const char* dir = std::getenv("ACC_FUZZ_TMPDIR");
    if (!dir || !*dir) dir = std::getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    return std::string(dir) + "/acc-fuzz-" + std::to_string(::getpid()) + std::string(ext);
  }();
  return path;
}

inline bool write_scratch(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  ok = std::fclose(f) == 0 && ok;
  return ok;
}

// Removes the scratch file when the process exits normally (libFuzzer exits through exit()).
struct ScratchCleanup {
  std::string path;
  ~ScratchCleanup() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace acc_fuzz
