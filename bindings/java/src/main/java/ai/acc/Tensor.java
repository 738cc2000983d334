package ai.acc;

import ai.acc.internal.AccRaw;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A tensor owned by libacc (CPU or device memory).
 *
 * <p>Host data crosses in two ways. Java arrays ({@code byte[]}, {@code float[]}, ...) are always
 * <b>copied</b>, in and out. A <b>direct</b> {@link ByteBuffer} in native byte order is wrapped
 * <b>without a copy</b> ({@link #wrap}): the tensor keeps the buffer alive and sees later writes to
 * it. {@link #view()} exports a tensor's memory without a copy as a direct ByteBuffer.
 */
public final class Tensor extends NativeObject {
  private final ByteBuffer wrapped; // keeps a wrapped direct buffer strongly reachable

  Tensor(long ptr) {
    this(ptr, null);
  }

  private Tensor(long ptr, ByteBuffer wrapped) {
    super(ptr, AccRaw::acc_tensor_destroy);
    this.wrapped = wrapped;
  }

  static Tensor orNull(long ptr) {
    return ptr == 0 ? null : new Tensor(ptr);
  }

  /**
   * Copies {@code data} (row-major, native byte order) into a new CPU tensor; no shape: a scalar.
   *
   * @param data the bytes: the shape's element count times {@code dtype}'s size
   * @param dtype the element type
   * @param shape the dimensions; none for a scalar
   * @return the tensor; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} when the length of {@code data} does not match
   */
  public static Tensor fromBytes(byte[] data, DType dtype, long... shape) {
    NativeLoader.load();
    long[] out = new long[1];
    AccRaw.acc_tensor_from_host(data, dtype.value(), shape, out);
    return new Tensor(out[0]);
  }

  private static long[] vectorIfEmpty(long[] shape, int n) {
    return shape.length == 0 ? new long[] {n} : shape;
  }

  private static ByteBuffer heap(int bytes) {
    return ByteBuffer.allocate(bytes).order(ByteOrder.nativeOrder());
  }

  /**
   * Copies floats into a float32 tensor (default shape: a vector).
   *
   * @param values the elements, row-major
   * @param shape the dimensions; none for a vector of all the values
   * @return the tensor; close it
   */
  public static Tensor fromFloats(float[] values, long... shape) {
    ByteBuffer b = heap(values.length * 4);
    b.asFloatBuffer().put(values);
    return fromBytes(b.array(), DType.FLOAT32, vectorIfEmpty(shape, values.length));
  }

  /**
   * Copies doubles into a float64 tensor (default shape: a vector).
   *
   * @param values the elements, row-major
   * @param shape the dimensions; none for a vector of all the values
   * @return the tensor; close it
   */
  public static Tensor fromDoubles(double[] values, long... shape) {
    ByteBuffer b = heap(values.length * 8);
    b.asDoubleBuffer().put(values);
    return fromBytes(b.array(), DType.FLOAT64, vectorIfEmpty(shape, values.length));
  }

  /**
   * Copies longs into an int64 tensor (default shape: a vector).
   *
   * @param values the elements, row-major
   * @param shape the dimensions; none for a vector of all the values
   * @return the tensor; close it
   */
  public static Tensor fromLongs(long[] values, long... shape) {
    ByteBuffer b = heap(values.length * 8);
    b.asLongBuffer().put(values);
    return fromBytes(b.array(), DType.INT64, vectorIfEmpty(shape, values.length));
  }

  /**
   * Copies ints into an int32 tensor (default shape: a vector).
   *
   * @param values the elements, row-major
   * @param shape the dimensions; none for a vector of all the values
   * @return the tensor; close it
   */
  public static Tensor fromInts(int[] values, long... shape) {
    ByteBuffer b = heap(values.length * 4);
    b.asIntBuffer().put(values);
    return fromBytes(b.array(), DType.INT32, vectorIfEmpty(shape, values.length));
  }

  /**
   * Wraps a direct ByteBuffer without copying (zero-copy through DLPack). The tensor uses the
   * buffer's whole capacity from its base address, in native byte order, and keeps the buffer alive
   * until libacc releases the memory. Heap buffers are refused: copy them with {@link #fromBytes}.
   *
   * @param direct the direct buffer
   * @param dtype the element type
   * @param shape the dimensions; none for a scalar
   * @return the tensor; close it
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a null or heap buffer, or a capacity that does
   *     not match the shape
   */
  public static Tensor wrap(ByteBuffer direct, DType dtype, long... shape) {
    NativeLoader.load();
    if (direct == null || !direct.isDirect()) {
      throw new AccException(ErrorCode.INVALID_ARGUMENT, "wrap needs a direct ByteBuffer (use fromBytes to copy)");
    }
    long[] out = new long[1];
    AccRaw.accx_tensor_from_direct_buffer(direct, dtype.value(), shape, out);
    return new Tensor(out[0], direct);
  }

  /**
   * The dimensions.
   *
   * @return the dimensions; empty for a scalar
   */
  public long[] shape() {
    long p = enter();
    try {
      int[] nd = new int[1];
      AccRaw.acc_tensor_ndim(p, nd);
      long[] shape = new long[nd[0]];
      if (nd[0] > 0) AccRaw.acc_tensor_shape(p, shape);
      return shape;
    } finally {
      leave(p);
    }
  }

  /**
   * The element type.
   *
   * @return the element type
   */
  public DType dtype() {
    long p = enter();
    try {
      int[] d = new int[1];
      AccRaw.acc_tensor_dtype(p, d);
      return DType.of(d[0]);
    } finally {
      leave(p);
    }
  }

  /**
   * The number of elements.
   *
   * @return the number of elements
   */
  public long numel() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_tensor_numel(p, n);
      return n[0];
    } finally {
      leave(p);
    }
  }

  /**
   * The size of the data in bytes.
   *
   * @return the size in bytes
   */
  public long nbytes() {
    long p = enter();
    try {
      long[] n = new long[1];
      AccRaw.acc_tensor_nbytes(p, n);
      return n[0];
    } finally {
      leave(p);
    }
  }

  /**
   * The value of a one-element tensor, as a double.
   *
   * @return the value
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a tensor without exactly one element
   */
  public double item() {
    long p = enter();
    try {
      double[] v = new double[1];
      AccRaw.acc_tensor_item(p, v);
      return v[0];
    } finally {
      leave(p);
    }
  }

  /**
   * Copies the data into {@code dst}, which must be exactly {@link #nbytes()} long.
   *
   * @param dst the destination
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} when its length differs
   */
  public void copyTo(byte[] dst) {
    long p = enter();
    try {
      AccRaw.acc_tensor_to_host(p, dst);
    } finally {
      leave(p);
    }
  }

  /**
   * A copy of the data (row-major, native byte order).
   *
   * @return the bytes
   */
  public byte[] toBytes() {
    byte[] b = new byte[Math.toIntExact(nbytes())];
    copyTo(b);
    return b;
  }

  private ByteBuffer copyAs(DType want) {
    DType d = dtype();
    if (d != want) throw new AccException(ErrorCode.INVALID_ARGUMENT, "tensor is " + d + ", not " + want);
    return ByteBuffer.wrap(toBytes()).order(ByteOrder.nativeOrder());
  }

  /**
   * A copy of a float32 tensor's elements.
   *
   * @return the elements, row-major
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a tensor of another dtype
   */
  public float[] toFloats() {
    ByteBuffer b = copyAs(DType.FLOAT32);
    float[] v = new float[b.remaining() / 4];
    b.asFloatBuffer().get(v);
    return v;
  }

  /**
   * A copy of a float64 tensor's elements.
   *
   * @return the elements, row-major
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a tensor of another dtype
   */
  public double[] toDoubles() {
    ByteBuffer b = copyAs(DType.FLOAT64);
    double[] v = new double[b.remaining() / 8];
    b.asDoubleBuffer().get(v);
    return v;
  }

  /**
   * A copy of an int64 tensor's elements.
   *
   * @return the elements, row-major
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a tensor of another dtype
   */
  public long[] toLongs() {
    ByteBuffer b = copyAs(DType.INT64);
    long[] v = new long[b.remaining() / 8];
    b.asLongBuffer().get(v);
    return v;
  }

  /**
   * A copy of an int32 tensor's elements.
   *
   * @return the elements, row-major
   * @throws AccException {@link ErrorCode#INVALID_ARGUMENT} for a tensor of another dtype
   */
  public int[] toInts() {
    ByteBuffer b = copyAs(DType.INT32);
    int[] v = new int[b.remaining() / 4];
    b.asIntBuffer().get(v);
    return v;
  }

  /**
   * Exports the tensor's memory without copying (DLPack). The tensor must be in CPU memory and
   * contiguous. The view's buffer stays valid until the view is closed, also after this tensor is
   * closed; using the buffer after {@link TensorView#close()} is a use-after-free.
   *
   * @return the view; close it
   */
  public TensorView view() {
    long p = enter();
    try {
      long[] m = new long[1];
      AccRaw.acc_tensor_to_dlpack(p, m);
      return new TensorView(m[0]);
    } finally {
      leave(p);
    }
  }
}
