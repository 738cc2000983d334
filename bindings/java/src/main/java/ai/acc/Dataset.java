package ai.acc;

import ai.acc.internal.AccRaw;

/**
 * A source of samples: rows of tensors (named or not), a token file, data files prepared with a
 * tokenizer ({@link #fromFiles}), or a Java function.
 */
public final class Dataset extends NativeObject {
  final SourceAdapter source; // the Java side of fromFunction and fromBatchFunction; null otherwise

  private Dataset(long ptr) {
    this(ptr, null);
  }

  private Dataset(long ptr, SourceAdapter source) {
    super(ptr, AccRaw::acc_dataset_destroy);
    this.source = source;
  }

  /** One sample: the input and, optionally, the target (null). */
  public record Sample(Tensor input, Tensor target) {}

  /** Produces sample {@code index} of a {@link #fromFunction} dataset. */
  @FunctionalInterface
  public interface SampleFunction {
    /**
     * The sample; the dataset takes ownership of its tensors (they are closed for the caller).
     *
     * @param index the sample's index, from 0 to the dataset's length - 1
     * @return the sample, with an input
     * @throws Exception any failure: it fails the loader's call with {@link ErrorCode#CALLBACK}, with the
     *     exception as the cause
     */
    Sample get(long index) throws Exception;
  }

  /**
   * A dataset of {@code length} samples produced by {@code fn}, which libacc calls on the thread that
   * calls {@link DataLoader#next()}. An exception thrown by {@code fn} fails that call with {@link
   * ErrorCode#CALLBACK}, with the exception as the cause.
   *
   * @param length the number of samples
   * @param fn produces the samples
   * @return the dataset; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} when {@code fn} is null or {@code length} negative
   */
  public static Dataset fromFunction(long length, SampleFunction fn) {
    NativeLoader.load();
    if (fn == null) throw new AccException(ErrorCode.INVALID_ARGUMENT, "fn is null");
    SourceAdapter adapter = new SourceAdapter(fn);
    long[] out = new long[1];
    AccRaw.accx_dataset_from_java(length, adapter, out);
    return new Dataset(out[0], adapter);
  }

  /** Produces sample {@code index} of a {@link #fromBatchFunction} dataset as a named batch. */
  @FunctionalInterface
  public interface BatchFunction {
    /**
     * The sample ({@code {"input_ids": ..., "labels": ...}}); every sample names the same tensors in
     * the same order. The dataset takes ownership of the batch (it is closed for the caller).
     *
     * @param index the sample's index, from 0 to the dataset's length - 1
     * @return the sample
     * @throws Exception any failure: it fails the loader's call with {@link ErrorCode#CALLBACK}, with the
     *     exception as the cause
     */
    Batch get(long index) throws Exception;
  }

  /**
   * A dataset of {@code length} named samples produced by {@code fn}, which libacc calls on the thread
   * that calls {@link DataLoader#nextBatch()} (or {@link DataLoader#next()}). An exception thrown by
   * {@code fn} fails that call with {@link ErrorCode#CALLBACK}, with the exception as the cause.
   *
   * @param length the number of samples
   * @param fn produces the samples
   * @return the dataset; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} when {@code fn} is null or {@code length} negative
   */
  public static Dataset fromBatchFunction(long length, BatchFunction fn) {
    NativeLoader.load();
    if (fn == null) throw new AccException(ErrorCode.INVALID_ARGUMENT, "fn is null");
    SourceAdapter adapter = new SourceAdapter(fn);
    long[] out = new long[1];
    AccRaw.accx_dataset_from_java_batch(length, adapter, out);
    return new Dataset(out[0], adapter);
  }

  /**
   * A dataset of named columns (torch's TensorDataset, named): sample {@code i} is {@code {name:
   * columns[name][i]}}. The tensors must agree in their number of rows; they are copied, so {@code
   * columns} may be closed at once.
   *
   * @param columns the columns by name, tensors with the same number of rows
   * @return the dataset; close it
   */
  public static Dataset fromBatch(Batch columns) {
    NativeLoader.load();
    long c = enter(columns);
    try {
      long[] out = new long[1];
      AccRaw.acc_dataset_from_batch(c, out);
      return new Dataset(out[0]);
    } finally {
      leave(columns, c);
    }
  }

  /** What the C trampolines call: never throws; records the function's failure for the caller. */
  static final class SourceAdapter {
    private final SampleFunction fn;
    private final BatchFunction batchFn;
    private Throwable error;

    SourceAdapter(SampleFunction fn) {
      this.fn = fn;
      this.batchFn = null;
    }

    SourceAdapter(BatchFunction batchFn) {
      this.fn = null;
      this.batchFn = batchFn;
    }

    /** Called from C: the handle of a batch with ownership passed on, or 0 on failure. */
    synchronized long sampleBatch(long index) {
      try {
        Batch b = batchFn.get(index);
        if (b == null || b.isClosed()) {
          throw new IllegalStateException("the batch function returned no batch for index " + index);
        }
        return b.transferOwnership();
      } catch (Throwable t) {
        error = t;
        return 0;
      }
    }

