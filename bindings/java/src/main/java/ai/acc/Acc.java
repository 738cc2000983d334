package ai.acc;

import ai.acc.internal.AccRaw;
import ai.acc.internal.AccRawConstants;

/** Library facts: versions and build information. */
public final class Acc {
  private Acc() {}

  /** The ABI this binding was generated for. */
  public static final int ABI_VERSION = AccRawConstants.ACC_ABI_VERSION;

  /**
   * The loaded libacc's version, "MAJOR.MINOR.PATCH".
   *
   * @return the version string
   */
  public static String version() {
    NativeLoader.load();
    return AccRaw.acc_version();
  }

  /**
   * The loaded libacc's build facts as JSON (torch version, compiler, CUDA, git revision).
   *
   * @return the build facts, a JSON object
   */
  public static String buildInfo() {
    NativeLoader.load();
    return AccRaw.acc_build_info();
  }

  /**
   * Throws {@link AccException} ({@link ErrorCode#ABI_MISMATCH}) unless libacc serves {@code abi}.
   *
   * @param abi the ABI version a caller was built for ({@link #ABI_VERSION} for this binding)
   * @throws AccException {@link ErrorCode#ABI_MISMATCH} when the loaded libacc does not serve {@code abi}
   */
  public static void checkAbi(int abi) {
    NativeLoader.load();
    AccRaw.acc_abi_check(abi);
  }

  /**
   * PyTorch's {@code torch.set_grad_enabled} for the calling thread: with {@code false}, forward passes
   * record no autograd graph (evaluation and inference: less memory and time; backward of such a loss
   * fails), with {@code true} they do again (the default). Thread-local, as in PyTorch: other threads
   * keep their own setting.
   *
   * @param enabled false to record no autograd graph on this thread, true to record it again
   * @return the setting before, to restore it
   */
  public static boolean setGradEnabled(boolean enabled) {
    NativeLoader.load();
    int[] previous = new int[1];
    AccRaw.acc_set_grad_enabled(enabled ? 1 : 0, previous);
    return previous[0] != 0;
  }

  /**
   * PyTorch's {@code torch.no_grad()}: gradients off on this thread until the returned guard is
   * closed, which restores the previous setting. Close it on the thread that opened it:
   *
   * <pre>{@code
   * try (Acc.NoGrad g = Acc.noGrad()) {
   *   Tensor y = model.predict(x); // no autograd graph
   * }
   * }</pre>
   *
   * @return the guard; closing it restores the setting before
   */
  public static NoGrad noGrad() {
    return new NoGrad(setGradEnabled(false));
  }

  /** The guard of {@link #noGrad()}; closing it restores the setting before. */
  public static final class NoGrad implements AutoCloseable {
    private final boolean previous;

    private NoGrad(boolean previous) {
      this.previous = previous;
    }

    @Override
    public void close() {
      setGradEnabled(previous);
    }
  }

  /**
   * The C name of a status code, e.g. "ACC_ERR_INVALID_CONFIG".
   *
   * @param status a status code (acc_status)
   * @return its C name; "ACC_ERR_UNKNOWN" for a code libacc does not know
   */
  public static String statusName(int status) {
    NativeLoader.load();
    return AccRaw.acc_status_name(status);
  }
}
