// A Hugging Face tokenizer as transformers' AutoTokenizer loads it (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, chat templates), run by the `tokenizers` crate itself (rust/, text_ffi.h).
// Torch-free. Thread-safe: one Tokenizer may encode and decode on many threads at once (data-loader workers);
// add_tokens waits for calls in flight.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct acctext_tokenizer;

namespace acc::text {

// One encoded sequence (with its pair, when given), as transformers' BatchEncoding holds it.
struct Encoding {
  std::vector<int64_t> ids, type_ids, attention_mask, special_tokens_mask;
  // [start, end) byte offsets into the text of the token's sequence (sequence_ids: 0 the text, 1 the pair,
  // -1 a special or padding token; those have (0, 0)).
  std::vector<std::pair<size_t, size_t>> offsets;
  std::vector<int32_t> sequence_ids;
  size_t sample = 0;  // the input it encodes (return_overflowing_tokens' overflow_to_sample_mapping)
};

enum class Side { Right, Left };
enum class Padding { None, Longest, MaxLength };
enum class Truncation { None, LongestFirst, OnlyFirst, OnlySecond };

// transformers' __call__ arguments. Unset sides come from tokenizer_config.json (padding_side,
// truncation_side); max_length unset with truncation or MaxLength padding is model_max_length.
struct EncodeOptions {
  bool add_special_tokens = true;
  Truncation truncation = Truncation::None;
  std::optional<size_t> max_length;
  size_t stride = 0;
  Padding padding = Padding::None;
  std::optional<size_t> pad_to_multiple_of;
  std::optional<Side> padding_side, truncation_side;
  size_t threads = 1;  // worker threads for a batch (1: the calling thread)
  // transformers' return_overflowing_tokens: the windows truncation cut off (stride tokens overlapping) follow
  // each input's encoding as further rows.
  bool return_overflowing_tokens = false;
  // false: Encoding::offsets left empty, the crate's faster path (for ids-only work: datasets).
  bool offsets = true;
};

struct AddedToken {
  int64_t id = -1;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, normalized = true, single_word = false;
};

// The named special tokens (transformers' SPECIAL_TOKENS_ATTRIBUTES) and the extra ones.
struct SpecialTokens {
  std::map<std::string, std::string> named;  // "bos_token" -> "<s>", ... (only those set)
  // Other *_token keys of tokenizer_config.json (Gemma 3's "boi_token", "image_token"), in its order.
  std::vector<std::pair<std::string, std::string>> model_specific;
  std::vector<std::string> extra;  // extra_special_tokens (additional_special_tokens before transformers 5)
};

struct ConfigView;

class Tokenizer {
 public:
  // A folder as AutoTokenizer.from_pretrained reads it. Refuses a folder without tokenizer.json, naming what
  // is there (tokenizer.model alone: SentencePiece, to be converted with transformers first).
  static std::shared_ptr<Tokenizer> from_pretrained(const std::string& dir);
  // tokenizer.json's text alone (no tokenizer_config.json); `source` names it in errors.
  static std::shared_ptr<Tokenizer> from_json(std::string_view json, const std::string& source,
                                              const std::string& overrides_json = "");
  // A byte-level BPE (GPT-2 / Llama-3's kind) trained on texts with tokenizers' BpeTrainer; the special
  // tokens get the first ids; `named` sets bos/eos/pad/... among them (e.g. {"eos_token", "<|end|>"}).
  static std::shared_ptr<Tokenizer> train_byte_level_bpe(const std::vector<std::string_view>& texts, size_t vocab_size,
                                                         size_t min_frequency, const std::vector<std::string>& special,
                                                         const std::map<std::string, std::string>& named);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<Encoding> encode_batch(const std::vector<std::string_view>& texts,
                                     const std::vector<std::string_view>* pairs, const EncodeOptions& options) const;
  Encoding encode(std::string_view text, const EncodeOptions& options = {}) const;
  // transformers' decode: the crate's decode, then clean_up_tokenization where tokenizer_config.json asks for it
  // (never for BPE models, as transformers 5). Ids outside the vocabulary are skipped, as transformers does;
  // a negative one, or one beyond 2^32, is an error naming it.
  std::string decode(std::span<const int64_t> ids, bool skip_special_tokens = false,
                     std::optional<bool> clean_up_tokenization_spaces = std::nullopt) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  size_t vocab_size() const;  // the model's vocabulary, as transformers' vocab_size
  size_t size() const;        // with added tokens, as len(tokenizer)
  std::vector<AddedToken> added_tokens() const;
  // Adds tokens (special or not) to the vocabulary; returns how many were new.
  size_t add_tokens(const std::vector<AddedToken>& tokens);

  const SpecialTokens& special_tokens() const { return special_; }
  // transformers' `tok.pad_token = tok.eos_token`: sets (or with nullopt unsets) a named special token, adding
  // it to the vocabulary as a special token when new. Not while other threads use this tokenizer.
  void set_special_token(const std::string& name, std::optional<std::string> token);
  std::optional<std::string> special_token(const std::string& name) const;  // "eos_token" -> "</s>"
  std::optional<int64_t> special_token_id(const std::string& name) const;
  // The named and model-specific ones as strings: transformers' special_tokens_map (chat templates see them).
  std::vector<std::pair<std::string, std::string>> special_tokens_map() const;
  std::vector<std::string> all_special_tokens() const;
  std::vector<int64_t> all_special_ids() const;

  // Not while other threads use this tokenizer.
  void set_chat_template(const std::string& name, std::string source) { chat_templates_[name] = std::move(source); }
  void set_model_max_length(size_t n) { model_max_length_ = n; }
  // The chat templates by name ("default", "tool_use", ...); empty without any.
  const std::map<std::string, std::string>& chat_templates() const { return chat_templates_; }
  std::optional<size_t> model_max_length() const { return model_max_length_; }
  Side padding_side() const { return padding_side_; }
  Side truncation_side() const { return truncation_side_; }
  const std::string& model_type() const { return model_type_; }
  const std::string& source() const { return source_; }

  // Writes tokenizer.json, tokenizer_config.json (the loaded one's keys, updated) and
  // special_tokens_map.json into dir (existing; each file atomically), as transformers' save_pretrained.
  void save_pretrained(const std::string& dir) const;

 private:
  Tokenizer(acctext_tokenizer* handle, std::string source);
  void apply_config(const std::string& dir, const ConfigView& config);
  void rebuild_post_processor();
  void add_missing_special_tokens();
  size_t resolve_max_length(const EncodeOptions& o) const;

  acctext_tokenizer* handle_;
  std::string source_, model_type_;
  SpecialTokens special_;
  std::map<std::string, std::string> chat_templates_;
  std::optional<size_t> model_max_length_;
  Side padding_side_ = Side::Right, truncation_side_ = Side::Right;
  bool clean_up_spaces_ = false, clean_up_bpe_ = false;
  bool add_bos_ = false, add_eos_ = false;
  std::string config_json_;  // tokenizer_config.json as read ("" without one): save_pretrained keeps its keys
};

// What acc_tokenizer_info and Tokenizer::info say, as JSON (vocabulary sizes, model type, special tokens and
// their ids, chat template names, model_max_length, sides).
std::string info_json(const Tokenizer& t);

// transformers' clean_up_tokenization: " ." -> "." and the like.
std::string clean_up_tokenization(std::string text);

}  // namespace acc::text
