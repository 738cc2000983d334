#include "text/tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <stdexcept>

#include "acc/files.hpp"
#include "acc/json.hpp"
#include "acc/limits.hpp"
#include "text/ffi_call.hpp"
#include "text/tokenizer_classes.hpp"

namespace acc::text {
namespace fs = std::filesystem;
using detail::check;
using detail::RustString;

namespace {

// transformers' SPECIAL_TOKENS_ATTRIBUTES.
constexpr const char* kNamed[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                  "pad_token", "cls_token", "mask_token"};

// A special token as tokenizer_config.json writes it: a string or an AddedToken object.
std::optional<std::string> token_text(const json::Value& v) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.as_string();
  if (v.is_object()) return v.get_string("content");
  v.fail("expected a token (a string or an object with \"content\")");
}

uint32_t to_u32(int64_t id, const char* what) {
  if (id < 0 || id > std::numeric_limits<uint32_t>::max())
    throw std::out_of_range(std::string(what) + " " + std::to_string(id) + " is not a token id (0 to 2^32-1)");
  return static_cast<uint32_t>(id);
}

}  // namespace

std::string clean_up_tokenization(std::string text) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {{" .", "."},    {" ?", "?"},   {" !", "!"},
                                                                         {" ,", ","},    {" ' ", "'"},  {" n't", "n't"},
                                                                         {" 'm", "'m"},  {" 's", "'s"}, {" 've", "'ve"},
                                                                         {" 're", "'re"}};
  for (auto [from, to] : kRules) {  // each rule over the whole text in turn, as Python's chained replace()
    std::string out;
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size())
      out.append(text, pos, hit - pos).append(to);
    text = out.append(text, pos, std::string::npos);
  }
  return text;
}

std::string info_json(const Tokenizer& t) {
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_object();
  w.key("vocab_size").value(static_cast<uint64_t>(t.vocab_size())).key("len").value(static_cast<uint64_t>(t.size()));
  w.key("model_type").value(t.model_type());
  w.key("special_tokens").begin_object();
  for (const auto& [k, v] : t.special_tokens_map()) w.key(k).value(v);
  w.end_object().key("special_token_ids").begin_object();
  for (const auto& [k, v] : t.special_tokens_map())
    if (auto id = t.token_to_id(v)) w.key(k + "_id").value(*id);
  w.end_object().key("all_special_tokens").begin_array();
  for (const auto& s : t.all_special_tokens()) w.value(s);
  w.end_array().key("all_special_ids").begin_array();
  for (int64_t id : t.all_special_ids()) w.value(id);
  w.end_array().key("chat_templates").begin_array();
  for (const auto& [name, src] : t.chat_templates()) w.value(name);
  w.end_array().key("model_max_length");
  if (t.model_max_length()) w.value(static_cast<uint64_t>(*t.model_max_length()));
  else w.null();
  w.key("padding_side").value(t.padding_side() == Side::Left ? "left" : "right");
  w.key("truncation_side").value(t.truncation_side() == Side::Left ? "left" : "right");
  w.end_object();
  return w.str();
}

Tokenizer::Tokenizer(acctext_tokenizer* handle, std::string source) : handle_(handle), source_(std::move(source)) {
  model_type_ = acctext_model_type(handle_);
}

Tokenizer::~Tokenizer() { acctext_tokenizer_free(handle_); }

std::shared_ptr<Tokenizer> Tokenizer::from_json(std::string_view json, const std::string& source,
                                                const std::string& overrides_json) {
  acctext_tokenizer* handle = nullptr;
  RustString err;
  check(acctext_tokenizer_from_json(json.data(), json.size(), overrides_json.empty() ? nullptr : overrides_json.data(),
                                    overrides_json.size(), &handle, &err.p),
        err, source);
  return std::shared_ptr<Tokenizer>(new Tokenizer(handle, source));
}

// tokenizer_config.json, read before tokenizer.json: its class says what to rebuild (tokenizer_classes.hpp).
struct ConfigView {
  std::string text;
  std::optional<json::Document> doc;
  std::optional<json::Value> root;
  ClassRules rules;
};

