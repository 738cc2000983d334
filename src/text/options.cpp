#include "text/options.hpp"

#include <algorithm>

#include "acc/config.hpp"

namespace acc::text {
namespace {

Side side_of(const json::Value& v) {
  if (v.is_string() && v.as_string() == "left") return Side::Left;
  if (v.is_string() && v.as_string() == "right") return Side::Right;
  throw config::Error(v.where() + ": expected \"left\" or \"right\"");
}

}  // namespace

// acc_tokenizer_encode's options (also read by apply_chat_template, which has keys of its own: `ignore`).
EncodeOptions parse_encode_options(const json::Value* root, const char* what,
                                   std::initializer_list<const char*> ignore) {
  EncodeOptions o;
  if (!root) return o;
  for (const auto& [key, v] : root->items()) {
    const std::string& k = key;  // a lambda cannot capture a structured binding before C++20's P1091 (clang 14)
    auto bad = [&](const char* expected) {
      throw config::Error(std::string(what) + ": '" + k + "' must be " + expected);
    };
    if (k == "add_special_tokens") {
      if (!v.is_bool()) bad("true or false");
      o.add_special_tokens = v.as_bool();
    } else if (k == "truncation") {
      if (v.is_bool()) o.truncation = v.as_bool() ? Truncation::LongestFirst : Truncation::None;
      else if (v.is_string() && v.as_string() == "longest_first") o.truncation = Truncation::LongestFirst;
      else if (v.is_string() && v.as_string() == "only_first") o.truncation = Truncation::OnlyFirst;
      else if (v.is_string() && v.as_string() == "only_second") o.truncation = Truncation::OnlySecond;
      else bad("true, false, \"longest_first\", \"only_first\" or \"only_second\"");
    } else if (k == "padding") {
      if (v.is_bool()) o.padding = v.as_bool() ? Padding::Longest : Padding::None;
      else if (v.is_string() && v.as_string() == "longest") o.padding = Padding::Longest;
      else if (v.is_string() && v.as_string() == "max_length") o.padding = Padding::MaxLength;
      else if (v.is_string() && v.as_string() == "do_not_pad") o.padding = Padding::None;
      else bad("true, false, \"longest\" or \"max_length\"");
    } else if (k == "max_length" || k == "stride" || k == "pad_to_multiple_of" || k == "threads") {
      if (!v.is_integer() || v.as_int() < 0 || (k != "stride" && v.as_int() == 0)) bad("a positive integer");
      const auto n = static_cast<size_t>(v.as_int());
      if (k == "max_length") o.max_length = n;
      else if (k == "stride") o.stride = n;
      else if (k == "pad_to_multiple_of") o.pad_to_multiple_of = n;
      else o.threads = std::min<size_t>(n, 256);
    } else if (k == "padding_side") {
      o.padding_side = side_of(v);
    } else if (k == "truncation_side") {
      o.truncation_side = side_of(v);
    } else if (k == "return_overflowing_tokens") {
      if (!v.is_bool()) bad("true or false");
      o.return_overflowing_tokens = v.as_bool();
    } else if (std::find_if(ignore.begin(), ignore.end(), [&](const char* i) { return k == i; }) == ignore.end()) {
      throw config::Error(std::string(what) + ": unknown key '" + k + "'");
    }
  }
  return o;
}

namespace {
constexpr std::initializer_list<const char*> kChatKeys = {"chat_template",
                                                          "add_generation_prompt",
                                                          "continue_final_message",
                                                          "tools",
                                                          "documents",
                                                          "template_variables",
                                                          "now"};
}

ChatOptions parse_chat_options(const json::Value* root) {
  ChatOptions c;
  if (!root) return c;
  auto bad = [](const json::Value& v, const char* expected) {
    throw config::Error(v.where() + ": expected " + expected);
  };
  if (auto v = root->find("chat_template")) {
    if (!v->is_string()) bad(*v, "a template or a template's name");
    c.chat_template = v->as_string();
  }
  if (auto v = root->find("add_generation_prompt")) {
    if (!v->is_bool()) bad(*v, "true or false");
    c.add_generation_prompt = v->as_bool();
  }
  if (auto v = root->find("continue_final_message")) {
    if (v->is_string()) c.continue_final_message = true, c.continue_field = v->as_string();
    else if (v->is_bool()) c.continue_final_message = v->as_bool();
    else bad(*v, "true, false or a field name");
  }
  if (auto v = root->find("tools"); v && !v->is_null()) c.tools_json = v->text();
  if (auto v = root->find("documents"); v && !v->is_null()) c.documents_json = v->text();
  if (auto v = root->find("template_variables"); v && !v->is_null()) c.extra_json = v->text();
  if (auto v = root->find("now")) {
    if (!v->is_integer()) bad(*v, "seconds since the epoch");
    c.now_unix = v->as_int();
  }
  return c;
}

EncodeOptions parse_chat_encode_options(const json::Value* root) {
  return parse_encode_options(root, "chat template options", kChatKeys);
}

TrainOptions parse_train_options(const json::Value* root) {
  TrainOptions o;
  if (!root) return o;
  for (const auto& [key, v] : root->items()) {
    const std::string& k = key;  // (see parse_encode_options)
    auto bad = [&](const char* expected) {
      throw config::Error("tokenizer training options: '" + k + "' must be " + expected);
    };
    if (k == "vocab_size" || k == "min_frequency" || k == "model_max_length") {
      if (!v.is_integer() || v.as_int() < (k == "min_frequency" ? 0 : 1)) bad("a positive integer");
      const auto n = static_cast<size_t>(v.as_int());
      if (k == "vocab_size") o.vocab_size = n;
      else if (k == "min_frequency") o.min_frequency = n;
      else o.model_max_length = n;
    } else if (k == "special_tokens") {
      if (!v.is_array()) bad("a list of strings");
      for (const auto& t : v.elements()) {
        if (!t.is_string()) bad("a list of strings");
        o.special_tokens.push_back(t.as_string());
      }
    } else if (k == "chat_template") {
      if (!v.is_string()) bad("a template");
      o.chat_template = v.as_string();
    } else if (k.size() > 6 && k.compare(k.size() - 6, 6, "_token") == 0) {
      if (!v.is_string()) bad("one of special_tokens");
      o.named[k] = v.as_string();
    } else {
      throw config::Error("tokenizer training options: unknown key '" + k + "'");
    }
  }
  return o;
}

std::shared_ptr<Tokenizer> train_bpe(const std::vector<std::string_view>& texts, const TrainOptions& o) {
  auto tok = Tokenizer::train_byte_level_bpe(texts, o.vocab_size, o.min_frequency, o.special_tokens, o.named);
  if (!o.chat_template.empty()) tok->set_chat_template("default", o.chat_template);
  if (o.model_max_length) tok->set_model_max_length(*o.model_max_length);
  return tok;
}

}  // namespace acc::text
