package org.hvd.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.BarrierTaskInfo;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.hvd.Hvd;
import org.hvd.HvdConfig;
import org.hvd.HvdContext;
import org.hvd.HvdException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * Runs a training function on Spark barrier tasks, one hvd rank per partition.
 *
 * <pre>{@code
 * List<double[]> perRank = HvdSpark.run(rdd, (ctx, rows) -> {
 *   double[] local = ...;                                   // from this partition's rows
 *   return ctx.hvd().allreduce("sum", local, ReduceOp.SUM); // across every task
 * });
 * }</pre>
 *
 * Inside {@code rdd.barrier().mapPartitions}: rank = partition id, size = the
 * number of partitions, local rank from grouping the barrier tasks' addresses by
 * host. The context bootstraps through hvd's out-of-band allgather implemented
 * with {@code BarrierTaskContext.allGather}: task 0 hosts the rendezvous store
 * on a port it binds, and its address and a fresh secret reach the others
 * through Spark (no port or secret to configure, nothing on the driver).
 * The context is closed in a finally block that logs a failure to close rather
 * than hiding the function's own error; a function that throws fails the
 * barrier stage (and so the job) with its exception, and the other tasks
 * leave their collectives as soon as Spark kills them (the runner's
 * cancellation check) or the failed task's context tells them it closed. A
 * task whose collective failed that way (ABORTED, TRANSPORT) waits up to 5 s
 * for Spark to kill it before it reports its own failure, so that the stage
 * fails with the first task's real error rather than with this echo of it.
 *
 * <p>The stage needs as many task slots as partitions, all at once: before it
 * submits the job the runner checks that the cluster has them, waiting for
 * executors that are still registering (up to {@code spark.hvd.slotWaitTimeout},
 * default 120 s), and throws {@link InsufficientSlotsException} naming both
 * numbers when it cannot have them, instead of Spark's ten minutes of retries.
 *
 * <p>The static {@link Hvd} API works inside the function, wherever the task
 * runs: the runner binds the task's context to the task's thread
 * ({@link Hvd#bind(HvdContext)}) for the duration of the function, so code
 * written for hvdrun ({@code Hvd.init(); ... Hvd.rank() ... Hvd.allreduce(...)
 * ... Hvd.shutdown();}) runs unchanged, also where several ranks share one JVM
 * (local mode, executors with several cores). Its {@code Hvd.init()} only
 * checks and counts, its {@code Hvd.shutdown()} leaves the context open for the
 * runner to close. Threads the function starts do not inherit the binding:
 * bind {@code ctx.hvd()} (or {@code Hvd.context()}) there.
 */
public final class HvdSpark {
  private static final Logger LOG = LoggerFactory.getLogger(HvdSpark.class);

  private HvdSpark() {}

  /** Runs fn on every partition of data; returns the per-rank results in rank order. */
  public static <T, R> List<R> run(JavaRDD<T> data, TrainFunction<T, R> fn) {
    return run(data, fn, HvdConfig.fromEnvironment());
  }

  /**
   * As {@link #run(JavaRDD, TrainFunction)}, with hvd settings for every rank
   * (rank, size, local/cross topology and the bootstrap are set by the runner).
   */
  public static <T, R> List<R> run(JavaRDD<T> data, TrainFunction<T, R> fn, HvdConfig config) {
    List<Ranked<R>> got = barrierRdd(data, fn, config).collect();
    List<Ranked<R>> sorted = new ArrayList<>(got);
    sorted.sort((a, b) -> Integer.compare(a.rank, b.rank));
    return sorted.stream().map(r -> r.value).collect(Collectors.toList());
  }

  /** On a Dataset's rows. */
  public static <R> List<R> run(Dataset<Row> data, TrainFunction<Row, R> fn, HvdConfig config) {
    return run(data.toJavaRDD(), fn, config);
  }

  /** Without data: numProc ranks, each getting an iterator over its rank alone. */
  public static <R> List<R> run(JavaSparkContext sc, int numProc, TrainFunction<Integer, R> fn,
                                HvdConfig config) {
    List<Integer> ranks = IntStream.range(0, numProc).boxed().collect(Collectors.toList());
    return run(sc.parallelize(ranks, numProc), fn, config);
  }

  /** A rank's result, tagged with its rank. */
  public static final class Ranked<R> implements Serializable {
    private static final long serialVersionUID = 1L;
    public final int rank;
    public final R value;

    Ranked(int rank, R value) {
      this.rank = rank;
      this.value = value;
    }
  }

  /** The lazy form: a barrier RDD with one {@link Ranked} result per partition. */
  public static <T, R> JavaRDD<Ranked<R>> barrierRdd(JavaRDD<T> data, TrainFunction<T, R> fn,
                                                     HvdConfig config) {
    HvdConfig base = config == null ? HvdConfig.fromEnvironment() : config;
    checkSlots(data.rdd(), data.getNumPartitions());
    @SuppressWarnings("unchecked")
    ClassTag<Ranked<R>> tag = (ClassTag<Ranked<R>>) (ClassTag<?>) ClassTag$.MODULE$.apply(Ranked.class);
    RDD<Ranked<R>> out = data.rdd().barrier().mapPartitions(new Body<>(fn, base), false, tag);
    return new JavaRDD<>(out, tag);
  }

  /**
   * Returns when the cluster has a task slot for each of {@code numProc} ranks
   * (waiting up to spark.hvd.slotWaitTimeout for executors still registering);
   * throws {@link InsufficientSlotsException} when it cannot have them.
   */
  public static void checkSlots(JavaSparkContext sc, int numProc) {
    Slots.await(sc.sc(), sc.sc().resourceProfileManager().defaultResourceProfile(), numProc);
  }

  static void checkSlots(RDD<?> rdd, int numProc) {
    ResourceProfile rp = rdd.getResourceProfile();
    if (rp == null) rp = rdd.sparkContext().resourceProfileManager().defaultResourceProfile();
    Slots.await(rdd.sparkContext(), rp, numProc);
  }

  /** How long a task whose collective was aborted by a peer waits to be killed. */
  static final long SECONDARY_FAILURE_GRACE_MS = 5000;

  private static void waitForKill(BarrierTaskContext task, long ms) {
    long end = System.nanoTime() + ms * 1_000_000L;
    while (!task.isInterrupted() && System.nanoTime() < end) {
      try {
        Thread.sleep(50);
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  /** The function Spark ships to every barrier task. */
  private static final class Body<T, R>
      extends AbstractFunction1<scala.collection.Iterator<T>, scala.collection.Iterator<Ranked<R>>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final TrainFunction<T, R> fn;
    private final HvdConfig base;

    Body(TrainFunction<T, R> fn, HvdConfig base) {
      this.fn = fn;
      this.base = base;
    }

    @Override
    public scala.collection.Iterator<Ranked<R>> apply(scala.collection.Iterator<T> rows) {
      BarrierTaskContext task = BarrierTaskContext.get();
      BarrierTaskInfo[] infos = task.getTaskInfos();
      String[] addresses = new String[infos.length];
      for (int i = 0; i < infos.length; ++i) addresses[i] = infos[i].address();
      Topology topo = Topology.of(task.partitionId(), addresses);
      HvdConfig cfg = base.toBuilder()
          .rank(topo.rank).size(topo.size)
          .localRank(topo.localRank).localSize(topo.localSize)
          .crossRank(topo.crossRank).crossSize(topo.crossSize)
          .oobAllgather(new BarrierOob(task))
          .build();
      LOG.info("hvd barrier task: {} (stage attempt {})", topo, task.stageAttemptNumber());
      R result;
      HvdContext ctx = HvdContext.create(cfg);
      try {
        ctx.setCancellationCheck(task::isInterrupted);
        // Hvd.* on this thread reach this task's context; closing the binding
        // restores the thread's previous one (Spark reuses its task threads),
        // also when the function left bindings of its own open.
        try (Hvd.Binding bound = Hvd.bind(ctx)) {
          result = fn.call(new HvdTaskContext(ctx, task, topo),
              scala.jdk.javaapi.CollectionConverters.asJava(rows));
          if (bound.initCount() > 0) {
            LOG.debug("hvd rank {}: the function left {} Hvd.init() reference(s) unreleased",
                topo.rank, bound.initCount());
          }
        }
      } catch (HvdException e) {
        if (e.status() == HvdException.ABORTED || e.status() == HvdException.TRANSPORT) {
          // Most likely a consequence of another task's failure (it closed its
          // context, or died). A closing context waits for every rank's, so
          // close this one first (the failed task's close can then end), then
          // give Spark a moment to register that task's error and kill this
          // one: the stage then fails with the real error, not this echo.
          closeQuietly(ctx, topo.rank);
          waitForKill(task, SECONDARY_FAILURE_GRACE_MS);
        }
        LOG.error("hvd rank {} of {} failed", topo.rank, topo.size, e);
        throw e;
      } catch (RuntimeException | Error e) {
        LOG.error("hvd rank {} of {} failed", topo.rank, topo.size, e);
        throw e;
      } catch (Exception e) {
        LOG.error("hvd rank {} of {} failed", topo.rank, topo.size, e);
        throw new RuntimeException("hvd rank " + topo.rank + " failed: " + e, e);
      } finally {
        closeQuietly(ctx, topo.rank);
      }
      return scala.jdk.javaapi.CollectionConverters.asScala(
          Collections.singletonList(new Ranked<>(topo.rank, result)).iterator());
    }

    // Closes the task's context (again: closing is idempotent); a failure is
    // logged, never thrown: it must not replace the function's own error.
    private static void closeQuietly(HvdContext ctx, int rank) {
      try {
        ctx.close();
      } catch (Throwable t) {
        LOG.warn("hvd rank {}: closing the context failed", rank, t);
      }
    }
  }
}
