package ai.acc;

import ai.acc.internal.AccRaw;

/** Batches a dataset; once prepared it yields this process's shard of every batch. */
public final class DataLoader extends NativeObject {
  private final Dataset.SourceAdapter source;

  private DataLoader(long ptr, Dataset.SourceAdapter source) {
    super(ptr, AccRaw::acc_dataloader_destroy);
    this.source = source;
  }

  /**
   * A loader: {@code {"batch_size": 1, "shuffle": false, "seed": 0, "drop_last": false}}.
   *
   * @param ds the dataset
   * @param optionsJson the options, a JSON object; null for the defaults
   * @return the loader; close it
   * @throws AccException {@link ErrorCode#INVALID_CONFIG} for an unknown key or a bad value
   */
  public static DataLoader create(Dataset ds, String optionsJson) {
    NativeLoader.load();
    long d = enter(ds);
    try {
      long[] out = new long[1];
      AccRaw.acc_dataloader_create(d, optionsJson, out);
      return new DataLoader(out[0], ds.source);
    } finally {
      leave(ds, d);
    }
  }

  /**
   * One batch as (input, target) (target null when the dataset has none), what {@link #next()} yields.
   * Closes both. Named batches are {@link ai.acc.Batch}es ({@link #nextBatch()}).
   */
  public record Batch(Tensor input, Tensor target) implements AutoCloseable {
    @Override
    public void close() {
      if (input != null) input.close();
      if (target != null) target.close();
    }
  }

  /**
   * This process's next batch, or null at the end of an epoch; the call after that starts the next
   * epoch (reshuffled by the loader's generator). For a {@link Dataset#fromFunction} dataset, the function's
   * exception is the cause of the {@link ErrorCode#CALLBACK} failure.
   *
   * @return the batch, or null at the end of an epoch; close it
   * @throws AccException {@link ErrorCode#CALLBACK} when the dataset's function throws (the exception is the
   *     cause)
   */
  public Batch next() {
    long p = enter();
    try {
      long[] x = new long[1];
      long[] y = new long[1];
      int[] has = new int[1];
      AccRaw.acc_dataloader_next(p, x, y, has);
      return has[0] == 0 ? null : new Batch(Tensor.orNull(x[0]), Tensor.orNull(y[0]));
    } catch (AccException e) {
      throw withCause(e);
    } finally {
      leave(p);
    }
  }

  /**
   * This process's next batch with its tensors by name, or null at the end of an epoch; the call after
   * that starts the next epoch. Close the batch. For a {@link Dataset#fromBatchFunction} dataset, the
   * function's exception is the cause of the {@link ErrorCode#CALLBACK} failure.
   *
   * @return the batch, or null at the end of an epoch; close it
   * @throws AccException {@link ErrorCode#CALLBACK} when the dataset's function throws (the exception is the
   *     cause)
   */
  public ai.acc.Batch nextBatch() {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.acc_dataloader_next_batch(p, out);
      return ai.acc.Batch.orNull(out[0]);
    } catch (AccException e) {
      throw withCause(e);
    } finally {
      leave(p);
    }
  }

  /** Attaches a dataset function's own exception to the CALLBACK failure it caused. */
  private AccException withCause(AccException e) {
    Throwable cause = source == null ? null : source.takeError();
    if (cause != null && e.code() == ErrorCode.CALLBACK && e.getCause() == null) e.initCause(cause);
    return e;
  }

  /**
   * A loader over the same data that skips the first {@code n} batches of its next pass (Accelerate's
   * skip_first_batches, to resume mid-epoch). Close it like any loader.
   *
   * @param n the number of batches to skip
   * @return the new loader; close it
   */
  public DataLoader skipFirstBatches(long n) {
    long p = enter();
    try {
      long[] out = new long[1];
      AccRaw.acc_dataloader_skip_first_batches(p, n, out);
      return new DataLoader(out[0], source);
    } finally {
      leave(p);
    }
  }

  /**
   * The epoch the current pass runs, or the next one between passes.
   *
   * @return the epoch
   */
  public long epoch() {
    long p = enter();
    try {
      long[] v = new long[1];
      AccRaw.acc_dataloader_epoch(p, v);
      return v[0];
    } finally {
      leave(p);
    }
  }

  /**
   * Batches per epoch on this process.
   *
   * @return the number of batches per epoch on this process
   */
  public long length() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_dataloader_length(p, n);
      return n[0];
    } finally {
      leave(p);
    }
  }

  /**
   * Restarts at the beginning of {@code epoch}.
   *
   * @param epoch the epoch to start
   */
  public void setEpoch(long epoch) {
    long p = enter();
    try {
      AccRaw.acc_dataloader_set_epoch(p, epoch);
    } finally {
      leave(p);
    }
  }

  /**
   * Whether the last batch of the epoch is current.
   *
   * @return true when the current batch is the epoch's last
   */
  public boolean endOfEpoch() {
    long p = enter();
    try {
      int[] v = new int[1];
      AccRaw.acc_dataloader_end_of_epoch(p, v);
      return v[0] != 0;
    } finally {
      leave(p);
    }
  }
}
