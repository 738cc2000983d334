#include "util/pattern.hpp"

#include <re2/re2.h>

#include <stdexcept>

#include <acc/limits.hpp>

namespace acc::core {

namespace {

// At most 200 bytes of `s` for a message, control bytes escaped, cut at a UTF-8 boundary.
std::string shown(std::string_view s) {
  constexpr size_t kMax = 200;
  size_t n = s.size();
  if (n > kMax) {
    n = kMax;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  }
  std::string out;
  for (char c : s.substr(0, n)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace

Pattern::Pattern(std::string_view pattern, std::string_view what) {
  auto refuse = [&](const std::string& why) {
    return std::invalid_argument(std::string(what) + ": '" + shown(pattern) +
                                 "' is not a regular expression libacc reads (" + why + ")");
  };
  if (pattern.size() > limits::kPatternBytes)
    throw refuse("longer than " + std::to_string(limits::kPatternBytes) + " bytes, the limit");
  RE2::Options options;
  options.set_log_errors(false);  // the error goes into the exception, not to stderr
  options.set_max_mem(limits::kPatternMemoryBytes);
  auto re = std::make_shared<const RE2>(re2::StringPiece(pattern.data(), pattern.size()), options);
  if (!re->ok()) throw refuse(shown(re->error()));
  re_ = std::move(re);
}

bool Pattern::full_match(std::string_view text, std::string* group) const {
  const re2::StringPiece t(text.data(), text.size());
  return group ? RE2::FullMatch(t, *re_, group) : RE2::FullMatch(t, *re_);
}

bool Pattern::search(std::string_view text, std::string* group) const {
  const re2::StringPiece t(text.data(), text.size());
  return group ? RE2::PartialMatch(t, *re_, group) : RE2::PartialMatch(t, *re_);
}

int Pattern::groups() const { return re_->NumberOfCapturingGroups(); }

}  // namespace acc::core
