/* The narrow C interface between libacc's C++ and its Rust text library (rust/, DESIGN.md section 7).
 * Internal: the acctext_ prefix is outside libacc's exported acc_* names, so the version script hides it.
 * Conventions: a function returning int returns 0 on success; on failure it returns 1 and sets *err to a
 * message (UTF-8, NUL-terminated) the caller frees with acctext_string_free. Strings in are (pointer,
 * length) pairs of UTF-8; strings out are allocated by Rust and freed with acctext_string_free. No panic
 * crosses this interface (each entry point catches it and reports it as an error). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct acctext_tokenizer acctext_tokenizer;
typedef struct acctext_encodings acctext_encodings;

void acctext_string_free(char* s);

/* tokenizer.json's text. overrides (may be NULL): a JSON object whose "normalizer", "pre_tokenizer" and
 * "decoder" replace the file's, and whose "model" fields are set in the file's model (what a transformers
 * tokenizer class rebuilds). Thread-safe afterwards: encode, decode and look-ups may run on many threads at
 * once; acctext_add_tokens waits for them. */
int acctext_tokenizer_from_json(const char* json, size_t len, const char* overrides, size_t overrides_len,
                                acctext_tokenizer** out, char** err);
void acctext_tokenizer_free(acctext_tokenizer* tok);
/* tokenizer.json's text again (pretty-printed as the crate saves it), with added tokens. */
int acctext_tokenizer_to_json(const acctext_tokenizer* tok, char** out, char** err);

/* The model's kind: "BPE", "WordPiece", "WordLevel" or "Unigram" (static storage). */
const char* acctext_model_type(const acctext_tokenizer* tok);
/* 1 when the tokenizer has a post-processor, else 0. */
int acctext_has_post_processor(const acctext_tokenizer* tok);
/* Replaces the post-processor with one given as tokenizer.json writes it (transformers rebuilds it from
 * add_bos_token / add_eos_token). */
int acctext_set_post_processor(acctext_tokenizer* tok, const char* json, size_t len, char** err);

typedef struct {
  uint8_t add_special_tokens;
  uint8_t truncate;              /* 0: no truncation */
  uint8_t truncation_strategy;   /* 0 longest_first, 1 only_first, 2 only_second */
  uint8_t truncate_left;
  size_t max_length;             /* with truncate */
  size_t stride;
  uint8_t padding;               /* 0 none, 1 longest in the batch, 2 to pad_length */
  uint8_t pad_left;
  size_t pad_length;
  size_t pad_to_multiple_of;     /* 0: none */
  uint32_t pad_id;
  uint32_t pad_type_id;
  const char* pad_token;         /* NUL-terminated */
  size_t threads;                /* 0 or 1: the calling thread only */
  uint8_t return_overflowing;    /* the windows truncation cut off (with stride) follow each encoding */
  uint8_t without_offsets;       /* 1: no offsets (the view's are NULL): the crate's faster encode_fast */
} acctext_encode_options;

/* n texts (and, where pairs is not NULL, n second sequences), encoded as transformers' batch call does. */
int acctext_encode(const acctext_tokenizer* tok, const char* const* texts, const size_t* text_lens,
                   const char* const* pairs, const size_t* pair_lens, size_t n, const acctext_encode_options* options,
                   acctext_encodings** out, char** err);

typedef struct {
  size_t length;
  const uint32_t* ids;
  const uint32_t* type_ids;
  const uint32_t* attention_mask;
  const uint32_t* special_tokens_mask;
  const size_t* offsets;       /* 2 * length: byte offsets [start, end) in the text of its sequence; NULL
                                  when encoded without_offsets */
  const int32_t* sequence_ids; /* 0 the text, 1 the pair, -1 a special or padding token */
  size_t sample;               /* the input it came from (overflowing windows: overflow_to_sample_mapping) */
} acctext_encoding_view;

size_t acctext_encodings_count(const acctext_encodings* e);
void acctext_encodings_view(const acctext_encodings* e, size_t i, acctext_encoding_view* view);
void acctext_encodings_free(acctext_encodings* e);

int acctext_decode(const acctext_tokenizer* tok, const uint32_t* ids, size_t n, uint8_t skip_special_tokens, char** out,
                   size_t* out_len, char** err);
/* 1 and *id set when the token is in the vocabulary (added tokens included), else 0. */
int acctext_token_to_id(const acctext_tokenizer* tok, const char* token, size_t len, uint32_t* id);
/* The token's text, or NULL for an id outside the vocabulary. */
char* acctext_id_to_token(const acctext_tokenizer* tok, uint32_t id);
size_t acctext_vocab_size(const acctext_tokenizer* tok, uint8_t with_added_tokens);
/* The added tokens as JSON: [{"id":..,"content":..,"special":..,"lstrip":..,"rstrip":..,"normalized":..,
 * "single_word":..}, ...] by id. */
int acctext_added_tokens(const acctext_tokenizer* tok, char** out_json, char** err);
/* tokens_json: [{"content":..,"special":..,"lstrip":..,"rstrip":..,"normalized":..,"single_word":..}]; sets
 * *added to how many were new. */
int acctext_add_tokens(acctext_tokenizer* tok, const char* tokens_json, size_t len, size_t* added, char** err);

/* A byte-level BPE tokenizer (GPT-2 / Llama-3's kind) trained on texts, as tokenizers' BpeTrainer does;
 * special tokens get the first ids. Out: tokenizer.json's text. */
int acctext_train_byte_level_bpe(const char* const* texts, const size_t* text_lens, size_t n, size_t vocab_size,
                                 size_t min_frequency, const char* special_tokens_json, size_t special_len,
                                 char** out_json, char** err);

/* A chat template rendered as transformers' apply_chat_template renders it: Jinja with trim_blocks and
 * lstrip_blocks, loop controls, Python's string and dict methods, tojson as json.dumps, raise_exception,
 * strftime_now (at now_unix seconds, local time; < 0: the current time). context_json: the template's
 * variables. {% generation %} blocks are recorded: *spans gets 2 * *n_spans byte offsets [start, end) into
 * the text (free with acctext_spans_free). fuel bounds the template's work (0: none). */
int acctext_render_template(const char* source, size_t source_len, const char* context_json, size_t context_len,
                            int64_t now_unix, uint64_t fuel, char** out, size_t* out_len, size_t** spans,
                            size_t* n_spans, char** err);
void acctext_spans_free(size_t* spans, size_t n_spans);

#ifdef __cplusplus
}
#endif
