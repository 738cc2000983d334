// libacc.so's side of text_ffi.h: the Rust text library is libacc_text.so, loaded on first use from the folder
// libacc.so is in (or $ACC_TEXT_LIBRARY), so that programs without text, the demo among them, neither build nor
// load it. Each acctext_ function here forwards to the library's; the entry points that make a tokenizer or
// render a template report a missing library as their error (the others only run on what those made).
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "text/text_ffi.h"
#include "util/lazy_library.hpp"

namespace {

// clang-format off: the table of functions, several a line
#define ACC_TEXT_FUNCTIONS(X)                                                                                      \
  X(acctext_tokenizer_from_json) X(acctext_tokenizer_free) X(acctext_tokenizer_to_json) X(acctext_model_type)     \
  X(acctext_has_post_processor) X(acctext_set_post_processor) X(acctext_encode) X(acctext_encodings_count)        \
  X(acctext_encodings_view) X(acctext_encodings_free) X(acctext_decode) X(acctext_token_to_id)                    \
  X(acctext_id_to_token) X(acctext_vocab_size) X(acctext_added_tokens) X(acctext_add_tokens)                      \
  X(acctext_train_byte_level_bpe) X(acctext_render_template) X(acctext_spans_free)
// clang-format on

struct Library {
#define X(name) decltype(&::name) name = nullptr;
  ACC_TEXT_FUNCTIONS(X)
#undef X
  std::string why;  // empty once loaded
};

const Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
#define X(name) #name,
    static const char* const names[] = {ACC_TEXT_FUNCTIONS(X)};
#undef X
#define X(name) reinterpret_cast<void**>(&lib.name),
    void** const slots[] = {ACC_TEXT_FUNCTIONS(X)};
#undef X
    lib.why = acc::util::load_beside_libacc("libacc_text.so", "ACC_TEXT_LIBRARY", "text", names, slots,
                                            sizeof(slots) / sizeof(slots[0]));
  });
  return lib;
}

// *err gets the reason the library is missing (freed by acctext_string_free, which is free()).
int missing(char** err) {
  if (err) {
    const std::string& why = library().why;
    *err = static_cast<char*>(std::malloc(why.size() + 1));
    if (*err) std::memcpy(*err, why.c_str(), why.size() + 1);
  }
  return 1;
}

}  // namespace

extern "C" {

// Both sides allocate strings with malloc (the Rust side through libc), so this needs no library.
void acctext_string_free(char* s) { std::free(s); }

int acctext_tokenizer_from_json(const char* json, size_t len, const char* overrides, size_t overrides_len,
                                acctext_tokenizer** out, char** err) {
  const Library& l = library();
  return l.why.empty() ? l.acctext_tokenizer_from_json(json, len, overrides, overrides_len, out, err) : missing(err);
}

int acctext_train_byte_level_bpe(const char* const* texts, const size_t* text_lens, size_t n, size_t vocab_size,
                                 size_t min_frequency, const char* special_tokens_json, size_t special_len,
                                 char** out_json, char** err) {
  const Library& l = library();
  return l.why.empty() ? l.acctext_train_byte_level_bpe(texts, text_lens, n, vocab_size, min_frequency,
                                                        special_tokens_json, special_len, out_json, err)
                       : missing(err);
}

int acctext_render_template(const char* source, size_t source_len, const char* context_json, size_t context_len,
                            int64_t now_unix, uint64_t fuel, char** out, size_t* out_len, size_t** spans,
                            size_t* n_spans, char** err) {
  const Library& l = library();
  return l.why.empty() ? l.acctext_render_template(source, source_len, context_json, context_len, now_unix, fuel, out,
                                                   out_len, spans, n_spans, err)
                       : missing(err);
}

// The rest take what the three above made, so the library is loaded when they run.
void acctext_tokenizer_free(acctext_tokenizer* tok) {
  if (tok) library().acctext_tokenizer_free(tok);
}
int acctext_tokenizer_to_json(const acctext_tokenizer* tok, char** out, char** err) {
  return library().acctext_tokenizer_to_json(tok, out, err);
}
const char* acctext_model_type(const acctext_tokenizer* tok) { return library().acctext_model_type(tok); }
int acctext_has_post_processor(const acctext_tokenizer* tok) { return library().acctext_has_post_processor(tok); }
int acctext_set_post_processor(acctext_tokenizer* tok, const char* json, size_t len, char** err) {
  return library().acctext_set_post_processor(tok, json, len, err);
}
int acctext_encode(const acctext_tokenizer* tok, const char* const* texts, const size_t* text_lens,
                   const char* const* pairs, const size_t* pair_lens, size_t n, const acctext_encode_options* options,
                   acctext_encodings** out, char** err) {
  return library().acctext_encode(tok, texts, text_lens, pairs, pair_lens, n, options, out, err);
}
size_t acctext_encodings_count(const acctext_encodings* e) { return library().acctext_encodings_count(e); }
void acctext_encodings_view(const acctext_encodings* e, size_t i, acctext_encoding_view* view) {
  library().acctext_encodings_view(e, i, view);
}
void acctext_encodings_free(acctext_encodings* e) {
  if (e) library().acctext_encodings_free(e);
}
int acctext_decode(const acctext_tokenizer* tok, const uint32_t* ids, size_t n, uint8_t skip_special_tokens, char** out,
                   size_t* out_len, char** err) {
  return library().acctext_decode(tok, ids, n, skip_special_tokens, out, out_len, err);
}
int acctext_token_to_id(const acctext_tokenizer* tok, const char* token, size_t len, uint32_t* id) {
  return library().acctext_token_to_id(tok, token, len, id);
}
char* acctext_id_to_token(const acctext_tokenizer* tok, uint32_t id) { return library().acctext_id_to_token(tok, id); }
size_t acctext_vocab_size(const acctext_tokenizer* tok, uint8_t with_added_tokens) {
  return library().acctext_vocab_size(tok, with_added_tokens);
}
int acctext_added_tokens(const acctext_tokenizer* tok, char** out_json, char** err) {
  return library().acctext_added_tokens(tok, out_json, err);
}
int acctext_add_tokens(acctext_tokenizer* tok, const char* tokens_json, size_t len, size_t* added, char** err) {
  return library().acctext_add_tokens(tok, tokens_json, len, added, err);
}
void acctext_spans_free(size_t* spans, size_t n_spans) {
  if (spans) library().acctext_spans_free(spans, n_spans);
}

}  // extern "C"
