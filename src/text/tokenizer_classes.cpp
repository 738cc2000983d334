#include "text/tokenizer_classes.hpp"

namespace acc::text {
namespace {

// Qwen2Tokenizer's PRETOKENIZE_REGEX (models/qwen2/tokenization_qwen2.py).
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<bool> config_bool(const json::Value* config, const char* key) {
  if (!config) return std::nullopt;
  auto v = config->find(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_bool()) v->fail("expected true or false");
  return v->as_bool();
}

std::string config_token(const json::Value* config, const char* key, const std::string& fallback) {
  if (!config) return fallback;
  auto v = config->find(key);
  if (!v || v->is_null()) return fallback;
  if (v->is_string()) return v->as_string();
  if (v->is_object()) return v->get_string("content");
  return fallback;
}

// The BPE model options a class passes (vocabulary and merges stay the file's).
void bpe_options(json::Writer& w, const char* unk, bool fuse_unk, bool byte_fallback, const char* prefix,
                 const char* suffix) {
  w.key("model").begin_object();
  w.key("dropout").null();
  w.key("unk_token");
  unk ? w.value(unk) : w.null();
  w.key("continuing_subword_prefix");
  prefix ? w.value(prefix) : w.null();
  w.key("end_of_word_suffix");
  suffix ? w.value(suffix) : w.null();
  w.key("fuse_unk").value(fuse_unk).key("byte_fallback").value(byte_fallback).key("ignore_merges").value(false);
  w.end_object();
}

void byte_level(json::Writer& w, bool add_prefix_space, bool trim_offsets, bool use_regex) {
  w.begin_object().key("type").value("ByteLevel").key("add_prefix_space").value(add_prefix_space);
  w.key("trim_offsets").value(trim_offsets).key("use_regex").value(use_regex).end_object();
}

void replace(json::Writer& w, const char* pattern, const char* content) {
  w.begin_object().key("type").value("Replace").key("pattern").begin_object().key("String").value(pattern).end_object();
  w.key("content").value(content).end_object();
}

void sentencepiece_decoder(json::Writer& w, bool strip_prefix) {
  w.key("decoder").begin_object().key("type").value("Sequence").key("decoders").begin_array();
  replace(w, "\xE2\x96\x81", " ");
  w.begin_object().key("type").value("ByteFallback").end_object();
  w.begin_object().key("type").value("Fuse").end_object();
  if (strip_prefix)
    w.begin_object()
        .key("type")
        .value("Strip")
        .key("content")
        .value(" ")
        .key("start")
        .value(1)
        .key("stop")
        .value(0)
        .end_object();
  w.end_array().end_object();
}

}  // namespace

ClassRules class_rules(const std::string& cls_in, const json::Value* config) {
  std::string cls = cls_in;
  if (cls.size() > 4 && cls.compare(cls.size() - 4, 4, "Fast") == 0) cls.resize(cls.size() - 4);
  ClassRules r;
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_object();
  if (cls == "LlamaTokenizer") {
    r.default_special = {{"unk_token", "<unk>"}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
    const bool add_prefix_space = config_bool(config, "add_prefix_space").value_or(true);
    const bool legacy = config_bool(config, "legacy").value_or(false);
    w.key("normalizer").null();
    w.key("pre_tokenizer").begin_object().key("type").value("Metaspace").key("replacement").value("\xE2\x96\x81");
    w.key("prepend_scheme").value(add_prefix_space ? (legacy ? "always" : "first") : "never");
    w.key("split").value(false).end_object();
    sentencepiece_decoder(w, add_prefix_space);
    bpe_options(w, nullptr, true, true, nullptr, nullptr);
  } else if (cls == "GemmaTokenizer") {
    r.default_special = {{"unk_token", "<unk>"},
                         {"bos_token", "<bos>"},
                         {"eos_token", "<eos>"},
                         {"pad_token", "<pad>"},
                         {"mask_token", "<mask>"}};
    w.key("normalizer");
    replace(w, " ", "\xE2\x96\x81");
    w.key("pre_tokenizer")
        .begin_object()
        .key("type")
        .value("Split")
        .key("pattern")
        .begin_object()
        .key("String")
        .value(" ");
    w.end_object().key("behavior").value("MergedWithPrevious").key("invert").value(false).end_object();
    sentencepiece_decoder(w, false);
    const std::string unk = config_token(config, "unk_token", "<unk>");
    bpe_options(w, unk.c_str(), true, true, nullptr, nullptr);
  } else if (cls == "Qwen2Tokenizer") {
    r.default_special = {{"unk_token", "<|endoftext|>"},
                         {"eos_token", "<|endoftext|>"},
                         {"pad_token", "<|endoftext|>"}};
    w.key("normalizer").begin_object().key("type").value("NFC").end_object();
    w.key("pre_tokenizer").begin_object().key("type").value("Sequence").key("pretokenizers").begin_array();
    w.begin_object()
        .key("type")
        .value("Split")
        .key("pattern")
        .begin_object()
        .key("Regex")
        .value(kQwen2Split)
        .end_object();
    w.key("behavior").value("Isolated").key("invert").value(false).end_object();
    byte_level(w, config_bool(config, "add_prefix_space").value_or(false), true, false);
    w.end_array().end_object();
    w.key("decoder");
    byte_level(w, true, true, true);
    bpe_options(w, nullptr, false, false, "", "");
  } else if (cls == "GPT2Tokenizer") {
    r.default_special = {{"unk_token", "<|endoftext|>"},
                         {"bos_token", "<|endoftext|>"},
                         {"eos_token", "<|endoftext|>"}};
    w.key("pre_tokenizer");
    byte_level(w, config_bool(config, "add_prefix_space").value_or(false), true, true);
    w.key("decoder");
    byte_level(w, true, true, true);
    bpe_options(w, nullptr, false, false, "", "");
  } else if (cls == "BertTokenizer") {
    r.default_special = {{"unk_token", "[UNK]"},
                         {"sep_token", "[SEP]"},
                         {"pad_token", "[PAD]"},
                         {"cls_token", "[CLS]"},
                         {"mask_token", "[MASK]"}};
    w.key("normalizer").begin_object().key("type").value("BertNormalizer").key("clean_text").value(true);
    w.key("handle_chinese_chars").value(config_bool(config, "tokenize_chinese_chars").value_or(true));
    w.key("strip_accents");
    if (auto s = config_bool(config, "strip_accents")) w.value(*s);
    else w.null();
    w.key("lowercase").value(config_bool(config, "do_lower_case").value_or(true)).end_object();
    w.key("pre_tokenizer").begin_object().key("type").value("BertPreTokenizer").end_object();
    w.key("decoder")
        .begin_object()
        .key("type")
        .value("WordPiece")
        .key("prefix")
        .value("##")
        .key("cleanup")
        .value(true)
        .end_object();
    const std::string unk = config_token(config, "unk_token", "[UNK]");
    w.key("model").begin_object().key("unk_token").value(unk).key("continuing_subword_prefix").value("##");
    w.key("max_input_chars_per_word").value(100).end_object();
  } else {
    return r;  // the generic class: tokenizer.json as it is
  }
  w.end_object();
  r.overrides_json = w.str();
  return r;
}

}  // namespace acc::text
