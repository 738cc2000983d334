package ai.acc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** Checks that need no native library (scripts/setup.sh runs this one to fetch Maven's plugins). */
class PureJavaTest {
  @Test
  void errorCodesMatchAccH() {
    assertEquals(0, ErrorCode.OK.value());
    assertEquals(2, ErrorCode.INVALID_CONFIG.value());
    assertEquals(12, ErrorCode.INTERNAL.value());
    for (ErrorCode c : ErrorCode.values()) assertEquals(c, ErrorCode.of(c.value()));
    assertEquals(ErrorCode.INTERNAL, ErrorCode.of(-5));
    AccException e = new AccException(99, "from a newer libacc");
    assertEquals(ErrorCode.INTERNAL, e.code());
    assertEquals(99, e.status());
  }

  @Test
  void dtypeSizes() {
    int[] sizes = {4, 8, 2, 2, 4, 8, 1, 1};
    for (DType d : DType.values()) {
      assertEquals(d.ordinal(), d.value());
      assertEquals(sizes[d.ordinal()], d.size());
    }
  }

  @Test
  void platformName() {
    String p = NativeLoader.platform();
    assertEquals(p, p.toLowerCase(java.util.Locale.ROOT));
    assertEquals(2, p.split("-", 2).length);
  }
}
