package org.hvd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Real processes: hvdrun starts 2-3 JVMs (org.hvd.it.*Main), which find each
 * other through hvdrun's rendezvous store and talk over Gloo.
 */
@Timeout(180)
class MultiProcessTest {
  static final String HVDRUN = System.getProperty("hvd.test.hvdrun", "");
  static final String CLASSPATH = System.getProperty("hvd.test.classpath", "");

  static final class Result {
    int exit;
    String output;
    double seconds;
  }

  static Result hvdrun(int np, String mainClass) throws Exception {
    assumeTrue(new File(HVDRUN).canExecute(), "hvdrun not built at '" + HVDRUN + "'");
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    List<String> cmd = new ArrayList<>(List.of(HVDRUN, "-np", String.valueOf(np), "--tag-output",
        "--start-timeout", "60", java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
        "-cp", CLASSPATH, mainClass));
    Path log = Files.createTempFile("hvdrun-", ".log");
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
    long t0 = System.nanoTime();
    Process p = pb.start();
    if (!p.waitFor(150, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new AssertionError("hvdrun did not finish in 150 s: " + Files.readString(log));
    }
    Result r = new Result();
    r.exit = p.exitValue();
    r.output = Files.readString(log, StandardCharsets.UTF_8);
    r.seconds = (System.nanoTime() - t0) / 1e9;
    Files.deleteIfExists(log);
    System.out.printf("hvdrun -np %d %s: exit %d in %.1f s%n", np, mainClass, r.exit, r.seconds);
    return r;
  }

  @ParameterizedTest(name = "np={0}")
  @ValueSource(ints = {2, 3})
  void collectivesAcrossProcesses(int np) throws Exception {
    Result r = hvdrun(np, "org.hvd.it.CollectivesMain");
    assertEquals(0, r.exit, r.output);
    for (int rank = 0; rank < np; ++rank) {
      assertTrue(r.output.contains("rank " + rank + "/" + np + ": all checks passed"), r.output);
    }
  }

  /** A plain child JVM (no hvdrun) with extra -D options; returns exit code and output. */
  static Result java(String... opts) throws Exception {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    List<String> cmd = new ArrayList<>(List.of(java, "-Xmx128m"));
    cmd.addAll(List.of(opts));
    cmd.addAll(List.of("-cp", CLASSPATH, "org.hvd.it.VersionMain"));
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    Result r = new Result();
    r.output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(60, TimeUnit.SECONDS));
    r.exit = p.exitValue();
    return r;
  }

  @Test
  void nativePathPropertyOverridesTheJar() throws Exception {
    String dir = System.getProperty("hvd.test.nativeDir", "");
    assumeTrue(new File(dir, "libhvd_jni.so").isFile(), "no libhvd_jni.so in '" + dir + "'");
    Result r = java("-Dhvd.native.path=" + dir);
    assertEquals(0, r.exit, r.output);
    assertTrue(r.output.contains("hvd 0.1.0 from " + Path.of(dir).toAbsolutePath()), r.output);

    r = java("-Dhvd.native.path=/nonexistent/hvd");
    assertEquals(3, r.exit, r.output);
    assertTrue(r.output.contains("HVD_ERR_NOT_FOUND") && r.output.contains("/nonexistent/hvd"), r.output);
  }

  @Test
  void aPlatformTheJarLacksGetsAClearError() throws Exception {
    Result r = java("-Dos.arch=riscv128");
    assertEquals(3, r.exit, r.output);
    assertTrue(r.output.contains("no native libraries for linux-riscv128"), r.output);
    assertTrue(r.output.contains("hvd.native.path"), r.output);
  }

  @Test
  void aPeerThatShutsDownEndsTheOthersWait() throws Exception {
    Result r = hvdrun(2, "org.hvd.it.PeerShutdownMain");
    assertEquals(0, r.exit, r.output);
    assertTrue(r.output.contains("rank 0: HVD_ERR_ABORTED") || r.output.contains("rank 0: HVD_ERR_TRANSPORT"),
        r.output);
  }
}
