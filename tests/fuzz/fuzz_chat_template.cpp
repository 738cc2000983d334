// libFuzzer target: chat templates (issue 37 item 9), rendered as transformers' apply_chat_template renders them
// (src/text/chat_template.cpp over minijinja in src/text/rust/src/chat.rs). The first byte picks what the rest is:
//   even: a chat template's text, rendered on a fixed conversation with the tiny byte-level BPE tokenizer's special
//         tokens (tests/text/tiny/bytebpe). It runs on the Rust entry point itself with less fuel than libacc's
//         (acc::limits::kChatTemplateFuelBase and more, takes seconds in a release build and more under ASan; the
//         hostile-input test 'text-hostile' checks that limit), so that every input ends within libFuzzer's timeout.
//   odd:  a conversation's messages JSON, rendered with the tokenizer's own template ({% generation %} blocks) and
//         encoded with assistant masks by encode_chat; bit 1 sets add_generation_prompt, bit 2 continue_final_message
//         (the two are refused together), bit 3 gives tools.
// Refusals are std::invalid_argument (the template's or the conversation's error, naming it); anything else is a
// finding, and so is an assistant mask that differs in length from its ids or a generation span outside the text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "text/chat_template.hpp"
#include "text/text_ffi.h"
#include "text/tokenizer.hpp"

#ifndef FUZZ_TINY_TOKENIZER
#error "FUZZ_TINY_TOKENIZER: the folder tests/text/tiny/bytebpe (tests/fuzz/meson.build sets it)"
#endif

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "==fuzz== %s\n", what.c_str());
  std::abort();
}

const acc::text::Tokenizer& tokenizer() {
  static const std::shared_ptr<acc::text::Tokenizer> tok = acc::text::Tokenizer::from_pretrained(FUZZ_TINY_TOKENIZER);
  return *tok;
}

// What render_chat gives the template for this conversation (messages, special tokens, add_generation_prompt).
constexpr std::string_view kContext =
    R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi there"},)"
    R"({"role":"assistant","content":"Hello!","tool_calls":[{"type":"function","function":{"name":"f",)"
    R"("arguments":{"x":1}}}]},{"role":"tool","content":"42"}],"tools":null,"documents":null,)"
    R"("add_generation_prompt":true,"bos_token":"<|bos|>","eos_token":"<|im_end|>","pad_token":"<|pad|>"})";
constexpr uint64_t kFuel = 2'000'000;

void render_template(std::string_view source) {
  char *out = nullptr, *err = nullptr;
  size_t out_len = 0, n_spans = 0, *spans = nullptr;
  const int rc = acctext_render_template(source.data(), source.size(), kContext.data(), kContext.size(), 0, kFuel, &out,
                                         &out_len, &spans, &n_spans, &err);
  if (rc == 0) {
    for (size_t i = 0; i < 2 * n_spans; ++i)
      if (spans[i] > out_len || (i % 2 == 1 && spans[i] < spans[i - 1])) finding("a generation span outside the text");
    acctext_spans_free(spans, n_spans);
  } else if (!err || !*err) {
    finding("a template refused without a message");
  }
  acctext_string_free(out);
  acctext_string_free(err);
}

constexpr std::string_view kTools = R"([{"type":"function","function":{"name":"get_weather","parameters":{}}}])";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto& tok = tokenizer();
  acc_fuzz::guarded<std::invalid_argument>([&] {
    if (mode % 2 == 0) return render_template(rest);
    acc::text::ChatOptions o;
    o.add_generation_prompt = mode & 2;
    o.continue_final_message = mode & 4;
    if (mode & 8) o.tools_json = kTools;
    o.now_unix = 0;
    const auto c = acc::text::encode_chat(tok, rest, o);
    if (c.assistant_masks.size() != c.encoding.ids.size()) finding("assistant mask and ids differ in length");
  });
  return 0;
}
