// Calling the Rust text library (text_ffi.h): its error strings become exceptions, its strings std::string.
#pragma once
#include <stdexcept>
#include <string>

#include "text/text_ffi.h"

namespace acc::text::detail {

// A Rust-allocated string, freed on scope exit.
struct RustString {
  char* p = nullptr;
  ~RustString() { acctext_string_free(p); }
  std::string str() const { return p ? std::string(p) : std::string(); }
};

// Throws std::invalid_argument("<context>: <message>") when an acctext_ call failed.
inline void check(int rc, RustString& err, const std::string& context) {
  if (rc != 0) throw std::invalid_argument(context + ": " + (err.p ? err.str() : "failed"));
}

}  // namespace acc::text::detail
