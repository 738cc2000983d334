package ai.acc;

/**
 * An object of the caller's that {@link Accelerator#saveState} saves and {@link Accelerator#loadState}
 * restores, as bytes ({@link Accelerator#registerForCheckpointing(Checkpointable)}; Accelerate's
 * register_for_checkpointing). Both methods run on the thread that calls saveState / loadState while
 * the accelerator is in use: calling the accelerator from inside them fails with {@link
 * ErrorCode#BUSY}. An exception fails that call with {@link ErrorCode#CALLBACK}, with the exception
 * as the cause. {@link Saver} and {@link Loader} are the same two methods as functions ({@link
 * Accelerator#registerForCheckpointing(Saver, Loader)}).
 */
public interface Checkpointable {
  /**
   * The object's bytes (not null); called on the main process only.
   *
   * @return the bytes to save; not null
   * @throws Exception any failure: it fails {@link Accelerator#saveState} with {@link ErrorCode#CALLBACK}, with
   *     the exception as the cause
   */
  byte[] save() throws Exception;

  /**
   * Restores the object from the bytes {@link #save} returned (a copy it may keep); on every process.
   *
   * @param data the bytes {@link #save} returned
   * @throws Exception any failure: it fails {@link Accelerator#loadState} (or {@link
   *     Accelerator#resumeFromCheckpoint}) with {@link ErrorCode#CALLBACK}, with the exception as the cause
   */
  void load(byte[] data) throws Exception;

  /** {@link Checkpointable#save} as a function. */
  @FunctionalInterface
  interface Saver {
    /**
     * The object's bytes (not null).
     *
     * @return the bytes to save; not null
     * @throws Exception any failure: it fails the save with {@link ErrorCode#CALLBACK}, with the exception as the
     *     cause
     */
    byte[] save() throws Exception;
  }

  /** {@link Checkpointable#load} as a function. */
  @FunctionalInterface
  interface Loader {
    /**
     * Restores the object from the bytes the saver returned.
     *
     * @param data the bytes the saver returned
     * @throws Exception any failure: it fails the load with {@link ErrorCode#CALLBACK}, with the exception as the
     *     cause
     */
    void load(byte[] data) throws Exception;
  }
}
