package org.hvd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Elastic jobs with real worker JVMs (org.hvd.it.ElasticWorkerMain) and a
 * fake launcher (tests/integration/elastic: hvd_fake_elastic_launcher), which
 * hosts the store and answers the workers' joins as this test tells it
 * (docs/elastic.md, "Protocol"), so each membership step is the test's.
 */
@Timeout(180)
class ElasticMultiProcessTest {
  static final String LAUNCHER = System.getProperty("hvd.test.elasticLauncher", "");
  static final String CLASSPATH = System.getProperty("hvd.test.classpath", "");

  Process launcher;
  Writer toLauncher;
  BlockingQueue<String> fromLauncher = new ArrayBlockingQueue<>(64);
  String addr, secret;
  Path dir;
  final Map<String, Process> workers = new HashMap<>();

  @BeforeEach
  void start() throws Exception {
    assumeTrue(new File(LAUNCHER).canExecute(), "hvd_fake_elastic_launcher not built at '" + LAUNCHER + "'");
    dir = Files.createTempDirectory("hvd-elastic-java-");
    launcher = new ProcessBuilder(LAUNCHER).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    toLauncher = new java.io.OutputStreamWriter(launcher.getOutputStream(), StandardCharsets.UTF_8);
    BufferedReader r = new BufferedReader(new InputStreamReader(launcher.getInputStream(), StandardCharsets.UTF_8));
    Thread t = new Thread(() -> {
      try {
        for (String line; (line = r.readLine()) != null; ) fromLauncher.put(line);
      } catch (IOException | InterruptedException e) {
        // the launcher is gone
      }
    });
    t.setDaemon(true);
    t.start();
    String[] first = next().split(" ");
    assertEquals("store", first[0]);
    addr = first[1];
    secret = first[2];
  }

  @AfterEach
  void stop() throws Exception {
    for (Process p : workers.values()) p.destroyForcibly();
    if (launcher != null) launcher.destroyForcibly();
    if (dir != null) {
      try (var files = Files.list(dir)) {
        for (Path f : (Iterable<Path>) files::iterator) Files.deleteIfExists(f);
      }
      Files.deleteIfExists(dir);
    }
  }

  String next() throws InterruptedException {
    String line = fromLauncher.poll(60, TimeUnit.SECONDS);
    if (line == null) throw new AssertionError("the fake launcher did not answer in 60 s");
    return line;
  }

  String ask(String command) throws Exception {
    toLauncher.write(command + "\n");
    toLauncher.flush();
    return next();
  }

  void waitJoin(String worker, int n) throws Exception {
    String got = ask("waitjoin " + worker + " " + n + " 60");
    assertEquals("joined hostA", got, "join " + n + " of " + worker + ": " + output(worker));
  }

  void answer(String worker, int n, String text) throws Exception {
    assertEquals("ok", ask("answer " + worker + " " + n + " " + text));
  }

  void spawn(String worker, int steps, int leaveAt) throws IOException {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    ProcessBuilder pb = new ProcessBuilder(java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", CLASSPATH,
        "org.hvd.it.ElasticWorkerMain", String.valueOf(steps), String.valueOf(leaveAt));
    Map<String, String> env = pb.environment();
    env.keySet().removeIf(k -> k.startsWith("HVD_"));
    env.put("HVD_ELASTIC", "1");
    env.put("HVD_ELASTIC_WORKER", worker);
    env.put("HVD_ELASTIC_TIMEOUT", "60");
    env.put("HVD_RENDEZVOUS_ADDR", addr);
    env.put("HVD_SECRET", secret);
    env.put("HVD_HOSTNAME", "hostA");
    env.put("HVD_TRANSPORT", "gloo");
    env.put("HVD_START_TIMEOUT", "60");
    env.put("HVD_TRANSPORT_TIMEOUT", "30");
    pb.redirectOutput(dir.resolve(worker + ".out").toFile());
    pb.redirectError(dir.resolve(worker + ".err").toFile());
    workers.put(worker, pb.start());
  }

  String output(String worker) {
    try {
      return Files.readString(dir.resolve(worker + ".out")) + "--- stderr:\n"
          + Files.readString(dir.resolve(worker + ".err"));
    } catch (IOException e) {
      return "(no output: " + e + ")";
    }
  }

  String stdout(String worker) throws IOException {
    return Files.readString(dir.resolve(worker + ".out"));
  }

