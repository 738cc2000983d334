package ai.acc;

/** Tensor element types. */
public enum DType {
  FLOAT32(0, 4),
  FLOAT64(1, 8),
  BFLOAT16(2, 2),
  FLOAT16(3, 2),
  INT32(4, 4),
  INT64(5, 8),
  UINT8(6, 1),
  BOOL(7, 1);

  private final int value;
  private final int size;

  DType(int value, int size) {
    this.value = value;
    this.size = size;
  }

  /** The acc.h constant (ACC_FLOAT32, ...). */
  public int value() {
    return value;
  }

  /** Bytes per element. */
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
