package ai.acc;

import ai.acc.internal.AccRaw;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A zero-copy view of a tensor's memory (an exported DLPack tensor). {@link #buffer()} is a direct
 * ByteBuffer over the tensor's bytes, in native order, valid until {@link #close()}.
 */
public final class TensorView extends NativeObject {
  private final ByteBuffer buffer;

  TensorView(long dlpack) {
    super(dlpack, AccRaw::accx_dlpack_release);
    ByteBuffer b;
    try {
      long[] address = new long[1];
      long[] nbytes = new long[1];
      AccRaw.accx_dlpack_bytes(dlpack, address, nbytes);
      b = nbytes[0] == 0 ? ByteBuffer.allocateDirect(0) : AccRaw.accx_direct_buffer(address[0], nbytes[0]);
    } catch (RuntimeException e) {
      close();
      throw e;
    }
    this.buffer = b.order(ByteOrder.nativeOrder());
  }

  /**
   * The tensor's bytes, without a copy. Do not use it after {@link #close()}.
   *
   * @return a direct ByteBuffer over the tensor's bytes, in native byte order
   */
  public ByteBuffer buffer() {
    return buffer;
  }
}