std::shared_ptr<Tokenizer> Tokenizer::from_pretrained(const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::invalid_argument("tokenizer folder '" + dir + "' is not a directory");
  const std::string file = dir + "/tokenizer.json";
  if (!fs::exists(file)) {
    if (fs::exists(dir + "/tokenizer.model"))
      throw std::invalid_argument("tokenizer folder '" + dir +
                                  "' has tokenizer.model (a SentencePiece model) but no tokenizer.json: libacc reads "
                                  "tokenizer.json, the fast tokenizer's file. Convert it once with transformers: "
                                  "AutoTokenizer.from_pretrained(folder).save_pretrained(folder)");
    throw std::invalid_argument("tokenizer folder '" + dir + "' has no tokenizer.json");
  }
  ConfigView config;
  const std::string config_file = dir + "/tokenizer_config.json";
  std::string cls;
  if (fs::exists(config_file)) {
    config.text = config::read_file(config_file, limits::kHfConfigBytes);
    config.doc.emplace(config.text, "tokenizer_config.json '" + config_file + "'");
    config.root = config.doc->root();
    if (!config.root->is_object()) config.root->fail("expected an object");
    if (auto c = config.root->find("tokenizer_class"); c && c->is_string()) cls = c->as_string();
  }
  config.rules = class_rules(cls, config.root ? &*config.root : nullptr);
  auto tok = from_json(config::read_file(file, limits::kTokenizerJsonBytes), "tokenizer.json '" + file + "'",
                       config.rules.overrides_json);
  tok->apply_config(dir, config);
  return tok;
}

