// Text: tokenizers, encodings, chat templates and text generation (src/text, models/hf/generate_text.hpp).
#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>

#include "acc/json.hpp"
#include "guard.hpp"
#include "handles.hpp"
#include "models/hf/generate_text.hpp"
#include "text/chat_template.hpp"
#include "text/options.hpp"
#include "text/tokenizer.hpp"
#include "util/options.hpp"

using acc::capi::guarded;
using acc::capi::need;
namespace text = acc::text;
namespace json = acc::json;

struct acc_encoding {
  std::vector<text::Encoding> rows;
  std::vector<std::vector<int64_t>> offsets, sequence_ids, assistant_masks;  // as int64, made once
  acc::capi::Live<acc::capi::Kind::encoding> live;
};

namespace {

char* copy_out(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

std::optional<json::Document> options_doc(const char* options_json, const char* what) {
  if (!options_json || !*options_json) return std::nullopt;
  json::Document d(options_json, what);
  if (!d.root().is_object()) throw acc::core::OptionsError(std::string(what) + ": expected a JSON object");
  return d;
}

acc_encoding* new_encoding(std::vector<text::Encoding> rows, std::vector<int64_t> assistant_masks = {},
                           bool with_masks = false) {
  auto e = std::make_unique<acc_encoding>();
  for (const auto& r : rows) {
    std::vector<int64_t> off;
    off.reserve(2 * r.offsets.size());
    for (auto [a, b] : r.offsets) off.push_back(static_cast<int64_t>(a)), off.push_back(static_cast<int64_t>(b));
    e->offsets.push_back(std::move(off));
    e->sequence_ids.emplace_back(r.sequence_ids.begin(), r.sequence_ids.end());
  }
  if (with_masks) e->assistant_masks.push_back(std::move(assistant_masks));
  e->rows = std::move(rows);
  return e.release();
}

std::vector<std::string_view> views(const char* const* texts, const size_t* lengths, int64_t count, const char* what) {
  std::vector<std::string_view> v;
  if (count < 0) throw std::invalid_argument(std::string("count is negative"));
  if (count > 0 && (!texts || !lengths)) throw std::invalid_argument(std::string(what) + " or their lengths are NULL");
  for (int64_t i = 0; i < count; ++i) {
    if (!texts[i] && lengths[i] > 0)
      throw std::invalid_argument(std::string(what) + "[" + std::to_string(i) + "] is NULL");
    v.emplace_back(texts[i] ? texts[i] : "", lengths[i]);
  }
  return v;
}

const text::Encoding& row_of(const acc_encoding* enc, int64_t row) {
  need(enc, "enc");
  if (row < 0 || static_cast<size_t>(row) >= enc->rows.size())
    throw std::out_of_range("row " + std::to_string(row) + " of an encoding with " + std::to_string(enc->rows.size()) +
                            " rows");
  return enc->rows[row];
}

}  // namespace

void acc_text_free(char* text) noexcept { std::free(text); }

acc_status acc_tokenizer_from_pretrained(const char* dir, acc_tokenizer** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    auto h = std::make_unique<acc_tokenizer>();
    h->tok = text::Tokenizer::from_pretrained(need(dir, "dir"));
    *out = h.release();
  });
}

acc_status acc_tokenizer_train_bpe(const char* const* texts, const size_t* lengths, int64_t count,
                                   const char* options_json, acc_tokenizer** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    auto corpus = views(texts, lengths, count, "texts");
    auto d = options_doc(options_json, "tokenizer training options");
    auto root = d ? std::optional<json::Value>(d->root()) : std::nullopt;
    auto h = std::make_unique<acc_tokenizer>();
    h->tok = text::train_bpe(corpus, text::parse_train_options(root ? &*root : nullptr));
    *out = h.release();
  });
}

void acc_tokenizer_destroy(acc_tokenizer* tok) noexcept { acc::capi::destroy_handle(tok, __func__); }

acc_status acc_tokenizer_save_pretrained(const acc_tokenizer* tok, const char* dir) noexcept {
  return guarded(__func__, [&] {
    const std::string d = need(dir, "dir");
    acc::config::make_directories(d);
    need(tok, "tok")->tok->save_pretrained(d);
  });
}

