package ai.acc;

import ai.acc.internal.AccRaw;

/**
 * The rows of {@link Tokenizer#encode} (transformers' BatchEncoding): one per text, more with
 * overflowing windows. Each row has the fields {@code "input_ids"}, {@code "attention_mask"}, {@code
 * "token_type_ids"}, {@code "special_tokens_mask"}, {@code "offsets"} (2 per token: [start, end) byte
 * offsets into the UTF-8 text of the token's sequence), {@code "sequence_ids"}, and {@code
 * "assistant_masks"} from a chat template.
 */
public final class Encoding extends NativeObject {
  Encoding(long ptr) {
    super(ptr, AccRaw::acc_encoding_destroy);
  }

  /**
   * The number of rows.
   *
   * @return the rows
   */
  public int rows() {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.acc_encoding_count(p, out);
      return (int) out[0];
    } finally {
      leave(p);
    }
  }

  /**
   * A copy of one row's field.
   *
   * @param row the row
   * @param field the field
   * @return its values
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for an unknown row or field, naming it
   */
  public long[] get(int row, String field) {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.accx_encoding_read(p, row, field, null, n);
      long[] values = new long[(int) n[0]];
      AccRaw.accx_encoding_read(p, row, field, values, n);
      return values;
    } finally {
      leave(p);
    }
  }

  /**
   * A row's {@code "input_ids"}.
   *
   * @param row the row
   * @return the ids
   */
  public long[] inputIds(int row) {
    return get(row, "input_ids");
  }

  /**
   * A row's {@code "attention_mask"}.
   *
   * @param row the row
   * @return the mask
   */
  public long[] attentionMask(int row) {
    return get(row, "attention_mask");
  }

  /**
   * A row's {@code "assistant_masks"} (an encoding of {@link Tokenizer#applyChatTemplateEncoded} only).
   *
   * @param row the row
   * @return the mask
   */
  public long[] assistantMasks(int row) {
    return get(row, "assistant_masks");
  }

  /**
   * The index of the text a row encodes (transformers' overflow_to_sample_mapping).
   *
   * @param row the row
   * @return the index of its text
   */
  public int sample(int row) {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.acc_encoding_sample(p, row, out);
      return (int) out[0];
    } finally {
      leave(p);
    }
  }

  /**
   * The rows as a batch of int64 tensors [rows, length]: {@code "input_ids"}, {@code
   * "attention_mask"}, {@code "token_type_ids"} (and {@code "assistant_masks"}).
   *
   * @return the batch; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for rows of different lengths (no padding)
   */
  public Batch toBatch() {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.acc_encoding_to_batch(p, out);
      return new Batch(out[0]);
    } finally {
      leave(p);
    }
  }
}
