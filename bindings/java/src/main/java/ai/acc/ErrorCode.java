package ai.acc;

/** The status codes of libacc's C ABI (acc.h). Codes are stable and never reused. */
public enum ErrorCode {
  /** Success (never carried by an exception). */
  OK(0),
  /** A NULL (closed) handle, a bad value, a bad shape. */
  INVALID_ARGUMENT(1),
  /** Config or options JSON: unknown key, wrong type, bad value. */
  INVALID_CONFIG(2),
  /** Call order: prepared twice, stepped before prepare, ... */
  INVALID_STATE(3),
  /** Valid, but not available in this build or on this machine. */
  UNSUPPORTED(4),
  /** A file could not be read or written. */
  IO(5),
  /** Out of host or device memory. */
  OUT_OF_MEMORY(6),
  /** Rendezvous, a collective, a peer that went away. */
  DISTRIBUTED(7),
  /** An error raised inside LibTorch. */
  TORCH(8),
  /** The loaded libacc does not serve this binding's ABI. */
  ABI_MISMATCH(9),
  /** The handle is in use by another thread. */
  BUSY(10),
  /** A callback failed. */
  CALLBACK(11),
  /** A bug in libacc; also every code this version does not know. */
  INTERNAL(12);

  private final int value;

  ErrorCode(int value) {
    this.value = value;
  }

  /**
   * The numeric status code.
   *
   * @return the acc_status number
   */
  public int value() {
    return value;
  }

  /**
   * The code for a status number; unknown numbers map to {@link #INTERNAL}.
   *
   * @param status a status number (acc_status)
   * @return its code; {@link #INTERNAL} for a number this version does not know
   */
  public static ErrorCode of(int status) {
    for (ErrorCode c : values()) {
      if (c.value == status) return c;
    }
    return INTERNAL;
  }
}
