// Text in, text out: a prompt encoded with the model's tokenizer, generate (generate.hpp), and the new ids
// decoded back, streamed in pieces as transformers' TextStreamer hands them out (text/streamer.hpp).
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include "models/model.hpp"
#include "text/tokenizer.hpp"

namespace acc::core::hf {

// Receives each piece of text as it becomes final; return false to stop generating there.
using TextCallback = std::function<bool(std::string_view piece)>;

// options_json: generate's keys (generation_config.json's eos ids stop it) and {"stop_strings": [...] (the
// text contains one: stop; it stays in the text, as transformers), "skip_special_tokens": true (decoding),
// "add_special_tokens": true (encoding the prompt; false for a prompt a chat template rendered)}. Returns the
// new text only (transformers' return_full_text=False).
std::string generate_text(Model& model, const text::Tokenizer& tok, std::string_view prompt, const char* options_json,
                          const TextCallback& on_text = {});

}  // namespace acc::core::hf
