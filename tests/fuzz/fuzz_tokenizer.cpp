// libFuzzer target: a tokenizer.json and a text (issue 37 item 9). The input is tokenizer.json's text, a NUL byte,
// then the text to encode (no NUL: the text "Hello world"). acc::text::Tokenizer::from_json loads it through the
// Rust library (src/text/rust: the tokenizers crate behind text_ffi.h), then the text is encoded with and without
// special tokens, as a pair, truncated with a stride and overflowing windows, padded, and the ids decoded back.
//
// Refusals are std::invalid_argument naming the file or text (from_json, encode, decode) or std::out_of_range (an id
// decode cannot take); anything else escaping is a finding, and so is a crash, a hang (-timeout), a leak, or an
// encoding whose arrays disagree in length or whose offsets fall outside its text.
//
// The Rust archive is not instrumented for coverage (cargo builds it as for libacc), so libFuzzer steers by the C++
// around it and by what the sanitizers and timeouts see; the crate's own parsing runs on every input all the same.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "text/tokenizer.hpp"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "==fuzz== %s\n", what.c_str());
  std::abort();
}

void check(const acc::text::Encoding& e, const std::vector<size_t>& text_sizes) {
  const size_t n = e.ids.size();
  if (e.type_ids.size() != n || e.attention_mask.size() != n || e.special_tokens_mask.size() != n ||
      e.offsets.size() != n || e.sequence_ids.size() != n)
    finding("an encoding's arrays differ in length");
  for (size_t i = 0; i < n; ++i) {
    const int32_t s = e.sequence_ids[i];
    if (s < -1 || s >= static_cast<int32_t>(text_sizes.size())) finding("sequence id " + std::to_string(s));
    if (s < 0) continue;
    const auto [start, end] = e.offsets[i];
    if (start > end || end > text_sizes[s])
      finding("offsets (" + std::to_string(start) + ", " + std::to_string(end) + ") outside a text of " +
              std::to_string(text_sizes[s]) + " bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view("Hello world") : input.substr(nul + 1);
  acc_fuzz::guarded<std::invalid_argument, std::out_of_range>([&] {
    auto tok = acc::text::Tokenizer::from_json(json, "tokenizer.json 'fuzz'");
    (void)tok->vocab_size(), (void)tok->size(), (void)tok->added_tokens();
    acc::text::EncodeOptions plain;
    const auto e = tok->encode(text, plain);
    check(e, {text.size()});
    (void)tok->decode(e.ids);
    (void)tok->decode(e.ids, true);
    for (const int64_t id : e.ids) (void)tok->id_to_token(id);

    plain.add_special_tokens = false;
    check(tok->encode(text, plain), {text.size()});

    // A pair (the halves of the text's first 1 KiB), truncated to 8 tokens with a stride of 2 and every window
    // returned, padded. A pair's windows are every window of the first times every window of the second (the
    // tokenizers crate's, as transformers returns them): quadratic in the text, so a 7 KB text takes 20 s and 2 GB
    // under the sanitizers, in Python too; 1 KiB keeps each input's time the parsers' and not that product's.
    const std::string_view windowed = text.substr(0, 1024);
    const std::string_view first = windowed.substr(0, windowed.size() / 2),
                           second = windowed.substr(windowed.size() / 2);
    std::vector<std::string_view> firsts{first, windowed}, seconds{second, first};
    acc::text::EncodeOptions windows;
    windows.truncation = acc::text::Truncation::LongestFirst;
    windows.max_length = 8;
    windows.stride = 2;
    windows.return_overflowing_tokens = true;
    try {
      for (const auto& w : tok->encode_batch(firsts, &seconds, windows))
        check(w, {w.sample == 0 ? first.size() : windowed.size(), w.sample == 0 ? second.size() : first.size()});
    } catch (const std::invalid_argument&) {
      // e.g. a stride too large for what the post-processor leaves: refused, as transformers refuses it
    }
    if (auto pad = tok->id_to_token(0)) {
      tok->set_special_token("pad_token", *pad);
      acc::text::EncodeOptions padded;
      padded.padding = acc::text::Padding::Longest;
      padded.pad_to_multiple_of = 4;
      padded.padding_side = acc::text::Side::Left;
      padded.threads = 2;
      const auto batch = tok->encode_batch(firsts, nullptr, padded);
      for (size_t i = 0; i < batch.size(); ++i) {
        check(batch[i], {firsts[i].size()});
        if (batch[i].ids.size() != batch[0].ids.size() || batch[i].ids.size() % 4 != 0) finding("padding");
      }
    }
  });
  return 0;
}
