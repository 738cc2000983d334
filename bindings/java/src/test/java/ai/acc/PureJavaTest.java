package ai.acc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

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

  @Test
  void bundleNamedByAccHome() throws java.io.IOException {
    java.nio.file.Path bundle = java.nio.file.Files.createTempDirectory("acc-bundle");
    String before = System.getProperty("ai.acc.home");
    try {
      System.setProperty("ai.acc.home", bundle.toString());
      UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, NativeLoader::bundledLibrary);
      assertTrue(e.getMessage().contains("-Dai.acc.home=" + bundle + " is not a libacc bundle"), e.getMessage());
      java.nio.file.Path lib = bundle.resolve("lib").resolve(System.mapLibraryName("acc_jni"));
      java.nio.file.Files.createDirectories(lib.getParent());
      java.nio.file.Files.createFile(lib);
      assertEquals(lib.toAbsolutePath(), NativeLoader.bundledLibrary());
    } finally {
      if (before == null) System.clearProperty("ai.acc.home");
      else System.setProperty("ai.acc.home", before);
      java.nio.file.Files.deleteIfExists(bundle.resolve("lib").resolve(System.mapLibraryName("acc_jni")));
      java.nio.file.Files.deleteIfExists(bundle.resolve("lib"));
      java.nio.file.Files.deleteIfExists(bundle);
    }
  }

  @Test
  void flatJson() {
    var m = FlatJson.parse("{\"\": 26953662464, \"a.b\": 0, \"q\\\"\\u00e9\\n\": \"disk\", \"n\": -3}");
    assertEquals(java.util.List.of("", "a.b", "q\"\u00e9\n", "n"), java.util.List.copyOf(m.keySet()));
    assertEquals(26953662464L, m.get(""));
    assertEquals(0L, m.get("a.b"));
    assertEquals("disk", m.get("q\"\u00e9\n"));
    assertEquals(-3L, m.get("n"));
    assertEquals(0, FlatJson.parse(" { } ").size());
    for (String bad : new String[] {"", "{", "{\"a\": 1.5}", "{\"a\": [1]}", "{\"a\": 1} x", "{\"a\" 1}"}) {
      AccException e = assertThrows(AccException.class, () -> FlatJson.parse(bad), bad);
      assertEquals(ErrorCode.INTERNAL, e.code());
    }
  }
}
