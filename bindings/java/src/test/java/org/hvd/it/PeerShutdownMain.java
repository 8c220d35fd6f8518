package org.hvd.it;

import org.hvd.Hvd;
import org.hvd.HvdException;
import org.hvd.ReduceOp;

/**
 * Rank 1 shuts down while rank 0 waits in an allreduce rank 1 never joins:
 * rank 0 must get an HvdException (not hang) and prints its status.
 */
public final class PeerShutdownMain {
  private PeerShutdownMain() {}

  public static void main(String[] args) throws Exception {
    Hvd.init();
    Hvd.barrier();
    if (Hvd.rank() != 0) {
      Thread.sleep(500);
      Hvd.shutdown();
      return;
    }
    long t0 = System.nanoTime();
    try {
      Hvd.allreduce("never", new float[] {1}, ReduceOp.SUM);
      System.out.println("rank 0: allreduce completed unexpectedly");
      System.exit(1);
    } catch (HvdException e) {
      System.out.printf("rank 0: %s after %.1f s: %s%n", HvdException.statusName(e.status()),
          (System.nanoTime() - t0) / 1e9, e.libraryMessage());
    }
    Hvd.shutdown();
  }
}
