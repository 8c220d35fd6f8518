package org.hvd.spark;

import org.apache.spark.BarrierTaskContext;
import org.hvd.HvdContext;

/** What a {@link TrainFunction} gets: its rank, the job's hvd context, Spark's task context. */
public final class HvdTaskContext {
  private final HvdContext hvd;
  private final BarrierTaskContext task;
  private final Topology topology;
  private final boolean staticApiBound;

  HvdTaskContext(HvdContext hvd, BarrierTaskContext task, Topology topology, boolean staticApiBound) {
    this.hvd = hvd;
    this.task = task;
    this.topology = topology;
    this.staticApiBound = staticApiBound;
  }

  /**
   * True when the static {@link org.hvd.Hvd} API reaches this job's context
   * for the duration of the function (this task is the job's only rank in its
   * JVM): {@code Hvd.rank()}, {@code Hvd.allreduce(...)}, and {@code Hvd.init()}
   * / {@code Hvd.shutdown()} pairs (which only count references) then work as
   * under hvdrun. False where several ranks share the JVM (local mode,
   * executors with several cores): use {@link #hvd()} there; {@code Hvd.init()}
   * would make a world of one.
   */
  public boolean staticApiBound() {
    return staticApiBound;
  }

  /** This job's hvd context (closed by the runner): always valid, bound or not. */
  public HvdContext hvd() {
    return hvd;
  }

  /** Spark's barrier task context (allGather, barrier, task infos). */
  public BarrierTaskContext barrierContext() {
    return task;
  }

  /** The partition id. */
  public int rank() {
    return topology.rank;
  }

  /** The number of partitions (barrier tasks). */
  public int size() {
    return topology.size;
  }

  /** Index among this job's tasks on the same host. */
  public int localRank() {
    return topology.localRank;
  }

  public int localSize() {
    return topology.localSize;
  }

  public int crossRank() {
    return topology.crossRank;
  }

  public int crossSize() {
    return topology.crossSize;
  }
}