  int exit(String worker) throws InterruptedException {
    Process p = workers.get(worker);
    if (!p.waitFor(90, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new AssertionError(worker + " did not end in 90 s: " + output(worker));
    }
    return p.exitValue();
  }

  /**
   * Three workers form epoch 0; one dies on reaching step 3 (steps 0-2 done,
   * the last commit made at step 2): the two others fail in step 3's
   * allreduce, restore the commit made at step 2, reset, and form epoch 1
   * (ranks swapped by the launcher, to show they come from its answer). The
   * launcher has meanwhile changed the hosts, so their next commit interrupts
   * them and they form epoch 2. The total counts each step's size: 3 + 3 (epoch 0, committed), then step 2
   * again and the rest at size 2: 6 + 4 * 2 = 14 (15 had the uncommitted
   * step 2 of epoch 0 been kept).
   */
  @Test
  void aWorkerDiesTheOthersRestoreResetAndFinish() throws Exception {
    String[] w = {"hostA:0:0", "hostA:1:1", "hostA:2:2"};
    spawn(w[0], 6, -1);
    spawn(w[1], 6, -1);
    spawn(w[2], 6, 3);
    for (String x : w) waitJoin(x, 0);
    for (int i = 0; i < 3; ++i) answer(w[i], 0, "ok 0 " + i + " 3 0");
    assertEquals("ok", ask("set elastic/epoch 0"));
    assertEquals(0, exit(w[2]), output(w[2]));
    waitJoin(w[0], 1);
    waitJoin(w[1], 1);
    assertEquals("ok", ask("set elastic/hosts_version 1"));  // after epoch 1's answer was made
    answer(w[0], 1, "ok 1 1 2 0");
    answer(w[1], 1, "ok 1 0 2 0");
    assertEquals("ok", ask("set elastic/epoch 1"));
    waitJoin(w[0], 2);
    waitJoin(w[1], 2);
    answer(w[0], 2, "ok 2 1 2 1");
    answer(w[1], 2, "ok 2 0 2 1");
    assertEquals(0, exit(w[0]), output(w[0]));
    assertEquals(0, exit(w[1]), output(w[1]));

    assertEquals("start rank=2 size=3 epoch=0 elastic=true\nleaving at step 3\n", stdout(w[2]));
    for (int i = 0; i < 2; ++i) {
      int r1 = 1 - i;
      assertEquals("start rank=" + i + " size=3 epoch=0 elastic=true\n"
          + "lost a peer at step 3\n"
          + "reset epoch=1 rank=" + r1 + " size=2\n"
          + "hosts updated at step 4\n"
          + "reset epoch=2 rank=" + r1 + " size=2\n"
          + "done total=14 step=6 epoch=2 rank=" + r1 + " size=2\n", stdout(w[i]), output(w[i]));
    }
    assertEquals("none", ask("get elastic/join/" + w[0] + "/3"));
  }

  /**
   * The same job under hvdrun's elastic driver (when this build's hvdrun has
   * it): three workers on three loopback hosts, the third dies (exit code 3)
   * on reaching step 3; hvdrun leaves its host out and forms epoch 1 with the
   * two others, which restore the commit made at step 2 and finish:
   * 3 + 3 + 4 * 2 = 14.
   */
  @Test
  void underHvdrunAWorkerDiesAndTheOthersFinish() throws Exception {
    String hvdrun = MultiProcessTest.HVDRUN;
    assumeTrue(new File(hvdrun).canExecute(), "hvdrun not built at '" + hvdrun + "'");
    Process help = new ProcessBuilder(hvdrun, "--help").redirectErrorStream(true).start();
    String usage = new String(help.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    help.waitFor(10, TimeUnit.SECONDS);
    assumeTrue(usage.contains("--min-np"), "this hvdrun has no elastic mode");
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    String worker = "'" + java + "' -Xmx256m -XX:TieredStopAtLevel=1 -cp '" + CLASSPATH
        + "' org.hvd.it.ElasticWorkerMain 6";
    List<String> cmd = List.of(hvdrun, "--min-np", "2", "-np", "3", "--elastic-timeout", "60",
        "--start-timeout", "60", "--grace-period", "2", "-H", "127.0.0.1,127.0.0.2,127.0.0.3",
        "--tag-output", "sh", "-c",
        "case $HVD_ELASTIC_WORKER in 127.0.0.3:*) exec " + worker + " 3 3 ;; esac; exec " + worker + " -1");
    Path log = dir.resolve("hvdrun.log");
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    workers.put("hvdrun", p);
    if (!p.waitFor(150, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new AssertionError("hvdrun did not end in 150 s: " + Files.readString(log));
    }
    String out = Files.readString(log);
    assertEquals(0, p.exitValue(), out);
    String[] ids = {"127.0.0.1:0:0", "127.0.0.2:0:1", "127.0.0.3:0:2"};
    for (int r = 0; r < 3; ++r) {
      assertTrue(out.contains("[" + ids[r] + "]<stdout>: start rank=" + r
          + " size=3 epoch=0 elastic=true\n"), out);
    }
    assertTrue(out.contains("[" + ids[2] + "]<stdout>: leaving at step 3\n"), out);
    for (int r = 0; r < 2; ++r) {
      StringBuilder mine = new StringBuilder();
      String prefix = "[" + ids[r] + "]<stdout>: ";
      for (String line : out.split("\n")) {
        if (line.startsWith(prefix)) mine.append(line.substring(prefix.length())).append('\n');
      }
      assertEquals("start rank=" + r + " size=3 epoch=0 elastic=true\n"
          + "lost a peer at step 3\n"
          + "reset epoch=1 rank=" + r + " size=2\n"
          + "done total=14 step=6 epoch=1 rank=" + r + " size=2\n", mine.toString(), out);
    }
  }

  /**
   * Two workers; one dies; the launcher answers the survivor's join with
   * "exit" (fewer workers than --min-np): Elastic.run does not retry, and
   * the worker gets the launcher's reason.
   */
  @Test
  void theLauncherEndsTheJob() throws Exception {
    String[] w = {"hostA:0:0", "hostA:1:1"};
    spawn(w[0], 6, -1);
    spawn(w[1], 6, 1);
    for (String x : w) waitJoin(x, 0);
    for (int i = 0; i < 2; ++i) answer(w[i], 0, "ok 0 " + i + " 2 0");
    assertEquals(0, exit(w[1]), output(w[1]));
    waitJoin(w[0], 1);
    answer(w[0], 1, "exit only 1 workers remain, fewer than --min-np 2");
    assertEquals(0, exit(w[0]), output(w[0]));
    String out = stdout(w[0]);
    assertTrue(out.startsWith("start rank=0 size=2 epoch=0 elastic=true\nlost a peer at step 1\n"
        + "ended: launcherEnded=true "), output(w[0]));
    assertTrue(out.contains("the launcher ends this worker (hostA:0:0): only 1 workers remain, "
        + "fewer than --min-np 2"), output(w[0]));
    assertEquals(3, out.split("\n").length, out);
    assertEquals("none", ask("get elastic/join/" + w[0] + "/2"));
  }
}
