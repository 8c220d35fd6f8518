package org.hvd;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.hvd.swig.HvdNative;

/**
 * Loads libhvd and libhvd_jni once per class loader, at first use.
 *
 * <p>Where from, in order:
 * <ol>
 *   <li>the folder named by the system property {@value #PATH_PROPERTY} (holding
 *       libhvd.so.0 or libhvd.so, the transport plugins and libhvd_jni.so; a CMake
 *       build's {@code lib/} folder works as it is);
 *   <li>the jar: {@code org/hvd/native/<os>-<arch>/}, extracted to a fresh
 *       private temporary folder (deleted at exit). The transport plugins are
 *       extracted beside libhvd.so, where the library looks for them.
 * </ol>
 * The library's major version must equal the binding's.
 */
final class NativeLibrary {
  static final String PATH_PROPERTY = "hvd.native.path";
  static final int BINDING_MAJOR = 0;

  private static boolean loaded;
  private static HvdException failure;
  private static Path folder;

  private NativeLibrary() {}

  static synchronized void load() {
    if (loaded) return;
    if (failure != null) throw failure;
    try {
      folder = loadLibraries();
      int[] major = new int[1], minor = new int[1], patch = new int[1];
      HvdNative.hvd_version(major, minor, patch);
      if (major[0] != BINDING_MAJOR) {
        throw new HvdException(HvdException.VERSION, "NativeLibrary.load",
            "libhvd in " + folder + " is version " + major[0] + "." + minor[0] + "." + patch[0]
                + " but this binding needs major version " + BINDING_MAJOR);
      }
      loaded = true;
    } catch (HvdException e) {
      failure = e;
      throw e;
    } catch (UnsatisfiedLinkError | IOException | RuntimeException e) {
      failure = new HvdException(HvdException.NOT_FOUND, "NativeLibrary.load",
          "cannot load the hvd native libraries: " + e, e);
      throw failure;
    }
  }

  /** The folder the libraries were loaded from (after {@link #load()}). */
  static synchronized Path folder() {
    load();
    return folder;
  }

  /** "linux-x86_64", "linux-aarch64", ... */
  static String platform() {
    String os = System.getProperty("os.name", "unknown").toLowerCase(Locale.ROOT);
    if (os.startsWith("linux")) os = "linux";
    else if (os.startsWith("mac")) os = "darwin";
    else if (os.startsWith("windows")) os = "windows";
    String arch = System.getProperty("os.arch", "unknown").toLowerCase(Locale.ROOT);
    if (arch.equals("amd64") || arch.equals("x86_64")) arch = "x86_64";
    else if (arch.equals("arm64") || arch.equals("aarch64")) arch = "aarch64";
    return os + "-" + arch;
  }

  private static Path loadLibraries() throws IOException {
    String custom = System.getProperty(PATH_PROPERTY);
    if (custom != null && !custom.isEmpty()) {
      Path dir = Paths.get(custom).toAbsolutePath();
      Path core = firstExisting(dir, "libhvd.so.0", "libhvd.so");
      Path jni = dir.resolve("libhvd_jni.so");
      if (core == null || !Files.isRegularFile(jni)) {
        throw new HvdException(HvdException.NOT_FOUND, "NativeLibrary.load",
            "-D" + PATH_PROPERTY + "=" + custom + ": expected libhvd.so.0 (or libhvd.so) and "
                + "libhvd_jni.so in that folder");
      }
      System.load(core.toString());
      System.load(jni.toString());
      return dir;
    }
    String platform = platform();
    String base = "org/hvd/native/" + platform + "/";
    ClassLoader cl = NativeLibrary.class.getClassLoader();
    List<String> files = new ArrayList<>();
    try (InputStream index = cl.getResourceAsStream(base + "files.txt")) {
      if (index == null) {
        throw new HvdException(HvdException.NOT_FOUND, "NativeLibrary.load",
            "this hvd jar has no native libraries for " + platform + " (os.name="
                + System.getProperty("os.name") + ", os.arch=" + System.getProperty("os.arch")
                + "): build hvd on this platform (bindings/java/run_tests.sh) or set -D"
                + PATH_PROPERTY + "=FOLDER with libhvd.so and libhvd_jni.so");
      }
      BufferedReader r = new BufferedReader(new InputStreamReader(index, StandardCharsets.UTF_8));
      for (String line; (line = r.readLine()) != null; ) {
        line = line.trim();
        if (!line.isEmpty()) files.add(line);
      }
    }
    Path dir = Files.createTempDirectory("hvd-native-");  // 0700 on POSIX
    dir.toFile().deleteOnExit();
    for (String f : files) {
      Path target = dir.resolve(f);
      try (InputStream in = cl.getResourceAsStream(base + f)) {
        if (in == null) {
          throw new HvdException(HvdException.NOT_FOUND, "NativeLibrary.load",
              "the jar's " + base + "files.txt lists " + f + " but the jar lacks it");
        }
        Files.copy(in, target, StandardCopyOption.REPLACE_EXISTING);
      }
      target.toFile().deleteOnExit();  // runs before the folder's (reverse order)
    }
    Path core = firstExisting(dir, "libhvd.so.0", "libhvd.so");
    Path jni = dir.resolve("libhvd_jni.so");
    if (core == null || !Files.isRegularFile(jni)) {
      throw new HvdException(HvdException.NOT_FOUND, "NativeLibrary.load",
          "the jar's " + base + " lacks libhvd.so.0 or libhvd_jni.so");
    }
    // libhvd first: libhvd_jni.so needs it (by soname), and the core finds the
    // transport plugins in its own folder when a context picks one.
    System.load(core.toString());
    System.load(jni.toString());
    return dir;
  }

  private static Path firstExisting(Path dir, String... names) {
    for (String n : names) {
      Path p = dir.resolve(n);
      if (Files.isRegularFile(p)) return p;
    }
    return null;
  }
}
