#include "text/streamer.hpp"

#include <algorithm>

namespace acc::text {

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

namespace {

// The last code point of valid UTF-8 text (decode always returns valid UTF-8).
char32_t last_code_point(const std::string& s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i - 1;
  const size_t n = s.size() - (i - 1);
  char32_t c = n == 1 ? p[0] : n == 2 ? p[0] & 0x1F : n == 3 ? p[0] & 0x0F : p[0] & 0x07;
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (p[k] & 0x3F);
  return c;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tok, bool skip_special_tokens, std::vector<std::string> stop_strings)
    : tok_(tok), skip_special_(skip_special_tokens), stops_(std::move(stop_strings)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string TextStream::put(int64_t id) {
  cache_.push_back(id);
  const std::string text = tok_.decode(cache_, skip_special_);
  const size_t before = text_.size();
  text_ = done_ + text;
  for (const auto& s : stops_) {
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    if (text_.find(s, from) != std::string::npos) stopped_ = true;
  }
  std::string piece;
  if (!text.empty() && text.back() == '\n') {
    piece = text.substr(std::min(printed_, text.size()));
    done_ += text;
    cache_.clear();
    printed_ = 0;
  } else if (!text.empty() && is_cjk(last_code_point(text))) {
    piece = text.substr(std::min(printed_, text.size()));
    printed_ = text.size();
  } else {
    const size_t space = text.rfind(' ');
    const size_t upto = space == std::string::npos ? 0 : space + 1;
    if (upto > printed_) piece = text.substr(printed_, upto - printed_), printed_ = upto;
  }
  return piece;
}

std::string TextStream::end() {
  std::string piece;
  if (!cache_.empty()) {
    const std::string text = tok_.decode(cache_, skip_special_);
    piece = text.substr(std::min(printed_, text.size()));
    done_ += text;
  }
  cache_.clear();
  printed_ = 0;
  return piece;
}

}  // namespace acc::text
