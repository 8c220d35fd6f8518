package org.hvd.spark;

import java.util.Base64;
import org.apache.spark.BarrierTaskContext;
import org.hvd.OobAllgather;

/**
 * hvd's out-of-band allgather over {@link BarrierTaskContext#allGather}: bytes
 * travel as Base64 strings, and Spark returns them in partition (= rank) order.
 * Rank 0's context hosts the rendezvous store and publishes its address and
 * the job's secret through this call; everyone else connects to it.
 */
final class BarrierOob implements OobAllgather {
  private final BarrierTaskContext task;

  BarrierOob(BarrierTaskContext task) {
    this.task = task;
  }

  @Override
  public byte[] allgather(byte[] mine) {
    String[] all = task.allGather(Base64.getEncoder().encodeToString(mine));
    byte[] out = new byte[mine.length * all.length];
    for (int r = 0; r < all.length; ++r) {
      byte[] b = Base64.getDecoder().decode(all[r]);
      if (b.length != mine.length) {
        throw new IllegalStateException("task " + r + " sent " + b.length + " bytes to the hvd "
            + "bootstrap, this task " + mine.length + " (mixed hvd versions?)");
      }
      System.arraycopy(b, 0, out, r * mine.length, b.length);
    }
    return out;
  }
}
