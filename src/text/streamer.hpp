// Generated ids into text pieces as transformers' TextStreamer hands them out: a piece ends at a space, a
// newline or a CJK character, so that a word is never cut and a UTF-8 sequence never split; stop strings end
// the generation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.hpp"

namespace acc::text {

class TextStream {
 public:
  TextStream(const Tokenizer& tok, bool skip_special_tokens, std::vector<std::string> stop_strings = {});
  // Takes the next token; returns the text that became final (may be empty).
  std::string put(int64_t id);
  // The rest, at the end of generation.
  std::string end();
  // All text so far (what was returned plus what is held back).
  const std::string& text() const { return text_; }
  // True once the generated text contains a stop string (checked where the last token could have finished one).
  bool stopped() const { return stopped_; }

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<std::string> stops_;
  std::vector<int64_t> cache_;  // tokens since the last newline (TextStreamer's token_cache)
  size_t printed_ = 0;          // bytes of the cache's text already returned
  std::string done_;            // text of tokens before the cache
  std::string text_;
  bool stopped_ = false;
};

// TextStreamer's _is_chinese_char: the CJK Unified Ideographs blocks.
bool is_cjk(char32_t c);

}  // namespace acc::text
