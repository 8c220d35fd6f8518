package org.hvd.spark;

import org.apache.spark.BarrierTaskContext;
import org.hvd.HvdContext;

/** What a {@link TrainFunction} gets: its rank, the job's hvd context, Spark's task context. */
public final class HvdTaskContext {
  private final HvdContext hvd;
  private final BarrierTaskContext task;
  private final Topology topology;

  HvdTaskContext(HvdContext hvd, BarrierTaskContext task, Topology topology) {
    this.hvd = hvd;
    this.task = task;
    this.topology = topology;
  }

  /**
   * Always true: the runner binds this job's context to the task's thread
   * ({@link org.hvd.Hvd#bind}) for the duration of the function, wherever the
   * task runs, so {@code Hvd.rank()}, {@code Hvd.allreduce(...)}, and
   * {@code Hvd.init()} / {@code Hvd.shutdown()} pairs (which only check and
   * count references there) work as under hvdrun, and {@code Hvd.context()}
   * is {@link #hvd()}. Threads the function starts are not bound.
   *
   * @deprecated the static API is bound in every task; nothing needs to ask.
   */
  @Deprecated
  public boolean staticApiBound() {
    return true;
  }

  /**
   * This job's hvd context (closed by the runner when the function returns);
   * the same one {@code Hvd.context()} gives on the task's thread.
   */
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