void Tokenizer::apply_config(const std::string& dir, const ConfigView& config) {
  bool has_added_tokens_decoder = false;
  special_.named = config.rules.default_special;
  auto set_named = [&](const std::string& key, const json::Value& v) {
    if (auto t = token_text(v)) special_.named[key] = *t;
    else special_.named.erase(key);
  };
  auto set_extra = [&](const json::Value& v) {
    if (!v.is_array()) return;
    for (const auto& e : v.elements())
      if (auto t = token_text(e))
        if (std::find(special_.extra.begin(), special_.extra.end(), *t) == special_.extra.end())
          special_.extra.push_back(*t);
  };
  auto is_named = [](const std::string& key) {
    return std::find(std::begin(kNamed), std::end(kNamed), key) != std::end(kNamed);
  };
  // Other *_token keys, and a dict of extra_special_tokens: model-specific special tokens (transformers 5).
  auto add_model_specific = [&](const std::string& key, const json::Value& v) {
    if (!(v.is_string() || (v.is_object() && v.has("content")))) return;
    auto t = token_text(v);
    for (auto& [k, old] : special_.model_specific)
      if (k == key) return void(old = *t);
    special_.model_specific.emplace_back(key, *t);
  };
  if (config.root) {
    const json::Value& root = *config.root;
    config_json_ = config.text;
    for (const auto& [key, v] : root.items()) {
      if (is_named(key)) set_named(key, v);
      else if (key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0) add_model_specific(key, v);
    }
    if (auto e = root.find("extra_special_tokens"); e && e->is_array() && e->size() > 0) set_extra(*e);
    else if (auto a = root.find("additional_special_tokens")) set_extra(*a);
    if (auto e = root.find("extra_special_tokens"); e && e->is_object())
      for (const auto& [k, v] : e->items()) add_model_specific(k, v);
    has_added_tokens_decoder = root.has("added_tokens_decoder");
    if (auto v = root.find("model_max_length"); v && v->is_number()) {
      // transformers writes VERY_LARGE_INTEGER (1e30) for "no limit".
      double m = v->as_double();
      if (m >= 1 && m < 1e18) model_max_length_ = static_cast<size_t>(m);
    }
    auto side = [&](const char* key, Side& out) {
      if (auto v = root.find(key); v && v->is_string()) {
        if (v->as_string() == "left") out = Side::Left;
        else if (v->as_string() == "right") out = Side::Right;
        else v->fail("expected \"left\" or \"right\"");
      }
    };
    side("padding_side", padding_side_);
    side("truncation_side", truncation_side_);
    clean_up_spaces_ = root.get_bool_or("clean_up_tokenization_spaces", false);
    clean_up_bpe_ = root.get_bool_or("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", false);
    if (auto t = root.find("chat_template"); t && !t->is_null()) {
      if (t->is_string()) {
        chat_templates_["default"] = t->as_string();
      } else if (t->is_array()) {
        for (const auto& e : t->elements()) chat_templates_[e.get_string("name")] = e.get_string("template");
      } else {
        t->fail("expected a template string or a list of {\"name\", \"template\"}");
      }
    }
    // Its added_tokens_decoder: tokens tokenizer.json may lack (transformers adds them at load).
    if (auto dec = root.find("added_tokens_decoder"); dec && dec->is_object()) {
      std::vector<AddedToken> wanted;
      for (const auto& [id, t] : dec->items()) {
        AddedToken a;
        a.content = t.get_string("content");
        a.special = t.get_bool_or("special", false);
        a.lstrip = t.get_bool_or("lstrip", false);
        a.rstrip = t.get_bool_or("rstrip", false);
        a.normalized = t.get_bool_or("normalized", !a.special);
        a.single_word = t.get_bool_or("single_word", false);
        if (!token_to_id(a.content)) wanted.push_back(a);
      }
      if (!wanted.empty()) add_tokens(wanted);
    }
  }
  // Legacy special_tokens_map.json: read only when tokenizer_config.json has no added_tokens_decoder.
  const std::string map_file = dir + "/special_tokens_map.json";
  if (!has_added_tokens_decoder && fs::exists(map_file)) {
    json::Document doc(config::read_file(map_file, limits::kHfConfigBytes),
                       "special_tokens_map.json '" + map_file + "'");
    auto root = doc.root();
    for (const char* key : kNamed)
      if (root.has(key)) set_named(key, root.get(key));
    for (const char* key : {"additional_special_tokens", "extra_special_tokens"})
      if (root.has(key)) set_extra(root.get(key));
  }
  // chat_template.jinja and additional_chat_templates/*.jinja take precedence over the config's.
  if (fs::exists(dir + "/chat_template.jinja"))
    chat_templates_["default"] = config::read_file(dir + "/chat_template.jinja", limits::kChatTemplateBytes);
  if (fs::is_directory(dir + "/additional_chat_templates"))
    for (const auto& e : fs::directory_iterator(dir + "/additional_chat_templates"))
      if (e.path().extension() == ".jinja" && e.is_regular_file())
        chat_templates_[e.path().stem().string()] = config::read_file(e.path().string(), limits::kChatTemplateBytes);
  add_missing_special_tokens();
  rebuild_post_processor();
}

// As transformers' __init__: every named or extra special token that is not an added token yet becomes one
// (special), so that text spelling it encodes as that token.
void Tokenizer::add_missing_special_tokens() {
  std::vector<std::string> have;  // added tokens already special
  for (const auto& a : added_tokens())
    if (a.special) have.push_back(a.content);
  std::vector<AddedToken> missing;
  auto want = [&](const std::string& t) {
    if (std::find(have.begin(), have.end(), t) != have.end()) return;
    for (const auto& m : missing)
      if (m.content == t) return;
    AddedToken a;
    a.content = t, a.special = true, a.normalized = false;
    missing.push_back(a);
  };
  for (const auto& [key, t] : special_tokens_map()) want(t);
  for (const auto& t : special_.extra) want(t);
  if (!missing.empty()) add_tokens(missing);
}

// transformers sets a TemplateProcessing post-processor when tokenizer.json has none (with tokenizer.json
// present it ignores add_bos_token / add_eos_token, so the template only joins the sequences).
void Tokenizer::rebuild_post_processor() {
  if (acctext_has_post_processor(handle_)) return;
  const char* tp =
      R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":0}}],)"
      R"("pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],"special_tokens":{}})";
  RustString err2;
  check(acctext_set_post_processor(handle_, tp, std::strlen(tp), &err2.p), err2, source_);
}

