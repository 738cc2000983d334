// The JSON options of libacc's text calls, read once for the C ABI and the C++ API: acc_tokenizer_encode's
// (transformers' __call__ arguments), apply_chat_template's and tokenizer training's. An unknown key or a bad
// value is a config::Error naming it (ACC_ERR_INVALID_CONFIG).
#pragma once
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "acc/json.hpp"
#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"

namespace acc::text {

// root may be null (no options). Keys listed in `ignore` belong to the caller.
EncodeOptions parse_encode_options(const json::Value* root, const char* what,
                                   std::initializer_list<const char*> ignore = {});
// apply_chat_template's own keys; the rest are encode options (parse_chat_encode_options).
ChatOptions parse_chat_options(const json::Value* root);
EncodeOptions parse_chat_encode_options(const json::Value* root);

struct TrainOptions {
  size_t vocab_size = 1000, min_frequency = 2;
  std::vector<std::string> special_tokens;
  std::map<std::string, std::string> named;  // "eos_token" -> "<|end|>"
  std::string chat_template;
  std::optional<size_t> model_max_length;
};
TrainOptions parse_train_options(const json::Value* root);
// Trains a byte-level BPE with these options (Tokenizer::train_byte_level_bpe, then the template and length).
std::shared_ptr<Tokenizer> train_bpe(const std::vector<std::string_view>& texts, const TrainOptions& o);

}  // namespace acc::text
