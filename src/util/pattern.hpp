// Regular expressions: the one engine for every pattern libacc runs, those from a file or a caller
// (adapter_config.json's target_modules, rank_pattern and layers_pattern, param_groups, requires_grad) and its own.
// RE2, not the C++ library's backtracking engine: it matches in time linear in the text, with bounded stack and
// memory, and refuses what it cannot match that way (backreferences, lookaround) instead of backtracking into a hang
// or a stack overflow.
// full_match is Python's re.fullmatch (what peft and Accelerate use) for the syntax both read.
#pragma once
#include <memory>
#include <string>
#include <string_view>

namespace re2 {
class RE2;
}

namespace acc::core {

class Pattern {
 public:
  // std::invalid_argument "<what>: '<pattern>' is not a regular expression libacc reads (<reason>)" for a pattern
  // RE2 refuses or one longer than limits::kPatternBytes (a long pattern is shown cut short).
  Pattern(std::string_view pattern, std::string_view what);
  // The whole text matches (re.fullmatch); `group`, when given, gets the first group's text.
  bool full_match(std::string_view text, std::string* group = nullptr) const;
  // Some part of the text matches (re.search); `group` as above.
  bool search(std::string_view text, std::string* group = nullptr) const;
  // How many capturing groups the expression has.
  int groups() const;

 private:
  std::shared_ptr<const re2::RE2> re_;  // shared: a Pattern is copied into the matchers that keep it
};

}  // namespace acc::core