void Tokenizer::set_special_token(const std::string& name, std::optional<std::string> token) {
  if (std::find(std::begin(kNamed), std::end(kNamed), name) == std::end(kNamed))
    throw std::invalid_argument("set_special_token: '" + name +
                                "' is not one of bos_token, eos_token, unk_token, "
                                "sep_token, pad_token, cls_token, mask_token");
  if (!token) {
    special_.named.erase(name);
    return;
  }
  if (token->empty()) throw std::invalid_argument("set_special_token: " + name + " is empty");
  special_.named[name] = *token;
  add_missing_special_tokens();
}

std::optional<std::string> Tokenizer::special_token(const std::string& name) const {
  auto it = special_.named.find(name);
  if (it == special_.named.end()) return std::nullopt;
  return it->second;
}

std::optional<int64_t> Tokenizer::special_token_id(const std::string& name) const {
  auto t = special_token(name);
  return t ? token_to_id(*t) : std::nullopt;
}

std::vector<std::pair<std::string, std::string>> Tokenizer::special_tokens_map() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* key : kNamed)
    if (auto t = special_token(key)) out.emplace_back(key, *t);
  for (const auto& kv : special_.model_specific) out.push_back(kv);
  return out;
}

std::vector<std::string> Tokenizer::all_special_tokens() const {
  std::vector<std::string> out;
  auto add = [&](const std::string& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  for (const auto& [key, t] : special_tokens_map()) add(t);
  for (const auto& t : special_.extra) add(t);
  return out;
}

std::vector<int64_t> Tokenizer::all_special_ids() const {
  std::vector<int64_t> out;
  for (const auto& t : all_special_tokens())
    if (auto id = token_to_id(t)) out.push_back(*id);
  return out;
}

size_t Tokenizer::resolve_max_length(const EncodeOptions& o) const {
  if (o.max_length) return *o.max_length;
  if (model_max_length_) return *model_max_length_;
  throw std::invalid_argument(source_ + ": truncation or max_length padding needs max_length: the tokenizer has no "
                                        "model_max_length");
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string_view>& texts,
                                              const std::vector<std::string_view>* pairs,
                                              const EncodeOptions& o) const {
  if (pairs && pairs->size() != texts.size())
    throw std::invalid_argument("encode: " + std::to_string(texts.size()) + " texts but " +
                                std::to_string(pairs->size()) + " pairs");
  acctext_encode_options c{};
  c.add_special_tokens = o.add_special_tokens;
  if (o.truncation != Truncation::None) {
    c.truncate = 1;
    c.truncation_strategy = o.truncation == Truncation::OnlyFirst ? 1 : o.truncation == Truncation::OnlySecond ? 2 : 0;
    c.truncate_left = o.truncation_side.value_or(truncation_side_) == Side::Left;
    c.max_length = resolve_max_length(o);
    c.stride = o.stride;
  }
  std::string pad_token;
  if (o.padding != Padding::None) {
    auto pad = special_token("pad_token");
    auto pad_id = pad ? token_to_id(*pad) : std::nullopt;
    if (!pad_id)
      throw std::invalid_argument(source_ + ": asked to pad, but the tokenizer has no padding token (pad_token in "
                                            "tokenizer_config.json; set one, e.g. the eos token)");
    pad_token = *pad;
    c.padding = o.padding == Padding::Longest ? 1 : 2;
    if (o.padding == Padding::MaxLength) c.pad_length = resolve_max_length(o);
    c.pad_left = o.padding_side.value_or(padding_side_) == Side::Left;
    c.pad_to_multiple_of = o.pad_to_multiple_of.value_or(0);
    c.pad_id = static_cast<uint32_t>(*pad_id);
    c.pad_token = pad_token.c_str();
  }
  c.threads = o.threads;
  c.return_overflowing = o.return_overflowing_tokens;
  c.without_offsets = !o.offsets;
  std::vector<const char*> tp(texts.size()), pp(pairs ? pairs->size() : 0);
  std::vector<size_t> tl(texts.size()), pl(pp.size());
  for (size_t i = 0; i < texts.size(); ++i) tp[i] = texts[i].data(), tl[i] = texts[i].size();
  for (size_t i = 0; i < pp.size(); ++i) pp[i] = (*pairs)[i].data(), pl[i] = (*pairs)[i].size();
  acctext_encodings* encs = nullptr;
  RustString err;
  check(acctext_encode(handle_, tp.data(), tl.data(), pairs ? pp.data() : nullptr, pairs ? pl.data() : nullptr,
                       texts.size(), &c, &encs, &err.p),
        err, "encode with " + source_);
  std::unique_ptr<acctext_encodings, void (*)(acctext_encodings*)> owner(encs, acctext_encodings_free);
  std::vector<Encoding> out(acctext_encodings_count(encs));
  for (size_t i = 0; i < out.size(); ++i) {
    acctext_encoding_view v;
    acctext_encodings_view(encs, i, &v);
    Encoding& e = out[i];
    e.ids.assign(v.ids, v.ids + v.length);
    e.type_ids.assign(v.type_ids, v.type_ids + v.length);
    e.attention_mask.assign(v.attention_mask, v.attention_mask + v.length);
    e.special_tokens_mask.assign(v.special_tokens_mask, v.special_tokens_mask + v.length);
    e.sequence_ids.assign(v.sequence_ids, v.sequence_ids + v.length);
    e.sample = v.sample;
    if (v.offsets) {
      e.offsets.resize(v.length);
      for (size_t k = 0; k < v.length; ++k) e.offsets[k] = {v.offsets[2 * k], v.offsets[2 * k + 1]};
    }
  }
  return out;
}

Encoding Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<std::string_view> one{text};
  return std::move(encode_batch(one, nullptr, options).front());
}

