package org.hvd.it;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.IntStream;
import org.hvd.Hvd;
import org.hvd.HvdContext;
import org.hvd.HvdException;
import org.hvd.ReduceOp;

/**
 * One rank of a job started by hvdrun or mpirun (MultiProcessTest, 3-4
 * processes): process sets of the default context. split(rank % 2, -rank),
 * the lists {0..n-2} and {0, n-1} (overlapping) and split with
 * UNDEFINED_COLOR; every collective of SetChecks in all of them and the
 * parent at once, under the same names; a bad list and mismatched lists
 * refused on every rank; a nested set refused; closing. Prints
 * "rank R/N: process set checks passed"; exits 1 on the first failed check.
 */
public final class ProcessSetMain {
  private ProcessSetMain() {}

  static void check(boolean ok, String what) {
    SetChecks.check(ok, what);
  }

  /** Runs call, which must throw HvdException with status; prints and returns its message. */
  static String refused(int rank, int status, Runnable call) {
    try {
      call.run();
    } catch (HvdException e) {
      check(e.status() == status, "status " + e.getMessage());
      System.out.println("rank " + rank + ": refused: " + e.getMessage());
      return e.getMessage();
    }
    throw new AssertionError("no HvdException (want status " + status + ")");
  }

  public static void main(String[] args) {
    try {
      Hvd.init();
      final int r = Hvd.rank(), n = Hvd.size();
      check(n >= 3, "needs 3 or more ranks, got " + n);
      HvdContext world = Hvd.context();
      int[] colors = new int[n], keys = new int[n];
      for (int q = 0; q < n; ++q) {
        colors[q] = q % 2;
        keys[q] = -q;
      }
      int[] parityMembers = SetChecks.membersOf(colors, keys, r % 2);
      int[] firstMembers = IntStream.range(0, n - 1).toArray();
      int[] endMembers = {0, n - 1};

      HvdContext parity = world.split(r % 2, -r);
      HvdContext first = world.processSet(firstMembers);
      HvdContext ends = world.processSet(endMembers);
      HvdContext none = world.split(HvdContext.UNDEFINED_COLOR, r);
      check(none == null, "UNDEFINED_COLOR gives null");
      check(parity != null && Arrays.equals(parity.parentRanks(), parityMembers),
          "parity set " + (parity == null ? "null" : Arrays.toString(parity.parentRanks())));
      check((first != null) == (r < n - 1), "membership of " + Arrays.toString(firstMembers));
      check((ends != null) == (r == 0 || r == n - 1), "membership of " + Arrays.toString(endMembers));
      System.out.println("rank " + r + ": parity set rank " + parity.rank() + " of "
          + Arrays.toString(parity.parentRanks()));

      List<SetChecks.Check> checks = new ArrayList<>();
      checks.addAll(SetChecks.submit(parity, parityMembers, "parity", r));
      if (first != null) checks.addAll(SetChecks.submit(first, firstMembers, "first", 2 * r));
      if (ends != null) checks.addAll(SetChecks.submit(ends, endMembers, "ends", 3 * r));
      checks.addAll(SetChecks.submit(world, IntStream.range(0, n).toArray(), "world", 5 * r));
      SetChecks.runAll(checks);

      // Bad input: every rank is refused together.
      String m = refused(r, HvdException.INVALID_ARGUMENT,
          () -> world.processSet(r == 1 ? new int[] {1, 0} : new int[] {0, 1}));
      check(m.contains("rank 1 passed the process-set rank list [1, 0]: it is not sorted ascending"), m);
      m = refused(r, HvdException.MISMATCH,
          () -> world.processSet(r == n - 1 ? new int[] {0, 2} : new int[] {0, 1}));
      check(m.contains("rank " + (n - 1) + " listed [0, 2]"), m);
      m = refused(r, HvdException.UNSUPPORTED, () -> parity.split(0, 0));

      // Closing: collective over each set's members only.
      if (ends != null) ends.close();
      if (first != null) {
        long want = (long) (n - 1) * (n - 2) / 2;
        long[] got = first.allreduce("after", new long[] {r}, ReduceOp.SUM);
        check(got[0] == want, "first after ends closed: " + got[0]);
        first.close();
      }
      parity.close();
      check(parity.isClosed(), "closed");
      long[] all = world.allreduce("after", new long[] {1}, ReduceOp.SUM);
      check(all[0] == n, "world after the sets closed: " + all[0]);

      System.out.println("rank " + r + "/" + n + ": process set checks passed");
      Hvd.shutdown();
    } catch (Throwable t) {
      t.printStackTrace();
      System.exit(1);
    }
  }
}
