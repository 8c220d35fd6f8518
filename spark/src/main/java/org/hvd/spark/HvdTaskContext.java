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

  /** The explicit hvd context of this job (closed by the runner). */
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
