// Chat templates as transformers' apply_chat_template: template choice, the Jinja rendering (rust/src/chat.rs,
// minijinja), continue_final_message, tokenization and the assistant-token mask of {% generation %} blocks.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/tokenizer.hpp"

namespace acc::text {

struct ChatOptions {
  // A template's text, or the name of one of the tokenizer's templates ("default", "tool_use"); unset: the
  // tokenizer's ("tool_use" when tools are given and it has one).
  std::optional<std::string> chat_template;
  std::string tools_json;      // a JSON array of tool schemas, or empty
  std::string documents_json;  // a JSON array of documents, or empty
  std::string extra_json;      // a JSON object of further template variables (enable_thinking, ...), or empty
  bool add_generation_prompt = false;
  bool continue_final_message = false;
  std::string continue_field = "content";  // the final message's field to continue ("reasoning_content", ...)
  int64_t now_unix = -1;  // strftime_now's time (seconds since the epoch); < 0: now
};

struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation_spans;  // byte ranges of {% generation %} output
};

// messages_json: a JSON array of {"role", "content", ...} as transformers takes it.
RenderedChat render_chat(const Tokenizer& tok, std::string_view messages_json, const ChatOptions& options);

struct ChatEncoding {
  std::string text;
  Encoding encoding;
  // 1 on tokens inside {% generation %} output; all 0 for a template without such blocks (as transformers).
  std::vector<int64_t> assistant_masks;
};

// apply_chat_template(..., tokenize=True, return_dict=True, return_assistant_tokens_mask=True): the rendered
// text encoded without special tokens (the template writes them), with `encode`'s truncation and padding.
ChatEncoding encode_chat(const Tokenizer& tok, std::string_view messages_json, const ChatOptions& options,
                         EncodeOptions encode = {});

}  // namespace acc::text