std::string Tokenizer::decode(std::span<const int64_t> ids, bool skip_special_tokens,
                              std::optional<bool> clean_up_tokenization_spaces) const {
  std::vector<uint32_t> u(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) u[i] = to_u32(ids[i], "decode: id");
  RustString out, err;
  size_t len = 0;
  check(acctext_decode(handle_, u.data(), u.size(), skip_special_tokens, &out.p, &len, &err.p), err,
        "decode with " + source_);
  std::string text(out.p, len);
  // transformers 5 skips the clean-up for BPE models (it would eat real spaces) unless told otherwise.
  if (clean_up_tokenization_spaces.value_or(clean_up_spaces_) && (model_type_ != "BPE" || clean_up_bpe_))
    text = clean_up_tokenization(std::move(text));
  return text;
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  uint32_t id = 0;
  if (acctext_token_to_id(handle_, token.data(), token.size(), &id)) return id;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id > std::numeric_limits<uint32_t>::max()) return std::nullopt;
  RustString s;
  s.p = acctext_id_to_token(handle_, static_cast<uint32_t>(id));
  if (!s.p) return std::nullopt;
  return s.str();
}

size_t Tokenizer::vocab_size() const { return acctext_vocab_size(handle_, 0); }
size_t Tokenizer::size() const { return acctext_vocab_size(handle_, 1); }

std::vector<AddedToken> Tokenizer::added_tokens() const {
  RustString out, err;
  check(acctext_added_tokens(handle_, &out.p, &err.p), err, source_);
  json::Document doc(out.str(), "added tokens");
  std::vector<AddedToken> v;
  for (const auto& t : doc.root().elements()) {
    AddedToken a;
    a.id = t.get_int("id");
    a.content = t.get_string("content");
    a.special = t.get_bool("special"), a.lstrip = t.get_bool("lstrip"), a.rstrip = t.get_bool("rstrip");
    a.normalized = t.get_bool("normalized"), a.single_word = t.get_bool("single_word");
    v.push_back(std::move(a));
  }
  return v;
}

size_t Tokenizer::add_tokens(const std::vector<AddedToken>& tokens) {
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_array();
  for (const auto& t : tokens) {
    if (t.content.empty()) throw std::invalid_argument("add_tokens: an empty token");
    w.begin_object().key("content").value(t.content).key("special").value(t.special).key("lstrip").value(t.lstrip);
    w.key("rstrip").value(t.rstrip).key("normalized").value(t.normalized).key("single_word").value(t.single_word);
    w.end_object();
  }
  w.end_array();
  std::string j = w.str();
  size_t added = 0;
  RustString err;
  check(acctext_add_tokens(handle_, j.data(), j.size(), &added, &err.p), err, "add_tokens to " + source_);
  return added;
}

