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
    return launch(List.of(HVDRUN, "-np", String.valueOf(np), "--tag-output", "--start-timeout", "60"),
        mainClass);
  }

  /** Open MPI's mpirun from PATH, or null. */
  static String mpirun() {
    for (String dir : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
      File f = new File(dir, "mpirun");
      if (f.canExecute()) return f.getPath();
    }
    return null;
  }

  /** Runs `launcher... java ... mainClass` and waits up to 150 s. */
  static Result launch(List<String> launcher, String mainClass) throws Exception {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    List<String> cmd = new ArrayList<>(launcher);
    cmd.addAll(List.of(java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
        "-cp", CLASSPATH, mainClass));
    int np = Integer.parseInt(launcher.get(launcher.indexOf("-np") + 1));
    Path log = Files.createTempFile("hvdrun-", ".log");
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile());
    long t0 = System.nanoTime();
    Process p = pb.start();
    if (!p.waitFor(150, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new AssertionError(launcher.get(0) + " did not finish in 150 s: " + Files.readString(log));
    }
    Result r = new Result();
    r.exit = p.exitValue();
    r.output = Files.readString(log, StandardCharsets.UTF_8);
    r.seconds = (System.nanoTime() - t0) / 1e9;
    Files.deleteIfExists(log);
    System.out.printf("%s -np %d %s: exit %d in %.1f s%n", new File(launcher.get(0)).getName(), np,
        mainClass, r.exit, r.seconds);
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

  /**
   * The UCX transport under the JVM (whose allocator and GC threads then run
   * with UCX's mmap/brk hooks installed): the same checks over
   * `hvdrun --transport ucx`, with the core's shared memory off so every
   * byte goes through UCX. Skipped where the UCX plugin is not built.
   */
  @Test
  void collectivesOverUcx() throws Exception {
    File plugin = new File(new File(HVDRUN).getParentFile().getParentFile(), "lib/libhvd_transport_ucx.so");
    assumeTrue(plugin.isFile(), "the UCX transport plugin is not built (" + plugin + ")");
    assumeTrue(new File(HVDRUN).canExecute(), "hvdrun not built at '" + HVDRUN + "'");
    // Chosen by the launcher (--transport ucx), then by the program itself
    // (HvdConfig.builder().transport("ucx")); each rank logs its connections.
    for (boolean byApi : new boolean[] {false, true}) {
      List<String> launcher = new ArrayList<>(List.of(HVDRUN, "-np", "2", "--tag-output",
          "--start-timeout", "60", "-x", "HVD_SHM=0", "-x", "HVD_LOG_LEVEL=debug"));
      if (byApi) {
        launcher.addAll(List.of("-x", "HVD_TEST_JAVA_TRANSPORT=ucx"));
      } else {
        launcher.addAll(List.of("--transport", "ucx"));
      }
      Result r = launch(launcher, "org.hvd.it.CollectivesMain");
      assertEquals(0, r.exit, r.output);
      for (int rank = 0; rank < 2; ++rank) {
        assertTrue(r.output.contains("rank " + rank + "/2: all checks passed"), r.output);
      }
      assertTrue(r.output.contains("ucx: rank 0 of 2 connected over"), r.output);
      assertTrue(r.output.contains("ucx: rank 1 of 2 connected over"), r.output);
    }
  }

  /**
   * Process sets across processes: org.hvd.it.ProcessSetMain under hvdrun
   * (Gloo) at 3 and 4 ranks; see that class for the checks.
   */
  @ParameterizedTest(name = "np={0}")
  @ValueSource(ints = {3, 4})
  void processSetsAcrossProcesses(int np) throws Exception {
    Result r = hvdrun(np, "org.hvd.it.ProcessSetMain");
    assertEquals(0, r.exit, r.output);
    checkProcessSetOutput(r, np);
  }

  static void checkProcessSetOutput(Result r, int np) {
    for (int rank = 0; rank < np; ++rank) {
      assertTrue(r.output.contains("rank " + rank + "/" + np + ": process set checks passed"), r.output);
      assertTrue(r.output.contains("rank " + rank + ": refused: HVD_ERR_INVALID_ARGUMENT (-1) in"
          + " hvd_process_set_create: "), r.output);
      assertTrue(r.output.contains("rank " + rank + ": refused: HVD_ERR_MISMATCH (-5) in"
          + " hvd_process_set_create: "), r.output);
      assertTrue(r.output.contains("rank " + rank + ": refused: HVD_ERR_UNSUPPORTED (-7) in"
          + " hvd_context_split: "), r.output);
    }
  }

  /** The same under mpirun (the MPI transport), where Open MPI is installed. */
  @Test
  void processSetsUnderMpirun() throws Exception {
    String mpirun = mpirun();
    assumeTrue(mpirun != null, "no mpirun on PATH");
    Result r = launch(List.of(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3"),
        "org.hvd.it.ProcessSetMain");
    assertEquals(0, r.exit, r.output);
    checkProcessSetOutput(r, 3);
  }

  /**
   * 2 processes: 1.5f + 1.5f through a direct ByteBuffer with DataType.FLOAT32
   * is exactly 3.0f; the untyped ByteBuffer form throws IllegalArgumentException.
   */
  @Test
  void byteBuffersWithADataTypeAcrossProcesses() throws Exception {
    Result r = hvdrun(2, "org.hvd.it.ByteBufferMain");
    assertEquals(0, r.exit, r.output);
    for (int rank = 0; rank < 2; ++rank) {
      assertTrue(r.output.contains("rank " + rank + ": 1.5f summed over 2 ranks = 3.0"), r.output);
      assertTrue(r.output.contains("rank " + rank + ": refused: allreduce 'y': a ByteBuffer carries no"
          + " element type; pass a DataType"), r.output);
      assertTrue(r.output.contains("rank " + rank + "/2: bytebuffer checks passed"), r.output);
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

  /**
   * A program that never calls Hvd.shutdown() still exits cleanly: the JVM's
   * exit shuts hvd down. Under mpirun (the MPI transport) a rank that exits
   * without finalizing MPI makes mpirun report an improper exit, status 1.
   */
  @Test
  void exitingWithoutShutdownIsClean() throws Exception {
    Result r = hvdrun(2, "org.hvd.it.NoShutdownMain");
    assertEquals(0, r.exit, r.output);
    assertTrue(r.output.contains("rank 0: sum 3") && r.output.contains("rank 1: sum 3"), r.output);

    String mpirun = mpirun();
    assumeTrue(mpirun != null, "no mpirun on PATH: the MPI half of this test did not run");
    r = launch(List.of(mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"),
        "org.hvd.it.NoShutdownMain");
    assertEquals(0, r.exit, r.output);
    assertTrue(r.output.contains("rank 0: sum 3") && r.output.contains("rank 1: sum 3"), r.output);
    assertTrue(!r.output.contains("exiting improperly"), r.output);
  }
}
