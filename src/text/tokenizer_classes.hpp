// What transformers' tokenizer classes change in tokenizer.json. transformers 5 loads a folder through the
// class its tokenizer_config.json names; the generic one (PreTrainedTokenizerFast, TokenizersBackend) takes
// tokenizer.json as it is, but a model's own class (LlamaTokenizer, GemmaTokenizer, Qwen2Tokenizer,
// GPT2Tokenizer, BertTokenizer) keeps only the vocabulary, merges and post-processor and rebuilds the
// normalizer, pre-tokenizer, decoder and model options itself (models/<family>/tokenization_<family>.py),
// with its own default special tokens. The same ids need the same rebuild.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "acc/json.hpp"

namespace acc::text {

struct ClassRules {
  std::string overrides_json;                          // for acctext_tokenizer_from_json ("" : none)
  std::map<std::string, std::string> default_special;  // "bos_token" -> "<s>", used where the config has none
};

// cls: tokenizer_config.json's tokenizer_class ("" when absent); config: its root (may be null).
ClassRules class_rules(const std::string& cls, const json::Value* config);

}  // namespace acc::text
