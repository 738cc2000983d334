package ai.acc;

import ai.acc.internal.AccRaw;
import ai.acc.internal.AccRawConstants;
import java.io.IOException;
import java.io.InputStream;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.security.CodeSource;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.Locale;

/**
 * Loads the JNI library {@code libacc_jni} once, in this order:
 *
 * <ol>
 *   <li>{@code -Dai.acc.native.skip=true}: the application has loaded it already;
 *   <li>{@code -Dai.acc.native.path=/path/to/libacc_jni.so};
 *   <li>a libacc release bundle: {@code <bundle>/lib/libacc_jni.so}, where the bundle is named by {@code
 *       -Dai.acc.home=<bundle>} or the environment variable {@code ACC_HOME}, or is the one this jar lies in
 *       ({@code <bundle>/share/java/acc-<version>.jar}); its {@code libacc_jni} finds the bundle's {@code
 *       libacc.so.1} and LibTorch through its {@code $ORIGIN} runpath;
 *   <li>the copy packed in the jar under {@code /ai/acc/native/<os>-<arch>/}, extracted once into a
 *       versioned cache directory ({@code ~/.cache/libacc/<version>-<hash>/}, or {@code ai.acc.native.cache});
 *   <li>{@code System.loadLibrary("acc_jni")} ({@code java.library.path}).
 * </ol>
 *
 * Then it checks that the loaded libacc serves this binding's ABI; a mismatch throws an {@link
 * AccException} naming both versions. {@code libacc_jni} finds {@code libacc.so.1} through its runpath
 * or the system's library path ({@code LD_LIBRARY_PATH}); {@code -Dai.acc.libacc.path=/path/to/libacc.so.1}
 * loads a given libacc first (for a build tree or an unusual prefix).
 */
public final class NativeLoader {
  private static volatile boolean loaded;

  private NativeLoader() {}

  /** Loads the library if it is not loaded yet; every public entry point calls this. */
  public static void load() {
    if (loaded) return;
    synchronized (NativeLoader.class) {
      if (loaded) return;
      if (!Boolean.getBoolean("ai.acc.native.skip")) {
        String libacc = System.getProperty("ai.acc.libacc.path", "");
        if (!libacc.isEmpty()) System.load(Paths.get(libacc).toAbsolutePath().toString());
        String path = System.getProperty("ai.acc.native.path", "");
        Path bundled = path.isEmpty() ? bundledLibrary() : null;
        if (!path.isEmpty()) {
          System.load(Paths.get(path).toAbsolutePath().toString());
        } else if (bundled != null) {
          System.load(bundled.toString());
        } else if (!loadFromJar()) {
          System.loadLibrary("acc_jni");
        }
      }
      AccRaw.acc_abi_check(AccRawConstants.ACC_ABI_VERSION); // throws AccException on a mismatch
      loaded = true;
    }
  }

  static String platform() {
    String os = System.getProperty("os.name").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch").toLowerCase(Locale.ROOT);
    if (os.contains("linux")) os = "linux";
    else if (os.contains("mac")) os = "osx";
    else if (os.contains("win")) os = "windows";
    if (arch.equals("amd64")) arch = "x86_64";
    return os + "-" + arch;
  }

  /**
   * {@code <bundle>/lib/libacc_jni.so} of the release bundle named by {@code ai.acc.home} or {@code ACC_HOME}
   * (which must hold it: a wrong name is an error, not a silent fallback), else of the bundle this jar lies in;
   * null when there is none.
   */
  static Path bundledLibrary() {
    String name = System.mapLibraryName("acc_jni");
    String home = System.getProperty("ai.acc.home", "");
    String origin = "-Dai.acc.home";
    if (home.isEmpty()) {
      home = System.getenv().getOrDefault("ACC_HOME", "");
      origin = "ACC_HOME";
    }
    if (!home.isEmpty()) {
      Path lib = Paths.get(home, "lib", name).toAbsolutePath();
      if (!Files.isRegularFile(lib)) {
        throw new UnsatisfiedLinkError(origin + "=" + home + " is not a libacc bundle: " + lib + " does not exist");
      }
      return lib;
    }
    try {
      CodeSource source = NativeLoader.class.getProtectionDomain().getCodeSource();
      if (source == null) return null;
      Path jar = Paths.get(source.getLocation().toURI());
      Path javaDir = jar.getParent();
      if (!Files.isRegularFile(jar) || javaDir == null || !javaDir.endsWith(Paths.get("share", "java"))) return null;
      Path lib = javaDir.getParent().getParent().resolve("lib").resolve(name);
      return Files.isRegularFile(lib) ? lib : null;
    } catch (URISyntaxException | SecurityException | IllegalArgumentException e) {
      return null; // not a file on disk: no bundle around it
    }
  }

  private static boolean loadFromJar() {
    String name = System.mapLibraryName("acc_jni");
    String resource = "/ai/acc/native/" + platform() + "/" + name;
    byte[] bytes;
    try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
      if (in == null) return false;
      bytes = in.readAllBytes();
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("cannot read " + resource + " from the jar: " + e);
    }
    try {
      String hash = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes), 0, 8);
      String version = NativeLoader.class.getPackage().getImplementationVersion();
      Path dir = cacheRoot().resolve((version == null ? "dev" : version) + "-" + hash);
      Path file = dir.resolve(name);
      if (!Files.isRegularFile(file) || Files.size(file) != bytes.length) {
        Files.createDirectories(dir);
        Path tmp = Files.createTempFile(dir, name, ".tmp");
        Files.write(tmp, bytes);
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
      }
      System.load(file.toAbsolutePath().toString());
      return true;
    } catch (IOException | java.security.NoSuchAlgorithmException e) {
      throw new UnsatisfiedLinkError("cannot extract " + resource + ": " + e);
    }
  }

  private static Path cacheRoot() {
    String configured = System.getProperty("ai.acc.native.cache", "");
    if (!configured.isEmpty()) return Paths.get(configured);
    String xdg = System.getenv("XDG_CACHE_HOME");
    if (xdg != null && !xdg.isEmpty()) return Paths.get(xdg, "libacc");
    String home = System.getProperty("user.home", "");
    if (!home.isEmpty() && Files.isWritable(Paths.get(home))) return Paths.get(home, ".cache", "libacc");
    return Paths.get(System.getProperty("java.io.tmpdir"), "libacc-" + System.getProperty("user.name"));
  }
}
