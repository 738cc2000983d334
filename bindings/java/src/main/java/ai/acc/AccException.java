package ai.acc;

/**
 * A failed libacc call. The JNI wrapper throws it on the calling thread right after the C call
 * failed, with the status code and the message libacc recorded for that call.
 */
public class AccException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  /** The acc_status the call returned. */
  private final int status;
  /** The status as an {@link ErrorCode}. */
  private final ErrorCode code;

  /**
   * Called from the JNI wrapper (and by this binding for its own checks).
   *
   * @param status the acc_status the call returned
   * @param message the message libacc recorded for the call
   */
  public AccException(int status, String message) {
    super(message);
    this.status = status;
    this.code = ErrorCode.of(status);
  }

  AccException(ErrorCode code, String message) {
    this(code.value(), message);
  }

  /**
   * The status code as an enum ({@link ErrorCode#INTERNAL} for codes this version does not know).
   *
   * @return the status code as an {@link ErrorCode}
   */
  public ErrorCode code() {
    return code;
  }

  /**
   * The raw status number, exactly as libacc returned it.
   *
   * @return the raw acc_status number
   */
  public int status() {
    return status;
  }

  @Override
  public String toString() {
    return "AccException[" + code + "]: " + getMessage();
  }
}
