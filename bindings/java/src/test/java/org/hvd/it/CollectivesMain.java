package org.hvd.it;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.util.Arrays;
import org.hvd.Hvd;
import org.hvd.HvdConfig;
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
      // HVD_TEST_JAVA_TRANSPORT: the transport chosen through the API
      // (HvdConfig), as a program would, rather than by the launcher.
      String transport = System.getenv("HVD_TEST_JAVA_TRANSPORT");
      if (transport == null) {
        Hvd.init();
      } else {
        Hvd.init(HvdConfig.builder().transport(transport).build());
      }
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
      // alltoall: rank r sends (r + 2j + 1) % (n + 1) elements to rank j (uneven, with
      // zeros); element k of that chunk is 100r + 10j + k.
      long[] sp = new long[n];
      for (int j = 0; j < n; ++j) sp[j] = (r + 2 * j + 1) % (n + 1);
      int sendLen = (int) Arrays.stream(sp).sum();
      int[] src = new int[sendLen];
      for (int j = 0, p = 0; j < n; ++j) for (int k = 0; k < sp[j]; ++k) src[p++] = 100 * r + 10 * j + k;
      long[] wantSplits = new long[n];
      for (int s = 0; s < n; ++s) wantSplits[s] = (s + 2 * r + 1) % (n + 1);
      int[] wantA2a = new int[(int) Arrays.stream(wantSplits).sum()];
      for (int s = 0, p = 0; s < n; ++s) for (int k = 0; k < wantSplits[s]; ++k) wantA2a[p++] = 100 * s + 10 * r + k;
      int[] a2a = Hvd.alltoall("a2a", src, sp);
      check(Arrays.equals(a2a, wantA2a), "alltoall int " + Arrays.toString(a2a));
      double[] srcD = Arrays.stream(src).asDoubleStream().map(v -> v + 0.25).toArray();
      HvdHandle<double[]> ha = Hvd.alltoallAsync("a2a.d", srcD, sp);
      double[] a2aD = ha.await();
      check(a2aD.length == wantA2a.length, "alltoall double length " + a2aD.length);
      for (int k = 0; k < a2aD.length; ++k) {
        check(Math.abs(a2aD[k] - (wantA2a[k] + 0.25)) <= 1e-12, "alltoall double " + Arrays.toString(a2aD));
      }
      check(Arrays.equals(ha.receivedSplits(), wantSplits), "alltoall receivedSplits " + Arrays.toString(ha.receivedSplits()));
      long[] a2aL = Hvd.alltoall("a2a.l", Arrays.stream(src).asLongStream().map(v -> v + (1L << 40)).toArray(), sp);
      check(Arrays.equals(a2aL, Arrays.stream(wantA2a).asLongStream().map(v -> v + (1L << 40)).toArray()),
          "alltoall long " + Arrays.toString(a2aL));
      float[] srcF = new float[src.length];
      for (int k = 0; k < src.length; ++k) srcF[k] = src[k] - 0.5f;
      float[] a2aF = Hvd.alltoall("a2a.f", srcF, sp);
      check(a2aF.length == wantA2a.length, "alltoall float length");
      for (int k = 0; k < a2aF.length; ++k) {
        check(Math.abs(a2aF[k] - (wantA2a[k] - 0.5f)) <= 1e-5f, "alltoall float " + Arrays.toString(a2aF));
      }

      // reducescatter of 2n + 1 elements: rank r keeps its block (rank 0 one extra).
      int len = 2 * n + 1;
      int off = r == 0 ? 0 : 2 * r + 1, cnt = r == 0 ? 3 : 2;
      float[] rsIn = new float[len];
      long[] rsInL = new long[len];
      for (int x = 0; x < len; ++x) {
        rsIn[x] = (r + 1) * (x + 1);
        rsInL[x] = (long) r * (x + 1) << 33;
      }
      float[] rs = Hvd.reducescatter("rs", rsIn, ReduceOp.SUM);
      check(rs.length == cnt, "reducescatter float length " + rs.length);
      for (int y = 0; y < cnt; ++y) {
        check(Math.abs(rs[y] - tri * (off + y + 1)) <= 1e-5f * tri * len, "reducescatter float " + Arrays.toString(rs));
      }
      long[] rsL = Hvd.reducescatterAsync("rs.l", rsInL, ReduceOp.MAX).await();
      check(rsL.length == cnt, "reducescatter long length " + rsL.length);
      for (int y = 0; y < cnt; ++y) {
        check(rsL[y] == (long) (n - 1) * (off + y + 1) << 33, "reducescatter long " + Arrays.toString(rsL));
      }
      int[] rsI = Hvd.reducescatter("rs.i", new int[] {r, -r}, ReduceOp.SUM);
      int[] wantI = r == 0 ? new int[] {tri - n} : r == 1 ? new int[] {-(tri - n)} : new int[0];
      check(Arrays.equals(rsI, wantI), "reducescatter int (an empty block on rank 2) " + Arrays.toString(rsI));
      double[] rsD = Hvd.reducescatter("rs.d", new double[] {r + 0.5, r, 1, 2, 3, 4}, ReduceOp.AVERAGE);
      double[] allD = {n / 2.0, (n - 1) / 2.0, 1, 2, 3, 4};
      check(Arrays.equals(rsD, Arrays.copyOfRange(allD, r * 6 / n, (r + 1) * 6 / n)),
          "reducescatter double average " + Arrays.toString(rsD));

      Hvd.barrier();
      System.out.println("rank " + r + "/" + n + ": all checks passed");
      Hvd.shutdown();
    } catch (Throwable t) {
      t.printStackTrace();
      System.exit(1);
    }
  }
}
