package ai.acc;

import ai.acc.internal.AccRaw;
import ai.acc.internal.AccRawConstants;

/** Library facts: versions and build information. */
public final class Acc {
  private Acc() {}

  /** The ABI this binding was generated for. */
  public static final int ABI_VERSION = AccRawConstants.ACC_ABI_VERSION;

  /** The loaded libacc's version, "MAJOR.MINOR.PATCH". */
  public static String version() {
    NativeLoader.load();
    return AccRaw.acc_version();
  }

  /** The loaded libacc's build facts as JSON (torch version, compiler, CUDA, git revision). */
  public static String buildInfo() {
    NativeLoader.load();
    return AccRaw.acc_build_info();
  }

  /** Throws {@link AccException} ({@link ErrorCode#ABI_MISMATCH}) unless libacc serves {@code abi}. */
  public static void checkAbi(int abi) {
    NativeLoader.load();
    AccRaw.acc_abi_check(abi);
  }

  /** The C name of a status code, e.g. "ACC_ERR_INVALID_CONFIG". */
  public static String statusName(int status) {
    NativeLoader.load();
    return AccRaw.acc_status_name(status);
  }
}
