/* Tokenizers, chat templates and text generation through the C ABI (acc.h's Text section). The outputs'
 * equality with transformers is tests/text's; this checks the ABI's contract: handles, options, borrowed and
 * owned results, errors naming their culprit.  usage: test_text SOURCE_ROOT SCRATCH_DIR */
#include "check.h"

#include <stdint.h>

typedef struct {
  char text[4096];
  size_t used;
  int calls;
} Pieces;

static int32_t on_piece(void* user, const char* piece, size_t length) {
  Pieces* p = (Pieces*)user;
  if (p->used + length < sizeof p->text) {
    memcpy(p->text + p->used, piece, length);
    p->used += length;
    p->text[p->used] = '\0';
  }
  ++p->calls;
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && !strcmp(argv[3], "--library-missing")) {
    /* ACC_TEXT_LIBRARY names no file: a clear error, nothing else affected. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/text/tiny/bytebpe", argv[1]);
    acc_tokenizer* tok = NULL;
    EXPECT_ERR(acc_tokenizer_from_pretrained(dir, &tok), ACC_ERR_INVALID_ARGUMENT, "text library could not be loaded");
    EXPECT_ERR(acc_tokenizer_from_pretrained(dir, &tok), ACC_ERR_INVALID_ARGUMENT, "ACC_TEXT_LIBRARY");
    EXPECT(tok == NULL);
    return finish();
  }
  if (argc != 3) {
    fprintf(stderr, "usage: test_text SOURCE_ROOT SCRATCH_DIR [--library-missing]\n");
    return 2;
  }
  char dir[1024], saved[1024];
  snprintf(dir, sizeof dir, "%s/tests/text/tiny/bytebpe", argv[1]);
  snprintf(saved, sizeof saved, "%s/text-saved", argv[2]);

  acc_tokenizer* tok = NULL;
  EXPECT_OK(acc_tokenizer_from_pretrained(dir, &tok));
  EXPECT_ERR(acc_tokenizer_from_pretrained("/nonexistent/tok", &tok), ACC_ERR_INVALID_ARGUMENT, "/nonexistent/tok");
  EXPECT(tok == NULL);
  EXPECT_OK(acc_tokenizer_from_pretrained(dir, &tok));

  char* info = NULL;
  EXPECT_OK(acc_tokenizer_info(tok, &info));
  EXPECT(info && strstr(info, "\"eos_token\":\"<|im_end|>\"") != NULL);
  acc_text_free(info);

  /* Encode a padded batch, read it back, make it a batch of tensors. */
  const char* texts[] = {"Hello world!", "A longer sentence, with more tokens in it."};
  size_t lengths[] = {strlen(texts[0]), strlen(texts[1])};
  acc_encoding* enc = NULL;
  EXPECT_OK(acc_tokenizer_encode(tok, texts, lengths, NULL, NULL, 2, "{\"padding\": true, \"padding_side\": \"left\"}",
                                 &enc));
  int64_t rows = 0;
  EXPECT_OK(acc_encoding_count(enc, &rows));
  EXPECT(rows == 2);
  const int64_t *ids0 = NULL, *ids1 = NULL, *mask0 = NULL;
  int64_t n0 = 0, n1 = 0, nm = 0;
  EXPECT_OK(acc_encoding_get(enc, 0, "input_ids", &ids0, &n0));
  EXPECT_OK(acc_encoding_get(enc, 1, "input_ids", &ids1, &n1));
  EXPECT_OK(acc_encoding_get(enc, 0, "attention_mask", &mask0, &nm));
  EXPECT(n0 == n1 && n0 == nm && n0 > 3);
  EXPECT(mask0 && mask0[0] == 0 && mask0[n0 - 1] == 1); /* left padding */
  EXPECT_ERR(acc_encoding_get(enc, 2, "input_ids", &ids0, &n0), ACC_ERR_INVALID_ARGUMENT, "row 2");
  EXPECT_ERR(acc_encoding_get(enc, 0, "labels", &ids0, &n0), ACC_ERR_INVALID_ARGUMENT, "labels");
  acc_batch* batch = NULL;
  EXPECT_OK(acc_encoding_to_batch(enc, &batch));
  acc_tensor* t = NULL;
  EXPECT_OK(acc_batch_get(batch, "input_ids", &t));
  int64_t shape[4] = {0};
  int32_t ndim = 0;
  EXPECT_OK(acc_tensor_ndim(t, &ndim));
  EXPECT_OK(acc_tensor_shape(t, shape, 4));
  EXPECT(ndim == 2 && shape[0] == 2 && shape[1] == n1);
  acc_tensor_destroy(t);
  acc_batch_destroy(batch);
  acc_encoding_destroy(enc);

  /* Ragged rows are not a batch; bad options name the key; invalid UTF-8 names the byte. */
  EXPECT_OK(acc_tokenizer_encode(tok, texts, lengths, NULL, NULL, 2, NULL, &enc));
  EXPECT_ERR(acc_encoding_to_batch(enc, &batch), ACC_ERR_INVALID_ARGUMENT, "padding");
  /* Decode round trip. */
  const int64_t* ids = NULL;
  int64_t n = 0;
  EXPECT_OK(acc_encoding_get(enc, 0, "input_ids", &ids, &n));
  char* back = NULL;
  size_t back_len = 0;
  EXPECT_OK(acc_tokenizer_decode(tok, ids, n, "{\"skip_special_tokens\": true}", &back, &back_len));
  EXPECT(back && strcmp(back, "Hello world!") == 0 && back_len == 12);
  acc_text_free(back);
  acc_encoding_destroy(enc);
  EXPECT_ERR(acc_tokenizer_encode(tok, texts, lengths, NULL, NULL, 2, "{\"paddin\": true}", &enc),
             ACC_ERR_INVALID_CONFIG, "paddin");
  const char* bad[] = {"ok \xff\xfe"};
  size_t bad_len[] = {5};
  EXPECT_ERR(acc_tokenizer_encode(tok, bad, bad_len, NULL, NULL, 1, NULL, &enc), ACC_ERR_INVALID_ARGUMENT, "offset 3");
  const int64_t negative[] = {-1};
  EXPECT_ERR(acc_tokenizer_decode(tok, negative, 1, NULL, &back, NULL), ACC_ERR_INVALID_ARGUMENT, "-1");

  /* Vocabulary look-ups. */
  int64_t id = 0;
  EXPECT_OK(acc_tokenizer_token_to_id(tok, "<|im_end|>", &id));
  EXPECT(id >= 0);
  char* token = NULL;
  EXPECT_OK(acc_tokenizer_id_to_token(tok, id, &token));
  EXPECT(token && strcmp(token, "<|im_end|>") == 0);
  acc_text_free(token);
  EXPECT_OK(acc_tokenizer_token_to_id(tok, "definitely not a token", &id));
  EXPECT(id == -1);

  /* Chat template with the assistant mask of its {% generation %} blocks. */
  const char* chat = "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}]";
  char* rendered = NULL;
  EXPECT_OK(acc_tokenizer_apply_chat_template(tok, chat, "{\"now\": 0}", &rendered, &enc));
  EXPECT(rendered && strstr(rendered, "<|im_start|>assistant\nHello!") != NULL);
  const int64_t* am = NULL;
  int64_t an = 0;
  EXPECT_OK(acc_encoding_get(enc, 0, "assistant_masks", &am, &an));
  int64_t ones = 0;
  for (int64_t i = 0; i < an; ++i) ones += am[i];
  EXPECT(ones > 0 && ones < an);
  acc_text_free(rendered);
  acc_encoding_destroy(enc);
  EXPECT_ERR(acc_tokenizer_apply_chat_template(tok, chat, "{\"chat_template\": \"{{ raise_exception('no way') }}\"}",
                                               &rendered, NULL),
             ACC_ERR_INVALID_ARGUMENT, "no way");
  EXPECT_ERR(acc_tokenizer_apply_chat_template(tok, "{\"role\": 1}", NULL, &rendered, NULL), ACC_ERR_INVALID_ARGUMENT,
             "array");

  /* Train, save, load back: the same ids. */
  const char* corpus[] = {"the cat sat on the mat", "the dog sat on the log", "a cat and a dog"};
  size_t corpus_len[] = {strlen(corpus[0]), strlen(corpus[1]), strlen(corpus[2])};
  acc_tokenizer* trained = NULL;
  EXPECT_OK(acc_tokenizer_train_bpe(corpus, corpus_len, 3,
                                    "{\"vocab_size\": 300, \"special_tokens\": [\"<|end|>\", \"<|pad|>\"], "
                                    "\"eos_token\": \"<|end|>\", \"pad_token\": \"<|pad|>\"}",
                                    &trained));
  EXPECT_OK(acc_tokenizer_save_pretrained(trained, saved));
  acc_tokenizer* reloaded = NULL;
  EXPECT_OK(acc_tokenizer_from_pretrained(saved, &reloaded));
  acc_encoding *e1 = NULL, *e2 = NULL;
  EXPECT_OK(acc_tokenizer_encode(trained, corpus, corpus_len, NULL, NULL, 1, NULL, &e1));
  EXPECT_OK(acc_tokenizer_encode(reloaded, corpus, corpus_len, NULL, NULL, 1, NULL, &e2));
  const int64_t *a = NULL, *b = NULL;
  int64_t na = 0, nb = 0;
  EXPECT_OK(acc_encoding_get(e1, 0, "input_ids", &a, &na));
  EXPECT_OK(acc_encoding_get(e2, 0, "input_ids", &b, &nb));
  EXPECT(na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof(int64_t)) == 0);
  acc_encoding_destroy(e1);
  acc_encoding_destroy(e2);
  EXPECT_ERR(acc_tokenizer_train_bpe(corpus, corpus_len, 3, "{\"eos_token\": \"<|missing|>\"}", &trained),
             ACC_ERR_INVALID_ARGUMENT, "<|missing|>");

  /* Text generation from a tiny model: the streamed pieces make the returned text; a stop string ends it. */
  char config[512];
  int64_t vocab_len = 0;
  EXPECT_OK(acc_tokenizer_info(tok, &info));
  const char* len_at = info ? strstr(info, "\"len\":") : NULL;
  if (len_at) vocab_len = atoll(len_at + 6);
  acc_text_free(info);
  snprintf(config, sizeof config,
           "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": %lld, \"hidden_size\": 16, "
           "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
           "\"num_key_value_heads\": 1}",
           (long long)vocab_len);
  acc_model* model = NULL;
  EXPECT_OK(acc_model_from_config(config, NULL, &model));
  Pieces p = {{0}, 0, 0};
  char* out = NULL;
  EXPECT_OK(acc_generate_text(model, tok, "Hello", "{\"max_new_tokens\": 12, \"eos_token_id\": []}", on_piece, &p,
                              &out));
  EXPECT(out && strcmp(out, p.text) == 0 && p.calls >= 1);
  size_t full_len = out ? strlen(out) : 0;
  acc_text_free(out);
  char letter = 0; /* a letter of the generated text: stopping there keeps a prefix that ends with it */
  for (size_t i = 1; i < full_len && !letter; ++i)
    if ((p.text[i] >= 'a' && p.text[i] <= 'z') || (p.text[i] >= 'A' && p.text[i] <= 'Z')) letter = p.text[i];
  if (letter) {
    char stop[128];
    snprintf(stop, sizeof stop, "{\"max_new_tokens\": 12, \"eos_token_id\": [], \"stop_strings\": [\"%c\"]}", letter);
    EXPECT_OK(acc_generate_text(model, tok, "Hello", stop, NULL, NULL, &out));
    EXPECT(out && strlen(out) <= full_len && strchr(out, letter) != NULL && strncmp(out, p.text, strlen(out)) == 0);
    acc_text_free(out);
  }
  EXPECT_ERR(acc_generate_text(model, tok, "Hello", "{\"stop_strings\": 3}", NULL, NULL, &out), ACC_ERR_INVALID_CONFIG,
             "stop_strings");
  acc_model_destroy(model);

  /* A checkpoint carries its tokenizer: save_pretrained of a model from_pretrained found one beside copies it. */
  char ckpt_a[1024], ckpt_b[1024];
  snprintf(ckpt_a, sizeof ckpt_a, "%s/text-ckpt-a", argv[2]);
  snprintf(ckpt_b, sizeof ckpt_b, "%s/text-ckpt-b", argv[2]);
  EXPECT_OK(acc_model_from_config(config, NULL, &model));
  EXPECT_OK(acc_model_save_pretrained(model, ckpt_a, NULL));
  acc_model_destroy(model);
  EXPECT_OK(acc_tokenizer_save_pretrained(tok, ckpt_a));
  EXPECT_OK(acc_model_from_pretrained(ckpt_a, NULL, &model));
  EXPECT_OK(acc_model_save_pretrained(model, ckpt_b, NULL));
  acc_model_destroy(model);
  acc_tokenizer* carried = NULL;
  EXPECT_OK(acc_tokenizer_from_pretrained(ckpt_b, &carried));
  EXPECT_OK(acc_tokenizer_encode(carried, corpus, corpus_len, NULL, NULL, 1, NULL, &e1));
  EXPECT_OK(acc_tokenizer_encode(tok, corpus, corpus_len, NULL, NULL, 1, NULL, &e2));
  EXPECT_OK(acc_encoding_get(e1, 0, "input_ids", &a, &na));
  EXPECT_OK(acc_encoding_get(e2, 0, "input_ids", &b, &nb));
  EXPECT(na == nb && na > 0 && memcmp(a, b, (size_t)na * sizeof(int64_t)) == 0);
  acc_encoding_destroy(e1);
  acc_encoding_destroy(e2);
  acc_tokenizer_destroy(carried);

  acc_tokenizer_destroy(trained);
  acc_tokenizer_destroy(reloaded);
  acc_tokenizer_destroy(tok);
  acc_tokenizer_destroy(tok); /* destroyed already: refused, not freed twice */
  return finish();
}
