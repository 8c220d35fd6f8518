package org.hvd.it;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Supplier;
import org.hvd.HvdContext;
import org.hvd.HvdHandle;
import org.hvd.ReduceOp;

/**
 * Collectives inside a process set (or any context) with exact expected
 * values, shared by ProcessSetTest (ranks as threads) and ProcessSetMain
 * (ranks as processes). Every value depends on the members' parent ranks, so
 * a result computed over the wrong ranks, or in the wrong order, fails.
 *
 * <p>{@link #submit} starts every operation asynchronously and returns the
 * checks to run afterwards, so operations of several sets (and the parent)
 * with the same names can be in flight at once. Integers are compared
 * exactly; floats within {@link #FLOAT_TOL} and doubles within
 * {@link #DOUBLE_TOL} (relative to max(1, |expected|)): the inputs (tenths)
 * are not exact in binary, and the reduction order is the library's.
 */
public final class SetChecks {
  public static final float FLOAT_TOL = 1e-5f;
  public static final double DOUBLE_TOL = 1e-12;
  /** Every wait is bounded: seconds per operation. */
  public static final double WAIT_S = 60;

  private SetChecks() {}

  /** A check to run once its operation was submitted. */
  public interface Check {
    void run();
  }

  public static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  static void near(double want, double got, double tol, String what) {
    check(Math.abs(want - got) <= tol * Math.max(1.0, Math.abs(want)),
        what + ": got " + got + ", want " + want + " (tolerance " + tol + ")");
  }

  /** Rows set rank r sends to set rank j in alltoall: uneven, zeros included. */
  static int split(int r, int j, int m) {
    return (r + 2 * j) % m;
  }

  /** The first element of set rank r's reducescatter block, for len elements over m ranks. */
  static int blockStart(int r, int len, int m) {
    int base = len / m, extra = len % m;
    return r * base + Math.min(r, extra);
  }

  static int blockLength(int r, int len, int m) {
    return len / m + (r < len % m ? 1 : 0);
  }