std::shared_ptr<Tokenizer> Tokenizer::train_byte_level_bpe(const std::vector<std::string_view>& texts,
                                                           size_t vocab_size, size_t min_frequency,
                                                           const std::vector<std::string>& special,
                                                           const std::map<std::string, std::string>& named) {
  if (texts.empty()) throw std::invalid_argument("train_byte_level_bpe: no texts");
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_array();
  for (const auto& s : special) w.value(s);
  w.end_array();
  std::string specials = w.str();
  std::vector<const char*> p(texts.size());
  std::vector<size_t> l(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) p[i] = texts[i].data(), l[i] = texts[i].size();
  RustString out, err;
  check(acctext_train_byte_level_bpe(p.data(), l.data(), texts.size(), vocab_size, min_frequency, specials.data(),
                                     specials.size(), &out.p, &err.p),
        err, "train_byte_level_bpe");
  auto tok = from_json(out.str(), "a trained byte-level BPE");
  for (const auto& [key, value] : named) {
    if (std::find(std::begin(kNamed), std::end(kNamed), key) == std::end(kNamed))
      throw std::invalid_argument("train_byte_level_bpe: '" + key + "' is not a special token name (bos_token, ...)");
    if (std::find(special.begin(), special.end(), value) == special.end())
      throw std::invalid_argument("train_byte_level_bpe: " + key + " '" + value + "' is not among the special tokens");
    tok->special_.named[key] = value;
  }
  return tok;
}

void Tokenizer::save_pretrained(const std::string& dir) const {
  if (!fs::is_directory(dir)) throw std::invalid_argument("save_pretrained: '" + dir + "' is not a directory");
  RustString tj, err;
  check(acctext_tokenizer_to_json(handle_, &tj.p, &err.p), err, source_);
  config::write_file_atomic(dir + "/tokenizer.json", tj.str());

  // tokenizer_config.json: the loaded file's keys, with the special tokens and settings this tokenizer has.
  json::Writer w(json::Writer::Layout::Indented, 2);
  w.begin_object();
  std::vector<std::string> written;
  auto mine = [](const std::string& k) {
    for (const char* n : kNamed)
      if (k == n) return true;
    return k == "chat_template" || k == "extra_special_tokens" || k == "additional_special_tokens" ||
           k == "model_max_length" || k == "padding_side" || k == "truncation_side" || k == "tokenizer_class";
  };
  if (!config_json_.empty()) {
    json::Document doc(config_json_, "tokenizer_config.json");
    for (const auto& [k, v] : doc.root().items())
      if (!mine(k)) w.key(k).value(v);
  }
  for (const auto& [k, v] : special_.named) w.key(k).value(v);
  if (!special_.extra.empty()) {
    w.key("extra_special_tokens").begin_array();
    for (const auto& t : special_.extra) w.value(t);
    w.end_array();
  }
  if (model_max_length_) w.key("model_max_length").value(static_cast<uint64_t>(*model_max_length_));
  w.key("padding_side").value(padding_side_ == Side::Left ? "left" : "right");
  w.key("truncation_side").value(truncation_side_ == Side::Left ? "left" : "right");
  w.key("tokenizer_class").value("TokenizersBackend");
  w.end_object();
  config::write_file_atomic(dir + "/tokenizer_config.json", w.str() + "\n");
  // Chat templates as transformers 5 saves them: chat_template.jinja, others in additional_chat_templates/.
  for (const auto& [name, source] : chat_templates_) {
    if (name == "default") {
      config::write_file_atomic(dir + "/chat_template.jinja", source);
    } else {
      config::make_directories(dir + "/additional_chat_templates");
      config::write_file_atomic(config::child_path(dir + "/additional_chat_templates", name + ".jinja",
                                                   "chat template name"),
                                source);
    }
  }
}

}  // namespace acc::text