acc_status acc_tokenizer_info(const acc_tokenizer* tok, char** out_json) noexcept {
  if (out_json) *out_json = nullptr;
  return guarded(__func__, [&] {
    need(out_json, "out_json");
    *out_json = copy_out(text::info_json(*need(tok, "tok")->tok));
  });
}

acc_status acc_tokenizer_set_special_token(acc_tokenizer* tok, const char* name, const char* token) noexcept {
  return guarded(__func__, [&] {
    need(tok, "tok")
        ->tok->set_special_token(need(name, "name"), token ? std::optional<std::string>(token) : std::nullopt);
  });
}

acc_status acc_tokenizer_token_to_id(const acc_tokenizer* tok, const char* token, int64_t* out) noexcept {
  return guarded(__func__, [&] {
    need(out, "out");
    *out = need(tok, "tok")->tok->token_to_id(need(token, "token")).value_or(-1);
  });
}

acc_status acc_tokenizer_id_to_token(const acc_tokenizer* tok, int64_t id, char** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    if (auto t = need(tok, "tok")->tok->id_to_token(id)) *out = copy_out(*t);
  });
}

acc_status acc_tokenizer_encode(const acc_tokenizer* tok, const char* const* texts, const size_t* lengths,
                                const char* const* pairs, const size_t* pair_lengths, int64_t count,
                                const char* options_json, acc_encoding** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    auto t = views(texts, lengths, count, "texts");
    std::vector<std::string_view> p;
    if (pairs) p = views(pairs, pair_lengths, count, "pairs");
    auto d = options_doc(options_json, "encode options");
    auto root = d ? std::optional<json::Value>(d->root()) : std::nullopt;
    auto o = text::parse_encode_options(root ? &*root : nullptr, "encode options");
    *out = new_encoding(need(tok, "tok")->tok->encode_batch(t, pairs ? &p : nullptr, o));
  });
}

acc_status acc_encoding_count(const acc_encoding* enc, int64_t* out) noexcept {
  return guarded(__func__, [&] { *need(out, "out") = static_cast<int64_t>(need(enc, "enc")->rows.size()); });
}

acc_status acc_encoding_get(const acc_encoding* enc, int64_t row, const char* field, const int64_t** data,
                            int64_t* length) noexcept {
  if (data) *data = nullptr;
  if (length) *length = 0;
  return guarded(__func__, [&] {
    need(data, "data"), need(length, "length");
    const text::Encoding& r = row_of(enc, row);
    const std::string f = need(field, "field");
    const std::vector<int64_t>* v = nullptr;
    if (f == "input_ids") v = &r.ids;
    else if (f == "attention_mask") v = &r.attention_mask;
    else if (f == "token_type_ids") v = &r.type_ids;
    else if (f == "special_tokens_mask") v = &r.special_tokens_mask;
    else if (f == "offsets") v = &enc->offsets[row];
    else if (f == "sequence_ids") v = &enc->sequence_ids[row];
    else if (f == "assistant_masks" && !enc->assistant_masks.empty()) v = &enc->assistant_masks[row];
    else
      throw std::invalid_argument("field '" + f +
                                  "': expected input_ids, attention_mask, token_type_ids, "
                                  "special_tokens_mask, offsets, sequence_ids" +
                                  (enc->assistant_masks.empty() ? "" : ", assistant_masks"));
    *data = v->data();
    *length = static_cast<int64_t>(v->size());
  });
}

acc_status acc_encoding_sample(const acc_encoding* enc, int64_t row, int64_t* out) noexcept {
  return guarded(__func__, [&] { *need(out, "out") = static_cast<int64_t>(row_of(enc, row).sample); });
}

