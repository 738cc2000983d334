package ai.acc;

import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongConsumer;

/**
 * The base of every handle: owns one libacc pointer. {@link #close()} is idempotent and waits for
 * calls still in flight on other threads (a usage count, as ONNX Runtime's NativeObject does); a
 * {@link Cleaner} releases handles that were never closed once they become unreachable.
 *
 * <p>A closed handle passes NULL to libacc, which fails the call with {@link
 * ErrorCode#INVALID_ARGUMENT} ("... is NULL").
 */
public abstract class NativeObject implements AutoCloseable {
  static final Cleaner CLEANER = Cleaner.create();
  private static final AtomicLong LEAKS = new AtomicLong();

  /** What the cleaner runs; it must not refer to the handle object itself. */
  private static final class Release implements Runnable {
    private final long ptr;
    private final LongConsumer destroy;
    final AtomicBoolean closedExplicitly = new AtomicBoolean();
    final AtomicBoolean transferred = new AtomicBoolean();

    Release(long ptr, LongConsumer destroy) {
      this.ptr = ptr;
      this.destroy = destroy;
    }

    @Override
    public void run() {
      if (!closedExplicitly.get()) LEAKS.incrementAndGet();
      if (!transferred.get()) destroy.accept(ptr);
    }
  }

  private final Object lock = new Object();
  private long ptr;
  private int inFlight;
  private boolean closed;
  private final Release release;
  private final Cleaner.Cleanable cleanable;

  NativeObject(long ptr, LongConsumer destroy) {
    if (ptr == 0) throw new AccException(ErrorCode.INTERNAL, "libacc returned a NULL handle");
    this.ptr = ptr;
    this.release = new Release(ptr, destroy);
    this.cleanable = CLEANER.register(this, release);
  }

  /**
   * The number of handles released by the cleaner because nobody closed them.
   *
   * @return the number of such handles so far, of every handle class
   */
  public static long leakedHandles() {
    return LEAKS.get();
  }

  /** Marks a call in flight and returns the pointer (0 once closed). Pair with {@link #leave}. */
  final long enter() {
    synchronized (lock) {
      if (closed) return 0;
      ++inFlight;
      return ptr;
    }
  }

  final void leave(long p) {
    if (p == 0) return;
    synchronized (lock) {
      if (--inFlight == 0) lock.notifyAll();
    }
  }

  /** The pointer of a possibly-null argument, entered; {@link #leave(NativeObject, long)} after. */
  static long enter(NativeObject o) {
    return o == null ? 0 : o.enter();
  }

  static void leave(NativeObject o, long p) {
    if (o != null) o.leave(p);
  }

  /**
   * True once {@link #close()} was called.
   *
   * @return whether this handle is closed
   */
  public final boolean isClosed() {
    synchronized (lock) {
      return closed;
    }
  }

  /** Releases the handle after calls in flight on other threads finish. Idempotent. */
  @Override
  public void close() {
    closeOrTransfer(false);
  }

  /**
   * Gives the pointer to libacc, which takes ownership (this object is closed without destroying it).
   * Returns 0 when already closed.
   */
  final long transferOwnership() {
    return closeOrTransfer(true);
  }

  private long closeOrTransfer(boolean transfer) {
    long p;
    synchronized (lock) {
      if (closed) return 0;
      closed = true;
      boolean interrupted = false;
      while (inFlight > 0) {
        try {
          lock.wait();
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
      p = ptr;
      ptr = 0;
      if (interrupted) Thread.currentThread().interrupt();
    }
    release.closedExplicitly.set(true);
    release.transferred.set(transfer);
    cleanable.clean();
    return p;
  }
}
