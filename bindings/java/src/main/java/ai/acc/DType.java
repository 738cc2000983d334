package ai.acc;

/** Tensor element types. */
public enum DType {
  /** 32-bit float (ACC_FLOAT32). */
  FLOAT32(0, 4),
  /** 64-bit float (ACC_FLOAT64). */
  FLOAT64(1, 8),
  /** bfloat16 (ACC_BFLOAT16). */
  BFLOAT16(2, 2),
  /** IEEE half (ACC_FLOAT16). */
  FLOAT16(3, 2),
  /** 32-bit signed integer (ACC_INT32). */
  INT32(4, 4),
  /** 64-bit signed integer (ACC_INT64). */
  INT64(5, 8),
  /** 8-bit unsigned integer (ACC_UINT8). */
  UINT8(6, 1),
  /** Boolean, one byte (ACC_BOOL). */
  BOOL(7, 1);

  private final int value;
  private final int size;

  DType(int value, int size) {
    this.value = value;
    this.size = size;
  }

  /**
   * The acc.h constant (ACC_FLOAT32, ...).
   *
   * @return the acc_dtype number
   */
  public int value() {
    return value;
  }

  /**
   * Bytes per element.
   *
   * @return the size of one element in bytes
   */
  public int size() {
    return size;
  }

  static DType of(int value) {
    for (DType d : values()) {
      if (d.value == value) return d;
    }
    throw new AccException(ErrorCode.INTERNAL, "unknown dtype " + value);
  }
}
