package org.hvd.it;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.util.Arrays;
import org.hvd.Hvd;
import org.hvd.HvdHandle;
import org.hvd.ReduceOp;

/**
 * One rank of a job started by hvdrun (MultiProcessTest): checks every
 * collective with exact values on the default context, prints
 * "rank R/N: all checks passed", exits 1 on the first failed check.
 */
public final class CollectivesMain {
  private CollectivesMain() {}

  static void check(boolean ok, String what) {
    if (!ok) throw new AssertionError(what);
  }

  public static void main(String[] args) {
    try {
      Hvd.init();
      int r = Hvd.rank(), n = Hvd.size();
      check(r == Integer.parseInt(System.getenv("HVD_RANK")), "rank from hvdrun");
      check(n == Integer.parseInt(System.getenv("HVD_SIZE")), "size from hvdrun");
      check(Hvd.localRank() == r && Hvd.localSize() == n, "local topology (one host)");
      int tri = n * (n + 1) / 2;

      float[] f = Hvd.allreduce("f", new float[] {r + 1, 0.5f}, ReduceOp.SUM);
      check(Arrays.equals(f, new float[] {tri, 0.5f * n}), "float sum " + Arrays.toString(f));
      double[] d = Hvd.allreduce("d", new double[] {r}, ReduceOp.AVERAGE);
      check(d[0] == (n - 1) / 2.0, "double average " + d[0]);
      int[] i = Hvd.allreduce("i", new int[] {r, -r}, ReduceOp.MAX);
      check(i[0] == n - 1 && i[1] == 0, "int max " + Arrays.toString(i));
      long[] l = Hvd.allreduce("l", new long[] {(1L << 40) + r}, ReduceOp.SUM);
      check(l[0] == n * (1L << 40) + (long) n * (n - 1) / 2, "long sum " + l[0]);

      long[] mine = new long[r + 1];
      Arrays.fill(mine, r);
      long[] all = Hvd.allgather("g", mine);
      long[] want = new long[tri];
      for (int k = 0, p = 0; k < n; ++k) for (int j = 0; j <= k; ++j) want[p++] = k;
      check(Arrays.equals(all, want), "allgather " + Arrays.toString(all));

      double[] b = Hvd.broadcast("b", new double[] {r * 10, r}, n - 1);
      check(b[0] == (n - 1) * 10 && b[1] == n - 1, "broadcast " + Arrays.toString(b));

      DoubleBuffer buf = ByteBuffer.allocateDirect(3 * 8).order(ByteOrder.nativeOrder()).asDoubleBuffer();
      buf.put(0, r).put(1, 1).put(2, -r);
      Hvd.allreduce("direct", buf, buf, ReduceOp.SUM);
      check(buf.get(0) == tri - n && buf.get(1) == n && buf.get(2) == -(tri - n), "direct buffer");

      // Different submission order on each rank; matched by name.
      @SuppressWarnings("unchecked")
      HvdHandle<int[]>[] hs = new HvdHandle[4];
      for (int k = 0; k < 4; ++k) {
        int t = (k + r) % 4;
        hs[t] = Hvd.allreduceAsync("t" + t, new int[] {t}, ReduceOp.SUM);
      }
      for (int t = 0; t < 4; ++t) check(hs[t].await()[0] == t * n, "async t" + t);

      float[][] g = Hvd.groupedAllreduce(new String[] {"gw", "gb"}, new float[][] {{1, r}, {2}}, ReduceOp.SUM);
      check(g[0][0] == n && g[0][1] == tri - n && g[1][0] == 2 * n, "grouped");
      Hvd.barrier();
      System.out.println("rank " + r + "/" + n + ": all checks passed");
      Hvd.shutdown();
    } catch (Throwable t) {
      t.printStackTrace();
      System.exit(1);
    }
  }
}
