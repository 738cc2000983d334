package ai.acc;

import ai.acc.internal.AccRaw;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * A tokenizer as transformers' {@code AutoTokenizer} loads it (the {@code tokenizers} crate inside
 * libacc): encode, decode, vocabulary look-ups and chat templates.
 *
 * <p>Thread-safe: many threads may encode, decode, look up and render chat templates with one tokenizer
 * at once (data-loader workers sharing it); {@link #close()} waits for those calls. {@link
 * #setSpecialToken} is the exception: call it while no other thread uses the tokenizer.
 *
 * <pre>{@code
 * try (Tokenizer tok = Tokenizer.fromPretrained("tests/text/tiny/bytebpe");
 *      Encoding enc = tok.encode(List.of("Hello world!", "A longer sentence."), "{\"padding\": true}");
 *      Batch batch = enc.toBatch()) {
 *   long[] ids = enc.inputIds(0);
 *   String text = tok.decode(ids, "{\"skip_special_tokens\": true}");
 * }
 * }</pre>
 *
 * <p>Text crosses as UTF-8 (not the JNI's modified UTF-8), so characters outside the BMP and NULs keep
 * their bytes.
 */
public final class Tokenizer extends NativeObject {
  Tokenizer(long ptr) {
    super(ptr, AccRaw::acc_tokenizer_destroy);
  }

  static byte[] utf8(String s) {
    return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
  }

  static String string(byte[] b) {
    return b == null ? null : new String(b, StandardCharsets.UTF_8);
  }

  /** Texts laid out one after another, with their lengths in bytes. */
  record Texts(byte[] data, long[] lengths) {
    static Texts of(List<String> texts) {
      ByteArrayOutputStream data = new ByteArrayOutputStream();
      long[] lengths = new long[texts.size()];
      for (int i = 0; i < lengths.length; ++i) {
        byte[] b = texts.get(i).getBytes(StandardCharsets.UTF_8);
        data.writeBytes(b);
        lengths[i] = b.length;
      }
      return new Texts(data.toByteArray(), lengths);
    }
  }

  /**
   * {@code AutoTokenizer.from_pretrained(dir)}: tokenizer.json with tokenizer_config.json,
   * special_tokens_map.json and the chat templates.
   *
   * @param dir the folder
   * @return the tokenizer; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a missing folder, one with
   *     tokenizer.model only (saying how to convert it) or a malformed file (naming it)
   */
  public static Tokenizer fromPretrained(String dir) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_tokenizer_from_pretrained(dir, out);
    return new Tokenizer(out[0]);
  }

  /**
   * A byte-level BPE tokenizer (GPT-2 / Llama-3's kind) trained on {@code texts} by tokenizers'
   * BpeTrainer.
   *
   * @param texts the training texts
   * @param optionsJson {@code {"vocab_size": 1000, "min_frequency": 2, "special_tokens": [..],
   *     "bos_token", "eos_token", "pad_token", "unk_token", "chat_template", "model_max_length"}}; null
   *     for the defaults
   * @return the tokenizer; close it
   */
  public static Tokenizer trainBpe(List<String> texts, String optionsJson) {
    NativeLoader.load();
    Texts t = Texts.of(texts);
    long[] out = new long[1];
    AccRaw.accx_tokenizer_train_bpe(t.data(), t.lengths(), utf8(optionsJson), out);
    return new Tokenizer(out[0]);
  }

  /**
   * Writes tokenizer.json, tokenizer_config.json and chat_template.jinja into {@code dir} (created if
   * missing), which {@link #fromPretrained} and transformers' AutoTokenizer load.
   *
   * @param dir the folder
   */
  public void savePretrained(String dir) {
    long p = enter();
    try {
      AccRaw.acc_tokenizer_save_pretrained(p, dir);
    } finally {
      leave(p);
    }
  }

  /**
   * What the tokenizer is, as JSON: {@code {"vocab_size", "len", "model_type", "special_tokens",
   * "special_token_ids", "all_special_tokens", "all_special_ids", "chat_templates",
   * "model_max_length", "padding_side", "truncation_side"}}.
   *
   * @return the JSON text
   */
  public String info() {
    long p = enter();
    try {
      byte[][] out = new byte[1][];
      AccRaw.accx_tokenizer_info(p, out);
      return string(out[0]);
    } finally {
      leave(p);
    }
  }

  /**
   * transformers' {@code tok.pad_token = "..."}: sets a named special token. Not while other threads
   * use the tokenizer.
   *
   * @param name {@code "bos_token"}, {@code "eos_token"}, {@code "unk_token"}, {@code "sep_token"},
   *     {@code "pad_token"}, {@code "cls_token"} or {@code "mask_token"}
   * @param token the token; null unsets it
   */
  public void setSpecialToken(String name, String token) {
    long p = enter();
    try {
      AccRaw.accx_tokenizer_set_special_token(p, utf8(name), utf8(token));
    } finally {
      leave(p);
    }
  }

  /**
   * The id of a token of the vocabulary (added tokens included).
   *
   * @param token the token
   * @return its id, -1 when it has none
   */
  public long tokenToId(String token) {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.accx_tokenizer_token_to_id(p, utf8(token), out);
      return out[0];
    } finally {
      leave(p);
    }
  }

  /**
   * The token of an id.
   *
   * @param id the id
   * @return the token, null for an id outside the vocabulary
   */
  public String idToToken(long id) {
    long p = enter();
    try {
      byte[][] out = new byte[1][];
      AccRaw.accx_tokenizer_id_to_token(p, id, out);
      return string(out[0]);
    } finally {
      leave(p);
    }
  }

  /**
   * transformers' {@code tok(texts, ...)}: one row per text (more with overflowing windows).
   *
   * @param texts the texts
   * @param optionsJson {@code {"add_special_tokens": true, "truncation", "max_length", "stride",
   *     "return_overflowing_tokens", "padding": false | true | "longest" | "max_length",
   *     "pad_to_multiple_of", "padding_side", "truncation_side", "threads": 1}}; null for the defaults
   * @return the rows; close them
   */
  public Encoding encode(List<String> texts, String optionsJson) {
    return encode(texts, null, optionsJson);
  }

  /**
   * {@link #encode(List, String)} of one text.
   *
   * @param text the text
   * @param optionsJson as {@link #encode(List, String)}'s
   * @return the rows; close them
   */
  public Encoding encode(String text, String optionsJson) {
    return encode(List.of(text), null, optionsJson);
  }

  /**
   * {@code tok(texts, text_pair=pairs, ...)}.
   *
   * @param texts the texts
   * @param pairs their pairs, as many; null for none
   * @param optionsJson as {@link #encode(List, String)}'s
   * @return the rows; close them
   */
  public Encoding encode(List<String> texts, List<String> pairs, String optionsJson) {
    Texts t = Texts.of(texts);
    Texts q = pairs == null ? null : Texts.of(pairs);
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.accx_tokenizer_encode(p, t.data(), t.lengths(), q == null ? null : q.data(),
          q == null ? null : q.lengths(), utf8(optionsJson), out);
      return new Encoding(out[0]);
    } finally {
      leave(p);
    }
  }

  /**
   * transformers' {@code decode}. Ids outside the vocabulary are skipped.
   *
   * @param ids the ids
   * @param optionsJson {@code {"skip_special_tokens": false, "clean_up_tokenization_spaces"}}; null for
   *     the defaults
   * @return the text
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a negative id
   */
  public String decode(long[] ids, String optionsJson) {
    long p = enter();
    try {
      byte[][] out = new byte[1][];
      AccRaw.accx_tokenizer_decode(p, ids, utf8(optionsJson), out);
      return string(out[0]);
    } finally {
      leave(p);
    }
  }

  /**
   * transformers' {@code apply_chat_template(messages, tokenize=False)}.
   *
   * @param messagesJson {@code [{"role", "content", ...}, ...]}
   * @param optionsJson {@code {"chat_template": a template or a name, "add_generation_prompt",
   *     "continue_final_message", "tools", "documents", "template_variables", "now"}}; null for the
   *     defaults
   * @return the rendered text
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a template that raises or fails (naming
   *     it and the line)
   */
  public String applyChatTemplate(String messagesJson, String optionsJson) {
    long p = enter();
    try {
      byte[][] out = new byte[1][];
      AccRaw.accx_tokenizer_apply_chat_template(p, utf8(messagesJson), utf8(optionsJson), out, null);
      return string(out[0]);
    } finally {
      leave(p);
    }
  }

  /** A rendered chat and its ids (one row, with {@code "assistant_masks"}). Closing it closes the rows. */
  public record Chat(String text, Encoding encoding) implements AutoCloseable {
    @Override
    public void close() {
      encoding.close();
    }
  }

  /**
   * {@link #applyChatTemplate} with the ids too (encoded without special tokens: the template writes
   * them; {@link #encode(List, String)}'s options apply): one row whose {@code "assistant_masks"} marks
   * the tokens of the template's {@code {% generation %}} blocks (transformers'
   * return_assistant_tokens_mask).
   *
   * @param messagesJson as {@link #applyChatTemplate}'s
   * @param optionsJson as {@link #applyChatTemplate}'s
   * @return the text and the rows; close it
   */
  public Chat applyChatTemplateEncoded(String messagesJson, String optionsJson) {
    long p = enter();
    try {
      byte[][] out = new byte[1][];
      long[] enc = new long[1];
      AccRaw.accx_tokenizer_apply_chat_template(p, utf8(messagesJson), utf8(optionsJson), out, enc);
      return new Chat(string(out[0]), new Encoding(enc[0]));
    } finally {
      leave(p);
    }
  }
}