  /**
   * Submits allreduce (int, long, float, double; SUM, MAX, AVERAGE), allgather
   * (int of per-rank lengths, float), broadcast (root the set's last rank and
   * rank 0), alltoall with uneven splits, reducescatter (int SUM, float
   * AVERAGE) and a barrier on c, where this rank is c.rank() of
   * members.length and members are the parent ranks of c's ranks. The order
   * of submission is rotated by {@code rotate}, so ranks can submit in
   * different orders (matched by name). Returns the checks, to run after
   * everything (in other sets too) was submitted.
   */
  public static List<Check> submit(HvdContext c, int[] members, String label, int rotate) {
    final int m = members.length;
    final int r = c.rank();
    check(c.size() == m, label + ": size " + c.size() + ", want " + m);
    check(Arrays.equals(c.parentRanks(), members),
        label + ": parentRanks " + Arrays.toString(c.parentRanks()) + ", want " + Arrays.toString(members));
    final int p = members[r];
    long sumP = 0, sumP2 = 0;
    int maxP = Integer.MIN_VALUE;
    for (int q : members) {
      sumP += q;
      sumP2 += (long) q * q;
      maxP = Math.max(maxP, q);
    }
    final long fSumP = sumP, fSumP2 = sumP2;
    final int fMaxP = maxP;

    List<Supplier<Check>> ops = new ArrayList<>();
    // allreduce
    ops.add(() -> {
      HvdHandle<int[]> h = c.allreduceAsync("ar.int", new int[] {p, 1, -p * p}, ReduceOp.SUM);
      return () -> {
        int[] got = h.await(WAIT_S);
        check(Arrays.equals(got, new int[] {(int) fSumP, m, (int) -fSumP2}),
            label + ": int SUM " + Arrays.toString(got));
      };
    });
    ops.add(() -> {
      HvdHandle<long[]> h = c.allreduceAsync("ar.long", new long[] {(1L << 40) + p}, ReduceOp.SUM);
      return () -> {
        long[] got = h.await(WAIT_S);
        check(got[0] == m * (1L << 40) + fSumP, label + ": long SUM " + got[0]);
      };
    });
    ops.add(() -> {
      HvdHandle<int[]> h = c.allreduceAsync("ar.max", new int[] {p, -p}, ReduceOp.MAX);
      int minP = Arrays.stream(members).min().getAsInt();
      return () -> {
        int[] got = h.await(WAIT_S);
        check(got[0] == fMaxP && got[1] == -minP, label + ": int MAX " + Arrays.toString(got));
      };
    });
    ops.add(() -> {
      float[] mine = {0.1f * p, p + 0.5f};
      HvdHandle<float[]> h = c.allreduceAsync("ar.float", mine, ReduceOp.AVERAGE);
      double w0 = 0, w1 = 0;
      for (int q : members) {
        w0 += 0.1f * q;
        w1 += q + 0.5f;
      }
      final double want0 = w0 / m, want1 = w1 / m;
      return () -> {
        float[] got = h.await(WAIT_S);
        check(got.length == 2, label + ": float AVERAGE length " + got.length);
        near(want0, got[0], FLOAT_TOL, label + ": float AVERAGE [0]");
        near(want1, got[1], FLOAT_TOL, label + ": float AVERAGE [1]");
      };
    });
    ops.add(() -> {
      HvdHandle<double[]> h = c.allreduceAsync("ar.double", new double[] {p / 3.0}, ReduceOp.SUM);
      double w = 0;
      for (int q : members) w += q / 3.0;
      final double want = w;
      return () -> near(want, h.await(WAIT_S)[0], DOUBLE_TOL, label + ": double SUM");
    });
    // allgather: set rank k contributes k + 1 copies of its parent rank
    ops.add(() -> {
      int[] mine = new int[r + 1];
      Arrays.fill(mine, p);
      HvdHandle<int[]> h = c.allgatherAsync("ag.int", mine);
      int[] want = new int[m * (m + 1) / 2];
      for (int k = 0, at = 0; k < m; ++k) for (int i = 0; i <= k; ++i) want[at++] = members[k];
      return () -> {
        int[] got = h.await(WAIT_S);
        check(Arrays.equals(got, want), label + ": allgather int " + Arrays.toString(got)
            + ", want " + Arrays.toString(want));
      };
    });
    ops.add(() -> {
      HvdHandle<float[]> h = c.allgatherAsync("ag.float", new float[] {p + 0.1f});
      return () -> {
        float[] got = h.await(WAIT_S);
        check(got.length == m, label + ": allgather float length " + got.length);
        for (int k = 0; k < m; ++k) near(members[k] + 0.1f, got[k], FLOAT_TOL, label + ": allgather float");
      };
    });
    // broadcast: roots are set ranks
    ops.add(() -> {
      HvdHandle<int[]> h = c.broadcastAsync("bc.int", new int[] {p * 10, r}, m - 1);
      return () -> {
        int[] got = h.await(WAIT_S);
        check(Arrays.equals(got, new int[] {members[m - 1] * 10, m - 1}),
            label + ": broadcast from set rank " + (m - 1) + ": " + Arrays.toString(got));
      };
    });
    ops.add(() -> {
      HvdHandle<double[]> h = c.broadcastAsync("bc.double", new double[] {p + 0.3}, 0);
      return () -> near(members[0] + 0.3, h.await(WAIT_S)[0], DOUBLE_TOL, label + ": broadcast double");
    });
    // alltoall: split(r, j) elements 1000 * p + 10 * j + k to set rank j
    ops.add(() -> {
      long[] splits = new long[m];
      List<Integer> send = new ArrayList<>();
      for (int j = 0; j < m; ++j) {
        splits[j] = split(r, j, m);
        for (int k = 0; k < splits[j]; ++k) send.add(1000 * p + 10 * j + k);
      }
      int[] data = send.stream().mapToInt(Integer::intValue).toArray();
      HvdHandle<int[]> h = c.alltoallAsync("a2a.int", data, splits);
      List<Integer> recv = new ArrayList<>();
      long[] wantSplits = new long[m];
      for (int s = 0; s < m; ++s) {
        wantSplits[s] = split(s, r, m);
        for (int k = 0; k < wantSplits[s]; ++k) recv.add(1000 * members[s] + 10 * r + k);
      }
      int[] want = recv.stream().mapToInt(Integer::intValue).toArray();
      return () -> {
        int[] got = h.await(WAIT_S);
        check(Arrays.equals(got, want), label + ": alltoall " + Arrays.toString(got) + ", want "
            + Arrays.toString(want));
        check(Arrays.equals(h.receivedSplits(), wantSplits),
            label + ": alltoall received splits " + Arrays.toString(h.receivedSplits()));
      };
    });
    // reducescatter: 2m + 1 elements, element k = p * k + 1
    ops.add(() -> {
      int len = 2 * m + 1;
      int[] data = new int[len];
      for (int k = 0; k < len; ++k) data[k] = p * k + 1;
      HvdHandle<int[]> h = c.reducescatterAsync("rs.int", data, ReduceOp.SUM);
      int start = blockStart(r, len, m), n = blockLength(r, len, m);
      int[] want = new int[n];
      for (int i = 0; i < n; ++i) want[i] = (int) (fSumP * (start + i) + m);
      return () -> {
        int[] got = h.await(WAIT_S);
        check(Arrays.equals(got, want), label + ": reducescatter int " + Arrays.toString(got)
            + ", want " + Arrays.toString(want));
      };
    });
    ops.add(() -> {
      int len = m + 2;
      float[] data = new float[len];
      for (int k = 0; k < len; ++k) data[k] = 0.1f * p + k;
      HvdHandle<float[]> h = c.reducescatterAsync("rs.float", data, ReduceOp.AVERAGE);
      int start = blockStart(r, len, m), n = blockLength(r, len, m);
      double[] want = new double[n];
      for (int i = 0; i < n; ++i) {
        double s = 0;
        for (int q : members) s += 0.1f * q + (start + i);
        want[i] = s / m;
      }
      return () -> {
        float[] got = h.await(WAIT_S);
        check(got.length == n, label + ": reducescatter float length " + got.length + ", want " + n);
        for (int i = 0; i < n; ++i) near(want[i], got[i], FLOAT_TOL, label + ": reducescatter float");
      };
    });
    ops.add(() -> {
      HvdHandle<Void> h = c.barrierAsync();
      return () -> h.await(WAIT_S);
    });

    List<Check> checks = new ArrayList<>();
    int k = ops.size();
    for (int i = 0; i < k; ++i) checks.add(ops.get(Math.floorMod(i + rotate, k)).get());
    return checks;
  }

  /** Runs the checks (each waits at most WAIT_S for its operation). */
  public static void runAll(List<Check> checks) {
    for (Check c : checks) c.run();
  }

  /** The parent ranks whose color is color: split(color, key) orders them by (key, parent rank). */
  public static int[] membersOf(int[] colors, int[] keys, int color) {
    List<int[]> v = new ArrayList<>();
    for (int q = 0; q < colors.length; ++q) if (colors[q] == color) v.add(new int[] {keys[q], q});
    v.sort((a, b) -> a[0] != b[0] ? Integer.compare(a[0], b[0]) : Integer.compare(a[1], b[1]));
    return v.stream().mapToInt(a -> a[1]).toArray();
  }
}