    /** Called from C: {input, target-or-0} with ownership passed on, or null on failure. */
    synchronized long[] sample(long index) {
      try {
        Sample s = fn.get(index);
        if (s == null || s.input() == null || s.input().isClosed()) {
          throw new IllegalStateException("the sample function returned no input for index " + index);
        }
        long y = s.target() == null ? 0 : s.target().transferOwnership();
        return new long[] {s.input().transferOwnership(), y};
      } catch (Throwable t) {
        error = t;
        return null;
      }
    }

    synchronized Throwable takeError() {
      Throwable t = error;
      error = null;
      return t;
    }
  }

  /**
   * Samples are the rows (dim 0) of {@code inputs} and, when not null, of {@code targets} (copied).
   *
   * @param inputs the inputs, a sample per row
   * @param targets the targets, a sample per row; null for none
   * @return the dataset; close it
   */
  public static Dataset fromTensors(Tensor inputs, Tensor targets) {
    NativeLoader.load();
    long x = enter(inputs), y = enter(targets);
    try {
      long[] out = new long[1];
      AccRaw.acc_dataset_from_tensors(x, y, out);
      return new Dataset(out[0]);
    } finally {
      leave(targets, y);
      leave(inputs, x);
    }
  }

  /**
   * A memory-mapped token file: {@code {"block_size": T, "dtype": "uint16"|"int32"}}.
   *
   * @param path the token file
   * @param optionsJson the options, a JSON object with {@code "block_size"}
   * @return the dataset; close it
   * @throws AccException {@link ErrorCode#IO} when the file cannot be read; {@link ErrorCode#INVALID_CONFIG}
   *     for bad options
   */
  public static Dataset fromTokenFile(String path, String optionsJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_dataset_from_token_file(path, optionsJson, out);
    return new Dataset(out[0]);
  }

  /**
   * Rows of data files (JSON lines, CSV, Parquet, Arrow; a file or a folder) prepared with {@code tok}
   * as datasets and TRL prepare them; its batches are the collator's padded batches of named int64
   * tensors ({@code input_ids}, {@code attention_mask}, {@code labels}, ...). The dataset does not keep
   * {@code tok}.
   *
   * <pre>{@code
   * try (Tokenizer tok = Tokenizer.fromPretrained("tests/text/tiny/bytebpe");
   *     Dataset ds = Dataset.fromFiles("tests/data/prep/text.jsonl", tok, "{\"mode\": \"tokenize\"}");
   *     Batch b = ds.getBatch(0, 1)) {
   *   System.out.println(b.names());
   * }
   * }</pre>
   *
   * @param path a file or a folder; null when the options name {@code "files"}
   * @param tok the tokenizer
   * @param optionsJson acc_dataset_from_files' options (acc.h, docs/data.md), e.g. {@code {"mode":
   *     "tokenize", "collator": "with_padding"}}; null for the defaults (TRL's SFT preparation)
   * @return the dataset; close it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} naming a bad option; {@link
   *     ErrorCode#INVALID_ARGUMENT} for a column the files lack, listing theirs; {@link ErrorCode#IO}
   *     naming a file that cannot be read
   */
  public static Dataset fromFiles(String path, Tokenizer tok, String optionsJson) {
    NativeLoader.load();
    long t = enter(tok);
    try {
      long[] out = new long[1];
      // UTF-8, as the text calls: an option may hold a chat template's text.
      AccRaw.accx_dataset_from_files(Tokenizer.utf8(path), t, Tokenizer.utf8(optionsJson), out);
      return new Dataset(out[0]);
    } finally {
      leave(tok, t);
    }
  }

  /**
   * {@link #fromFiles} with the accelerator's {@code data.*} settings (docs/configuration.md: from the
   * environment or the accelerator's config, recorded in the run record), so that a run's data is its
   * configuration.
   *
   * @param acc the accelerator whose settings to use
   * @param tok the tokenizer
   * @return the dataset; close it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} naming a bad setting with its value and source
   */
  public static Dataset fromConfig(Accelerator acc, Tokenizer tok) {
    NativeLoader.load();
    long a = enter(acc), t = enter(tok);
    try {
      long[] out = new long[1];
      AccRaw.acc_dataset_from_config(a, t, out);
      return new Dataset(out[0]);
    } finally {
      leave(tok, t);
      leave(acc, a);
    }
  }

  /**
   * The batch a loader makes of the samples at {@code indices}, in that order (for a files dataset, the
   * collator's padded batch of those rows): a look at the data without a loader. For a {@link
   * #fromBatchFunction} dataset, the function's exception is the cause of the {@link ErrorCode#CALLBACK}
   * failure.
   *
   * @param indices the samples, at least one
   * @return the batch; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for no index or one outside the dataset (naming
   *     it); {@link ErrorCode#UNSUPPORTED} for an iterable dataset
   */
  public Batch getBatch(long... indices) {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.acc_dataset_get_batch(p, indices, out);
      return new Batch(out[0]);
    } catch (AccException e) {
      Throwable cause = source == null ? null : source.takeError();
      if (cause != null && e.code() == ErrorCode.CALLBACK && e.getCause() == null) e.initCause(cause);
      throw e;
    } finally {
      leave(p);
    }
  }

  /**
   * The number of samples.
   *
   * @return the number of samples
   */
  public long length() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_dataset_length(p, n);
      return n[0];
    } finally {
      leave(p);
    }
  }
}
