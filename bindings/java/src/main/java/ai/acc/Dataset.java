package ai.acc;

import ai.acc.internal.AccRaw;

/** A source of samples: rows of tensors, a token file, or a Java function. */
public final class Dataset extends NativeObject {
  final SourceAdapter source; // the Java side of fromFunction; null otherwise

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
    /** The sample; the dataset takes ownership of its tensors (they are closed for the caller). */
    Sample get(long index) throws Exception;
  }

  /**
   * A dataset of {@code length} samples produced by {@code fn}, which libacc calls on the thread that
   * calls {@link DataLoader#next()}. An exception thrown by {@code fn} fails that call with {@link
   * ErrorCode#CALLBACK}, with the exception as the cause.
   */
  public static Dataset fromFunction(long length, SampleFunction fn) {
    NativeLoader.load();
    if (fn == null) throw new AccException(ErrorCode.INVALID_ARGUMENT, "fn is null");
    SourceAdapter adapter = new SourceAdapter(fn);
    long[] out = new long[1];
    AccRaw.accx_dataset_from_java(length, adapter, out);
    return new Dataset(out[0], adapter);
  }

  /** What the C trampoline calls: never throws; records the function's failure for the caller. */
  static final class SourceAdapter {
    private final SampleFunction fn;
    private Throwable error;

    SourceAdapter(SampleFunction fn) {
      this.fn = fn;
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

  /** Samples are the rows (dim 0) of {@code inputs} and, when not null, of {@code targets} (copied). */
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

  /** A memory-mapped token file: {@code {"block_size": T, "dtype": "uint16"|"int32"}}. */
  public static Dataset fromTokenFile(String path, String optionsJson) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_dataset_from_token_file(path, optionsJson, out);
    return new Dataset(out[0]);
  }

  /** The number of samples. */
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
