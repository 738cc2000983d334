package ai.acc;

import ai.acc.internal.AccRaw;

/** A source of samples: rows of tensors (named or not), a token file, or a Java function. */
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
