#include "text/chat_template.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>

#include "acc/json.hpp"
#include "acc/limits.hpp"
#include "text/ffi_call.hpp"

namespace acc::text {
using detail::check;
using detail::RustString;

namespace {

// transformers' get_chat_template.
std::string choose_template(const Tokenizer& tok, const ChatOptions& o, bool has_tools) {
  const auto& templates = tok.chat_templates();
  if (o.chat_template) {
    if (auto it = templates.find(*o.chat_template); it != templates.end()) return it->second;
    return *o.chat_template;  // not a name: the template's text
  }
  if (templates.empty())
    throw std::invalid_argument(tok.source() + " has no chat template (tokenizer_config.json's chat_template or "
                                               "chat_template.jinja): pass one");
  if (has_tools && templates.count("tool_use")) return templates.at("tool_use");
  if (auto it = templates.find("default"); it != templates.end()) return it->second;
  throw std::invalid_argument(tok.source() + " has several chat templates and none named \"default\": name one");
}

constexpr std::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";
constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

// The fuel for a conversation whose JSON takes `context_bytes` (limits.hpp explains the figures).
uint64_t template_fuel(size_t context_bytes) {
  const uint64_t per_byte = limits::kChatTemplateFuelMax / limits::kChatTemplateFuelPerByte;
  if (context_bytes >= per_byte) return limits::kChatTemplateFuelMax;
  const uint64_t want = limits::kChatTemplateFuelBase + limits::kChatTemplateFuelPerByte * context_bytes;
  return std::min(std::bit_ceil(want), limits::kChatTemplateFuelMax);
}

std::string_view strip(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// The messages as transformers hands them to the template: keys whose value is null dropped, reasoning copied
// to "thinking" and "reasoning_content" (_alias_reasoning_fields), and with continue_final_message its tag
// appended to the final message's text (returned in *final_text).
bool is_reasoning(std::string_view k) {
  for (const char* f : kReasoningFields)
    if (k == f) return true;
  return false;
}

std::string prepare_messages(const json::Value& messages, bool continue_final, const std::string& field,
                             const std::string& source, std::string* final_text) {
  if (continue_final && messages.size() == 0)
    throw std::invalid_argument("continue_final_message is set but the conversation is empty");
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json::Value m = messages.at(i);
    if (!m.is_object()) m.fail("a chat message must be a JSON object");
    const bool last = continue_final && i + 1 == messages.size();
    std::optional<json::Value> reasoning;
    for (const char* f : kReasoningFields)
      if (auto r = m.find(f); r && !r->is_null() && !reasoning) reasoning = r;
    // The final message's field to continue, and every copy of it when it is reasoning (transformers tags each).
    std::optional<std::string> continued;
    if (last) {
      if (is_reasoning(field) && reasoning) continued = reasoning->is_string() ? reasoning->as_string() : "";
      else if (auto v = m.find(field); v && !v->is_null() && v->is_string()) continued = v->as_string();
      else if (!(v && !v->is_null()))
        throw std::invalid_argument("continue_final_message is set but the final message has no \"" + field +
                                    "\" to continue");
      bool accepted = source.find(field) != std::string::npos;
      for (const char* f : kReasoningFields)
        if (is_reasoning(field) && source.find(f) != std::string::npos) accepted = true;
      if (!accepted)
        throw std::invalid_argument("continue_final_message is set to \"" + field +
                                    "\" but this is not an accepted field in the chat template");
      if (continued) *final_text = *continued;
    }
    auto tagged = [&](std::string_view k, const json::Value& v) {
      return continued && v.is_string() && v.as_string() == *continued &&
             (k == field || (is_reasoning(field) && is_reasoning(k)));
    };
    auto put = [&](const std::string& k, const json::Value& v) {
      if (tagged(k, v)) w.key(k).value(v.as_string() + std::string(kContinueTag));
      else w.key(k).value(v);
    };
    w.begin_object();
    if (reasoning) put("thinking", *reasoning);
    bool wrote_reasoning_content = false;
    for (const auto& [k, v] : m.items()) {
      if (v.is_null() || (reasoning && k == "thinking")) continue;
      if (reasoning && k == "reasoning_content") {
        put(k, *reasoning), wrote_reasoning_content = true;
        continue;
      }
      if (last && k == field && !is_reasoning(k)) {
        if (v.is_string()) {
          put(k, v);
          continue;
        }
        if (v.is_array()) {
          size_t block = v.size();
          for (size_t b = v.size(); b-- > 0;)
            if (v.at(b).is_object() && v.at(b).has("text")) {
              block = b;
              break;
            }
          if (block == v.size())
            throw std::invalid_argument("continue_final_message is set but we could not find any text to continue "
                                        "in the final message");
          w.key(k).begin_array();
          for (size_t b = 0; b < v.size(); ++b) {
            if (b != block) {
              w.value(v.at(b));
              continue;
            }
            w.begin_object();
            for (const auto& [bk, bv] : v.at(b).items()) {
              if (bk == "text") {
                *final_text = bv.as_string();
                w.key(bk).value(bv.as_string() + std::string(kContinueTag));
              } else {
                w.key(bk).value(bv);
              }
            }
            w.end_object();
          }
          w.end_array();
          continue;
        }
      }
      put(k, v);
    }
    if (reasoning && !wrote_reasoning_content) put("reasoning_content", *reasoning);
    w.end_object();
  }
  w.end_array();
  return w.str();
}

}  // namespace

RenderedChat render_chat(const Tokenizer& tok, std::string_view messages_json, const ChatOptions& o) {
  if (o.continue_final_message && o.add_generation_prompt)
    throw std::invalid_argument("continue_final_message and add_generation_prompt are not compatible: use "
                                "continue_final_message to continue the final message, add_generation_prompt to "
                                "start a new assistant turn");
  json::Document messages_doc(messages_json, "messages");
  auto messages = messages_doc.root();
  if (!messages.is_array()) messages.fail("expected a JSON array of messages");
  auto parse_optional = [](const std::string& text, const char* what,
                           json::Kind kind) -> std::optional<json::Document> {
    if (text.empty()) return std::nullopt;
    json::Document d(text, what);
    if (d.root().kind() != kind)
      d.root().fail(kind == json::Kind::Array ? "expected a JSON array" : "expected a JSON object");
    return d;
  };
  auto tools = parse_optional(o.tools_json, "tools", json::Kind::Array);
  auto documents = parse_optional(o.documents_json, "documents", json::Kind::Array);
  auto extra = parse_optional(o.extra_json, "chat template variables", json::Kind::Object);

  const std::string source = choose_template(tok, o, tools.has_value());
  std::string final_text;
  const std::string prepared =
      prepare_messages(messages, o.continue_final_message, o.continue_field, source, &final_text);
  json::Document prepared_doc(prepared, "messages");

  // The variables transformers passes: messages, tools, documents, add_generation_prompt, the special tokens
  // (bos_token, ...), then the caller's.
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_object();
  w.key("messages").value(prepared_doc.root());
  w.key("tools");
  tools ? w.value(tools->root()) : w.null();
  w.key("documents");
  documents ? w.value(documents->root()) : w.null();
  w.key("add_generation_prompt").value(o.add_generation_prompt);
  for (const auto& [name, token] : tok.special_tokens_map()) w.key(name).value(token);
  if (extra)
    for (const auto& [k, v] : extra->root().items()) w.key(k).value(v);
  w.end_object();
  const std::string& context = w.str();

  if (source.size() > limits::kChatTemplateBytes)
    throw std::invalid_argument("the chat template is larger than " + std::to_string(limits::kChatTemplateBytes) +
                                " bytes");
  RustString out, err;
  size_t out_len = 0, n_spans = 0;
  size_t* spans = nullptr;
  check(acctext_render_template(source.data(), source.size(), context.data(), context.size(), o.now_unix,
                                template_fuel(context.size()), &out.p, &out_len, &spans, &n_spans, &err.p),
        err, "the chat template of " + tok.source());
  RenderedChat r;
  r.text.assign(out.p, out_len);
  for (size_t i = 0; i < n_spans; ++i) r.generation_spans.emplace_back(spans[2 * i], spans[2 * i + 1]);
  acctext_spans_free(spans, n_spans);

  if (o.continue_final_message) {
    // transformers: cut at the tag, and where the template ate the space after it, the spaces before it too.
    const std::string_view tag = strip(kContinueTag);
    const size_t at = r.text.rfind(tag);
    if (r.text.find(strip(final_text)) == std::string::npos || at == std::string::npos)
      throw std::invalid_argument("continue_final_message is set but the final message does not appear in the chat "
                                  "after applying the chat template");
    const bool whole = r.text.compare(at, kContinueTag.size(), kContinueTag) == 0;
    r.text.resize(at);
    if (!whole) {
      const size_t keep = r.text.find_last_not_of(" \t\n\r\f\v");
      r.text.resize(keep == std::string::npos ? 0 : keep + 1);
    }
    for (auto& [s0, e0] : r.generation_spans) s0 = std::min(s0, r.text.size()), e0 = std::min(e0, r.text.size());
  }
  return r;
}

ChatEncoding encode_chat(const Tokenizer& tok, std::string_view messages_json, const ChatOptions& options,
                         EncodeOptions encode) {
  ChatEncoding c;
  RenderedChat r = render_chat(tok, messages_json, options);
  c.text = std::move(r.text);
  encode.add_special_tokens = false;
  c.encoding = tok.encode(c.text, encode);
  {
    const auto& off = c.encoding.offsets;
    const auto& seq = c.encoding.sequence_ids;
    auto char_to_token = [&](size_t pos) -> std::optional<size_t> {
      for (size_t t = 0; t < off.size(); ++t)
        if (seq[t] == 0 && off[t].first <= pos && pos < off[t].second) return t;
      return std::nullopt;
    };
    c.assistant_masks.assign(c.encoding.ids.size(), 0);
    for (auto [start, end] : r.generation_spans) {
      if (end <= start) continue;
      auto first = char_to_token(start);
      if (!first) break;  // truncated away
      auto last = char_to_token(end - 1);
      const size_t stop = last ? *last + 1 : c.encoding.ids.size();
      for (size_t t = *first; t < stop; ++t) c.assistant_masks[t] = 1;
    }
  }
  return c;
}

}  // namespace acc::text
