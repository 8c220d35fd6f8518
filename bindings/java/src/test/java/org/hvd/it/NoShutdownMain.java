package org.hvd.it;

import org.hvd.Hvd;
import org.hvd.ReduceOp;

/**
 * Initializes, runs one allreduce and returns without Hvd.shutdown(): the
 * JVM's exit must still shut hvd down (under mpirun: finalize MPI), so the
 * launcher sees a clean exit. Prints "rank R: sum S" for the test to check.
 */
public final class NoShutdownMain {
  private NoShutdownMain() {}

  public static void main(String[] args) {
    Hvd.init();
    float[] s = Hvd.allreduce("no.shutdown", new float[] {Hvd.rank() + 1}, ReduceOp.SUM);
    System.out.println("rank " + Hvd.rank() + ": sum " + (int) s[0]);
  }
}
