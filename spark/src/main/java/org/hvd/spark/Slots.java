package org.hvd.spark;

import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.resource.ResourceProfile;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Checks, before a barrier job is submitted, that the cluster has a task slot
 * for every rank. Spark checks this itself, but only by logging a warning and
 * retrying every {@code spark.scheduler.barrier.maxConcurrentTasksCheck.interval}
 * (15 s) up to {@code maxConcurrentTasksCheck.maxFailures} (40) times: about ten
 * minutes before a job that can never run fails, and a 15 s pause for the
 * first job of an application whose executors are still registering.
 *
 * <p>The count is Spark's own ({@code SparkContext.maxNumConcurrentTasks}, what
 * the DAGScheduler's barrier check uses: the registered executors' cores
 * divided by {@code spark.task.cpus}). When the slots are short but more
 * executors are expected, the check waits for them (polling every 0.1 s) up to
 * {@code spark.hvd.slotWaitTimeout} (default 120 s); when the cluster can never
 * have enough (local, local-cluster, or {@code spark.executor.instances} ×
 * {@code spark.executor.cores} known) it fails at once.
 */
final class Slots {
  private static final Logger LOG = LoggerFactory.getLogger(Slots.class);
  /** Spark setting: how long to wait for executors to register (a Spark time string). */
  static final String WAIT_KEY = "spark.hvd.slotWaitTimeout";
  static final String WAIT_DEFAULT = "120s";

  private Slots() {}

  /** Task slots now, as Spark's barrier check counts them (-1: unknown). */
  static int now(SparkContext sc, ResourceProfile rp) {
    try {
      return sc.maxNumConcurrentTasks(rp);
    } catch (RuntimeException | LinkageError e) {
      LOG.debug("maxNumConcurrentTasks failed; counting executors", e);
      int executors = sc.statusTracker().getExecutorInfos().length;
      if (!sc.isLocal()) executors -= 1;  // the list includes the driver
      int cores = sc.getConf().getInt("spark.executor.cores", 1);
      return Math.max(0, executors) * Math.max(1, cores / taskCpus(sc.getConf()));
    }
  }

  static int taskCpus(SparkConf conf) {
    return Math.max(1, conf.getInt("spark.task.cpus", 1));
  }

  private static final Pattern LOCAL = Pattern.compile("local(?:\\[\\s*(\\*|\\d+)\\s*(?:,\\s*\\d+\\s*)?\\])?");
  private static final Pattern LOCAL_CLUSTER =
      Pattern.compile("local-cluster\\[\\s*(\\d+)\\s*,\\s*(\\d+)\\s*,\\s*\\d+\\s*\\]");

  /**
   * The slots this application will have once every executor it asked for has
   * registered, or -1 when that cannot be told from the settings (standalone
   * without spark.executor.instances/cores, dynamic allocation).
   */
  static int expected(String master, SparkConf conf) {
    int taskCpus = taskCpus(conf);
    Matcher m = LOCAL.matcher(master.trim());
    if (m.matches()) {
      String n = m.group(1);
      int cores = n == null ? 1 : n.equals("*") ? Runtime.getRuntime().availableProcessors() : Integer.parseInt(n);
      return cores / taskCpus;
    }
    m = LOCAL_CLUSTER.matcher(master.trim());
    if (m.matches()) return Integer.parseInt(m.group(1)) * (Integer.parseInt(m.group(2)) / taskCpus);
    if (conf.getBoolean("spark.dynamicAllocation.enabled", false)) return -1;
    if (conf.contains("spark.executor.instances") && conf.contains("spark.executor.cores")) {
      return conf.getInt("spark.executor.instances", 0) * (conf.getInt("spark.executor.cores", 1) / taskCpus);
    }
    return -1;
  }

  /**
   * Returns once the cluster has {@code requested} task slots; throws
   * {@link InsufficientSlotsException} at once when it never can, or after
   * spark.hvd.slotWaitTimeout when the executors did not come.
   */
  static void await(SparkContext sc, ResourceProfile rp, int requested) {
    int have = now(sc, rp);
    if (have >= requested) return;
    SparkConf conf = sc.getConf();
    int expected = expected(sc.master(), conf);
    if (sc.isLocal()) expected = have;  // local mode: the driver's own executor, all there from the start
    long waitS = conf.getTimeAsSeconds(WAIT_KEY, WAIT_DEFAULT);
    long t0 = System.nanoTime();
    long deadline = t0 + waitS * 1_000_000_000L;
    String setting = "master " + sc.master() + ", spark.task.cpus=" + taskCpus(conf);
    while (expected < 0 || expected >= requested) {
      if (System.nanoTime() > deadline) {
        throw new InsufficientSlotsException(requested, have, String.format(
            "hvd on Spark: the job asks for %d ranks, which need %d barrier task slots at once, "
                + "but the cluster has %d%s after waiting %d s (%s) for executors to register (%s). "
                + "Ask for at most %d ranks, or give the cluster more executors or cores.",
            requested, requested, have, expected < 0 ? "" : " of the " + expected + " expected",
            waitS, WAIT_KEY, setting, Math.max(have, 1)));
      }
      try {
        Thread.sleep(100);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted while waiting for executors", e);
      }
      have = now(sc, rp);
      if (have >= requested) {
        LOG.info("hvd on Spark: {} task slots after waiting {} ms for executors", have,
            (System.nanoTime() - t0) / 1_000_000);
        return;
      }
    }
    throw new InsufficientSlotsException(requested, expected, String.format(
        "hvd on Spark: the job asks for %d ranks, which need %d barrier task slots at once, "
            + "but the cluster has %d (%s). Ask for at most %d ranks, or give the cluster more "
            + "executors or cores.",
        requested, requested, expected, setting, Math.max(expected, 1)));
  }
}