acc_status acc_encoding_to_batch(const acc_encoding* enc, acc_batch** out) noexcept {
  if (out) *out = nullptr;
  return guarded(__func__, [&] {
    need(out, "out");
    need(enc, "enc");
    const size_t n = enc->rows.size(), len = n ? enc->rows[0].ids.size() : 0;
    for (size_t i = 0; i < n; ++i)
      if (enc->rows[i].ids.size() != len)
        throw std::invalid_argument("acc_encoding_to_batch: row " + std::to_string(i) + " has " +
                                    std::to_string(enc->rows[i].ids.size()) + " tokens, row 0 has " +
                                    std::to_string(len) + ": encode with \"padding\"");
    auto stack = [&](auto field) {
      at::Tensor t = at::empty({static_cast<int64_t>(n), static_cast<int64_t>(len)}, at::kLong);
      for (size_t i = 0; i < n; ++i) std::memcpy(t[i].data_ptr<int64_t>(), field(i).data(), len * sizeof(int64_t));
      return t;
    };
    auto b = std::make_unique<acc_batch>();
    b->d.set("input_ids", stack([&](size_t i) -> const std::vector<int64_t>& { return enc->rows[i].ids; }));
    b->d.set("attention_mask",
             stack([&](size_t i) -> const std::vector<int64_t>& { return enc->rows[i].attention_mask; }));
    b->d.set("token_type_ids", stack([&](size_t i) -> const std::vector<int64_t>& { return enc->rows[i].type_ids; }));
    if (!enc->assistant_masks.empty())
      b->d.set("assistant_masks",
               stack([&](size_t i) -> const std::vector<int64_t>& { return enc->assistant_masks[i]; }));
    *out = b.release();
  });
}

void acc_encoding_destroy(acc_encoding* enc) noexcept { acc::capi::destroy_handle(enc, __func__); }

acc_status acc_tokenizer_decode(const acc_tokenizer* tok, const int64_t* ids, int64_t count, const char* options_json,
                                char** out_text, size_t* out_length) noexcept {
  if (out_text) *out_text = nullptr;
  if (out_length) *out_length = 0;
  return guarded(__func__, [&] {
    need(out_text, "out_text");
    if (count < 0 || (count > 0 && !ids)) throw std::invalid_argument("ids is NULL or count is negative");
    bool skip = false;
    std::optional<bool> clean;
    if (auto d = options_doc(options_json, "decode options"))
      for (const auto& [k, v] : d->root().items()) {
        if (!v.is_bool()) throw acc::core::OptionsError("decode options: '" + k + "' must be true or false");
        if (k == "skip_special_tokens") skip = v.as_bool();
        else if (k == "clean_up_tokenization_spaces") clean = v.as_bool();
        else throw acc::core::OptionsError("decode options: unknown key '" + k + "'");
      }
    const std::string text = need(tok, "tok")->tok->decode(std::span<const int64_t>(ids, count), skip, clean);
    *out_text = copy_out(text);
    if (out_length) *out_length = text.size();
  });
}

acc_status acc_tokenizer_apply_chat_template(const acc_tokenizer* tok, const char* messages_json,
                                             const char* options_json, char** out_text,
                                             acc_encoding** out_encoding) noexcept {
  if (out_text) *out_text = nullptr;
  if (out_encoding) *out_encoding = nullptr;
  return guarded(__func__, [&] {
    need(out_text, "out_text");
    const text::Tokenizer& t = *need(tok, "tok")->tok;
    auto d = options_doc(options_json, "chat template options");
    auto root = d ? std::optional<json::Value>(d->root()) : std::nullopt;
    const text::ChatOptions c = text::parse_chat_options(root ? &*root : nullptr);
    const text::EncodeOptions enc = text::parse_chat_encode_options(root ? &*root : nullptr);
    if (out_encoding) {
      auto e = text::encode_chat(t, need(messages_json, "messages_json"), c, enc);
      std::unique_ptr<acc_encoding> h(new_encoding({e.encoding}, e.assistant_masks, true));
      *out_text = copy_out(e.text);
      *out_encoding = h.release();
    } else {
      *out_text = copy_out(text::render_chat(t, need(messages_json, "messages_json"), c).text);
    }
  });
}

acc_status acc_generate_text(acc_model* model, const acc_tokenizer* tok, const char* prompt, const char* options_json,
                             acc_text_fn on_text, void* user_data, char** out_text) noexcept {
  if (out_text) *out_text = nullptr;
  return guarded(__func__, [&] {
    need(out_text, "out_text");
    acc::capi::HandleLock lock(need(model, "model")->busy, "the model");
    acc::core::Model& m = model->slot->tensors(__func__);
    acc::core::hf::TextCallback cb;
    if (on_text) cb = [&](std::string_view piece) { return on_text(user_data, piece.data(), piece.size()) == 0; };
    *out_text =
        copy_out(acc::core::hf::generate_text(m, *need(tok, "tok")->tok, need(prompt, "prompt"), options_json, cb));
  });
}
