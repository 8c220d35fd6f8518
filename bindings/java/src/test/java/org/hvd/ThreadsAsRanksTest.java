package org.hvd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.LongStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Several explicit contexts in one JVM (as in Spark local mode), bootstrapped
 * through an in-JVM out-of-band allgather; ranks talk over Gloo on loopback.
 */
@Timeout(120)
class ThreadsAsRanksTest {
  @BeforeAll
  static void needsGloo() {
    assumeTrue(Files.isRegularFile(Paths.get(Hvd.libraryFolder()).resolve("libhvd_transport_gloo.so")),
        "hvd was built without the Gloo transport");
  }

  @Test
  void collectivesAcrossThreeRanks() throws Exception {
    final int n = 3;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      assertEquals(rank, ctx.rank());
      assertEquals(n, ctx.size());
      assertEquals(rank, ctx.localRank());
      assertEquals(n, ctx.localSize());
      assertEquals("gloo", ctx.transport());

      float[] f = {rank + 1, 10f * (rank + 1)};
      assertArrayEquals(new float[] {6, 60}, ctx.allreduce("sum", f, ReduceOp.SUM));
      assertArrayEquals(new double[] {2.0}, ctx.allreduce("avg", new double[] {rank + 1}, ReduceOp.AVERAGE));
      assertArrayEquals(new int[] {0, -2}, ctx.allreduce("min", new int[] {rank, -rank}, ReduceOp.MIN));
      assertArrayEquals(new int[] {2}, ctx.allreduce("max", new int[] {rank}, ReduceOp.MAX));
      assertArrayEquals(new long[] {3L << 40}, ctx.allreduce("long", new long[] {1L << 40}, ReduceOp.SUM));

      // Lengths differ per rank: rank r sends r + 1 copies of r.
      int[] mine = new int[rank + 1];
      java.util.Arrays.fill(mine, rank);
      assertArrayEquals(new int[] {0, 1, 1, 2, 2, 2}, ctx.allgather("gather", mine));

      assertArrayEquals(new double[] {2, 4}, ctx.broadcast("bcast", new double[] {rank, 2 * rank}, 2));

      // Zero-copy direct buffers, in place.
      FloatBuffer buf = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder()).asFloatBuffer();
      for (int i = 0; i < 4; ++i) buf.put(i, rank * 4 + i);
      assertSame(buf, ctx.allreduce("direct", buf, buf, ReduceOp.SUM));
      for (int i = 0; i < 4; ++i) assertEquals(3 * i + 12, buf.get(i), 0.0);

      // Submitted in a different order on each rank: matched by name.
      String[] names = {"a", "b", "c"};
      @SuppressWarnings("unchecked")
      HvdHandle<float[]>[] hs = new HvdHandle[3];
      for (int k = 0; k < 3; ++k) {
        int i = (k + rank) % 3;
        hs[i] = ctx.allreduceAsync(names[i], new float[] {i * 100 + rank}, ReduceOp.SUM);
      }
      for (int i = 0; i < 3; ++i) assertArrayEquals(new float[] {i * 300 + 3}, hs[i].await());

      float[][] g = ctx.groupedAllreduce(new String[] {"g.w", "g.b"},
          new float[][] {{rank, 1}, {2}}, ReduceOp.SUM);
      assertArrayEquals(new float[] {3, 3}, g[0]);
      assertArrayEquals(new float[] {6}, g[1]);
      ctx.barrier();
      return "ok";
    });
    assertEquals(List.of("ok", "ok", "ok"), ok);
  }

  // ---- alltoall and reducescatter ----------------------------------------------

  /** Tolerances for floating-point results (the values used are exact in binary). */
  static final float FLOAT_TOL = 1e-5f;
  static final double DOUBLE_TOL = 1e-12;

  /** Rows rank r sends to rank j: uneven, one zero per rank (n = 3: {0,2,1}, {1,0,2}, {2,1,0}). */
  static int split(int r, int j, int n) {
    return (r + 2 * j) % n;
  }

  /** Element k of what rank r sends to rank j. */
  static long value(int r, int j, int k) {
    return 100L * r + 10L * j + k;
  }

  static long[] sendSplits(int r, int n) {
    long[] s = new long[n];
    for (int j = 0; j < n; ++j) s[j] = split(r, j, n);
    return s;
  }

  static long[] recvSplits(int j, int n) {
    long[] s = new long[n];
    for (int r = 0; r < n; ++r) s[r] = split(r, j, n);
    return s;
  }

  static long[] sendValues(int r, int n) {
    return LongStream.range(0, n).flatMap(j -> LongStream.range(0, split(r, (int) j, n))
        .map(k -> value(r, (int) j, (int) k))).toArray();
  }

  static long[] recvValues(int j, int n) {
    return LongStream.range(0, n).flatMap(r -> LongStream.range(0, split((int) r, j, n))
        .map(k -> value((int) r, j, (int) k))).toArray();
  }

  static int[] ints(long[] a) {
    return LongStream.of(a).mapToInt(v -> (int) v).toArray();
  }

  static float[] floats(long[] a, float add) {
    float[] f = new float[a.length];
    for (int i = 0; i < a.length; ++i) f[i] = a[i] + add;
    return f;
  }

  static double[] doubles(long[] a, double add) {
    return LongStream.of(a).mapToDouble(v -> v + add).toArray();
  }

  @Test
  void alltoallWithUnevenSplitsForEveryArrayType() throws Exception {
    final int n = 3;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      long[] sp = sendSplits(rank, n);
      long[] src = sendValues(rank, n);
      long[] want = recvValues(rank, n);
      long[] wantSplits = recvSplits(rank, n);
      assertEquals(0, sp[rank], "every rank sends a zero split (to itself)");

      assertArrayEquals(ints(want), ctx.alltoall("a2a.int", ints(src), sp));
      long big = 1L << 40;
      long[] bigSrc = LongStream.of(src).map(v -> v + big).toArray();
      HvdHandle<long[]> hl = ctx.alltoallAsync("a2a.long", bigSrc, sp);
      assertArrayEquals(LongStream.of(want).map(v -> v + big).toArray(), hl.await());
      assertArrayEquals(wantSplits, hl.receivedSplits());
      assertArrayEquals(floats(want, 0.25f), ctx.alltoall("a2a.float", floats(src, 0.25f), sp),
          FLOAT_TOL);
      HvdHandle<double[]> hd = ctx.alltoallAsync("a2a.double", doubles(src, -0.5), sp);
      assertArrayEquals(doubles(want, -0.5), hd.await(), DOUBLE_TOL);
      assertArrayEquals(wantSplits, hd.receivedSplits());
      HvdHandle<float[]> hf = ctx.alltoallAsync("a2a.float.async", floats(src, 1.5f), sp);
      assertArrayEquals(floats(want, 1.5f), hf.await(), FLOAT_TOL);
      HvdHandle<int[]> hi = ctx.alltoallAsync("a2a.int.async", ints(src), sp);
      assertArrayEquals(ints(want), hi.await());
      assertArrayEquals(wantSplits, hi.receivedSplits());
      assertArrayEquals(want, ctx.alltoall("a2a.long.sync", src, sp));
      assertArrayEquals(doubles(want, 2), ctx.alltoall("a2a.double.sync", doubles(src, 2), sp),
          DOUBLE_TOL);

      // null splits: an even split (2 elements to every rank).
      int[] even = new int[2 * n];
      for (int k = 0; k < even.length; ++k) even[k] = rank * 1000 + k;
      HvdHandle<int[]> he = ctx.alltoallAsync("a2a.even", even, null);
      int[] got = he.await();
      for (int r = 0; r < n; ++r) {
        assertEquals(r * 1000 + 2 * rank, got[2 * r]);
        assertEquals(r * 1000 + 2 * rank + 1, got[2 * r + 1]);
      }
      assertArrayEquals(new long[] {2, 2, 2}, he.receivedSplits());

      // Everything goes to rank 0: rank 0 sends no rows at all, ranks 1 and 2 receive none.
      long[] toZero = new long[n];
      toZero[0] = rank;
      long[] mine = LongStream.range(0, rank).map(k -> 10L * rank + k).toArray();
      HvdHandle<long[]> hz = ctx.alltoallAsync("a2a.to.zero", mine, toZero);
      long[] gotZero = hz.await();
      if (rank == 0) {
        assertArrayEquals(new long[] {10, 20, 21}, gotZero);
        assertArrayEquals(new long[] {0, 1, 2}, hz.receivedSplits());
      } else {
        assertArrayEquals(new long[0], gotZero);
        assertArrayEquals(new long[] {0, 0, 0}, hz.receivedSplits());
      }
      return "ok";
    });
    assertEquals(List.of("ok", "ok", "ok"), ok);
  }

  /** Writes v as one element of dt at the buffer's position (FLOAT16/BFLOAT16: small integers). */
  static void put(ByteBuffer b, DataType dt, long v) {
    switch (dt) {
      case UINT8: case INT8: case BOOL: b.put((byte) v); break;
      case UINT16: case INT16: b.putShort((short) v); break;
      case INT32: b.putInt((int) v); break;
      case INT64: b.putLong(v); break;
      case FLOAT32: b.putFloat(v); break;
      case FLOAT64: b.putDouble(v); break;
      case BFLOAT16: b.putShort((short) (Float.floatToIntBits(v) >>> 16)); break;
      case FLOAT16: b.putShort(half(v)); break;
      default: throw new AssertionError(dt);
    }
  }

  /** IEEE binary16 bits of a small non-negative integer (exact up to 2048). */
  static short half(long v) {
    if (v == 0) return 0;
    int e = 63 - Long.numberOfLeadingZeros(v);
    return (short) (((e + 15) << 10) | ((v - (1L << e)) << (10 - e)));
  }

  static ByteBuffer direct(int bytes) {
    return ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder());
  }

  static byte[] bytes(ByteBuffer b) {
    byte[] a = new byte[b.remaining()];
    b.duplicate().get(a);
    return a;
  }

  @Test
  void alltoallOfShapedBuffersForEveryDataType() throws Exception {
    final int n = 3;
    final int cols = 2;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      for (DataType dt : DataType.values()) {
        // Row k of what rank r sends to rank j holds {v, v + 1} with v = value(r, j, k)
        // (BOOL: its low bit), so the received bytes are known exactly.
        int rows = (int) LongStream.of(sendSplits(rank, n)).sum();
        ByteBuffer in = direct(rows * cols * dt.size());
        for (int j = 0; j < n; ++j) {
          for (int k = 0; k < split(rank, j, n); ++k) {
            for (int c = 0; c < cols; ++c) put(in, dt, pattern(dt, value(rank, j, k) + c));
          }
        }
        in.flip();
        int recvRows = (int) LongStream.of(recvSplits(rank, n)).sum();
        ByteBuffer want = direct(recvRows * cols * dt.size());
        for (int r = 0; r < n; ++r) {
          for (int k = 0; k < split(r, rank, n); ++k) {
            for (int c = 0; c < cols; ++c) put(want, dt, pattern(dt, value(r, rank, k) + c));
          }
        }
        want.flip();
        Gathered g = ctx.alltoall("a2a.shaped." + dt, in, dt, new long[] {rows, cols},
            sendSplits(rank, n));
        assertEquals(dt, g.dtype());
        assertArrayEquals(new long[] {recvRows, cols}, g.shape(), dt.toString());
        assertArrayEquals(recvSplits(rank, n), g.receivedSplits(), dt.toString());
        assertArrayEquals(bytes(want), bytes(g.data()), dt.toString());
        assertEquals(0, in.position(), "the input's position is left as it was");
      }
      // A heap buffer is copied; null shape: one dimension.
      ByteBuffer heap = ByteBuffer.allocate(4 * n).order(ByteOrder.nativeOrder());
      for (int j = 0; j < n; ++j) heap.putInt(rank * 10 + j);
      heap.flip();
      Gathered g = ctx.alltoall("a2a.heap", heap, DataType.INT32, null, null);
      int[] want = new int[n];
      for (int r = 0; r < n; ++r) want[r] = r * 10 + rank;
      assertArrayEquals(want, g.toIntArray());
      assertArrayEquals(new long[] {n}, g.shape());
      return "ok";
    });
    assertEquals(List.of("ok", "ok", "ok"), ok);
  }

  /** Values that survive every dtype: BOOL 0/1, FLOAT16/BFLOAT16/INT8 small. */
  static long pattern(DataType dt, long v) {
    switch (dt) {
      case BOOL: return v & 1;
      case UINT8: case INT8: case FLOAT16: case BFLOAT16: return v % 127;
      default: return v;
    }
  }

  /** Rank r's block of a length-len reducescatter over n ranks: {offset, count}. */
  static int[] block(int r, int len, int n) {
    int base = len / n, extra = len % n;
    int count = base + (r < extra ? 1 : 0);
    int offset = r * base + Math.min(r, extra);
    return new int[] {offset, count};
  }

  @Test
  void reducescatterForEveryArrayTypeAndOp() throws Exception {
    final int n = 3;
    final int len = 7;  // blocks of 3, 2, 2
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      int[] b = block(rank, len, n);
      float[] f = new float[len];
      double[] d = new double[len];
      int[] i = new int[len];
      long[] l = new long[len];
      for (int x = 0; x < len; ++x) {
        f[x] = (rank + 1) * (x + 1);
        d[x] = (rank + 0.5) * (x + 1);
        i[x] = (rank - 1) * (x + 1);
        l[x] = (rank + 1L) * (x + 1) * (1L << 20);
      }
      float[] fs = new float[b[1]];
      float[] fa = new float[b[1]];
      double[] ds = new double[b[1]];
      int[] imin = new int[b[1]];
      int[] imax = new int[b[1]];
      int[] isum = new int[b[1]];
      long[] lsum = new long[b[1]];
      for (int y = 0; y < b[1]; ++y) {
        int x = b[0] + y + 1;
        fs[y] = 6f * x;
        fa[y] = 2f * x;
        ds[y] = 4.5 * x;
        imin[y] = -x;
        imax[y] = x;
        isum[y] = 0;
        lsum[y] = 6L * x * (1L << 20);
      }
      assertArrayEquals(fs, ctx.reducescatter("rs.float.sum", f, ReduceOp.SUM), FLOAT_TOL);
      assertArrayEquals(fa, ctx.reducescatter("rs.float.avg", f, ReduceOp.AVERAGE), FLOAT_TOL);
      assertArrayEquals(ds, ctx.reducescatter("rs.double.sum", d, ReduceOp.SUM), DOUBLE_TOL);
      assertArrayEquals(imin, ctx.reducescatter("rs.int.min", i, ReduceOp.MIN));
      assertArrayEquals(imax, ctx.reducescatter("rs.int.max", i, ReduceOp.MAX));
      assertArrayEquals(isum, ctx.reducescatter("rs.int.sum", i, ReduceOp.SUM));
      assertArrayEquals(lsum, ctx.reducescatter("rs.long.sum", l, ReduceOp.SUM));

      // Async forms, and PRODUCT on longs beyond 32 bits.
      long[] lp = new long[len];
      long[] lpWant = new long[b[1]];
      for (int x = 0; x < len; ++x) lp[x] = (rank + 1L) * (x + 1) * (rank == 0 ? 1L << 32 : 1);
      for (int y = 0; y < b[1]; ++y) {
        long x = b[0] + y + 1;
        lpWant[y] = 6L * x * x * x * (1L << 32);
      }
      HvdHandle<long[]> hp = ctx.reducescatterAsync("rs.long.prod", lp, ReduceOp.PRODUCT);
      HvdHandle<int[]> hi = ctx.reducescatterAsync("rs.int.max.async", i, ReduceOp.MAX);
      HvdHandle<float[]> hf = ctx.reducescatterAsync("rs.float.async", f, ReduceOp.MIN);
      HvdHandle<double[]> hd = ctx.reducescatterAsync("rs.double.async", d, ReduceOp.MAX);
      assertArrayEquals(lpWant, hp.await());
      assertArrayEquals(imax, hi.await());
      float[] fmin = new float[b[1]];
      double[] dmax = new double[b[1]];
      for (int y = 0; y < b[1]; ++y) {
        fmin[y] = b[0] + y + 1;
        dmax[y] = 2.5 * (b[0] + y + 1);
      }
      assertArrayEquals(fmin, hf.await(), FLOAT_TOL);
      assertArrayEquals(dmax, hd.await(), DOUBLE_TOL);
      assertThrows(IllegalStateException.class, hd::receivedSplits, "not an alltoall");

      // Fewer elements than ranks: rank 2's block is empty.
      int[] small = ctx.reducescatter("rs.small", new int[] {rank, 10 * rank}, ReduceOp.SUM);
      assertArrayEquals(rank == 0 ? new int[] {3} : rank == 1 ? new int[] {30} : new int[0], small);
      return "ok";
    });
    assertEquals(List.of("ok", "ok", "ok"), ok);
  }

  @Test
  void reducescatterOfShapedBuffersForEveryDataType() throws Exception {
    final int n = 3;
    final int rows = 5;  // rows per rank: 2, 2, 1
    final int cols = 2;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      for (DataType dt : DataType.values()) {
        // SUM of (rank + 1) + e % 4 over 3 ranks = 6 + 3 (e % 4), exact in every type;
        // BOOL: MAX (logical or) of "e % 3 == rank", which is 1 everywhere.
        ReduceOp op = dt == DataType.BOOL ? ReduceOp.MAX : ReduceOp.SUM;
        ByteBuffer in = direct(rows * cols * dt.size());
        for (int e = 0; e < rows * cols; ++e) {
          put(in, dt, dt == DataType.BOOL ? (e % 3 == rank ? 1 : 0) : rank + 1 + e % 4);
        }
        in.flip();
        int[] b = block(rank, rows, n);
        ByteBuffer want = direct(b[1] * cols * dt.size());
        for (int e = b[0] * cols; e < (b[0] + b[1]) * cols; ++e) {
          put(want, dt, dt == DataType.BOOL ? 1 : 6 + 3 * (e % 4));
        }
        want.flip();
        Gathered g = ctx.reducescatter("rs.shaped." + dt, in, dt, new long[] {rows, cols}, op);
        assertEquals(dt, g.dtype());
        assertArrayEquals(new long[] {b[1], cols}, g.shape(), dt.toString());
        assertArrayEquals(bytes(want), bytes(g.data()), dt.toString());
        assertEquals(null, g.receivedSplits());
      }
      // The async form, typed views of the result.
      ByteBuffer in = direct(rows * 8);
      for (int e = 0; e < rows; ++e) in.putDouble(rank * 0.5 + e);
      in.flip();
      Gathered g = ctx.reducescatterAsync("rs.shaped.async", in, DataType.FLOAT64, null,
          ReduceOp.AVERAGE).await();
      int[] b = block(rank, rows, n);
      double[] want = new double[b[1]];
      for (int y = 0; y < b[1]; ++y) want[y] = 0.5 + b[0] + y;
      assertArrayEquals(want, g.toDoubleArray(), DOUBLE_TOL);
      return "ok";
    });
    assertEquals(List.of("ok", "ok", "ok"), ok);
  }

  @Test
  void alltoallAndReducescatterRejectBadArguments() throws Exception {
    CountDownLatch submitted = new CountDownLatch(1);
    List<String> ok = Ranks.run(2, (ctx, rank) -> {
      int[] four = {1, 2, 3, 4};
      assertInvalid(() -> ctx.alltoall("bad", (int[]) null, new long[] {0, 0}), "data is null");
      assertInvalid(() -> ctx.alltoall("bad", (float[]) null, null), "data is null");
      assertInvalid(() -> ctx.alltoall("bad", four, new long[] {4}), "splits has 1 entries");
      assertInvalid(() -> ctx.alltoall("bad", four, new long[] {1, 1, 2}), "splits has 3 entries");
      assertInvalid(() -> ctx.alltoall("bad", new long[4], new long[] {-1, 5}), "splits[0] is -1");
      assertInvalid(() -> ctx.alltoall("bad", new double[4], new long[] {1, 2}), "splits sum to 3");
      assertInvalid(() -> ctx.alltoall("bad", new float[4], new long[] {5, -1}),
          "already sum to more than");
      assertInvalid(() -> ctx.alltoall("bad", new float[4], new long[] {Long.MAX_VALUE, 1}),
          "already sum to more than");
      assertInvalid(() -> ctx.alltoall("bad", new int[3], null), "not divisible by the context size 2");
      ByteBuffer six = direct(6 * 4);
      assertInvalid(() -> ctx.alltoall("bad", six, DataType.FLOAT32, new long[] {3, 2}, new long[] {1, 1}),
          "must equal the first dimension = 3");
      assertInvalid(() -> ctx.alltoall("bad", six, DataType.FLOAT32, new long[] {4, 2}, null),
          "shape holds 8 elements");
      assertInvalid(() -> ctx.alltoall("bad", six, DataType.FLOAT32, new long[0], null), "shape is empty");
      // The DataType of a ByteBuffer: required, whole elements, native order.
      assertIllegal(() -> ctx.alltoall("bad", six, null, null, null), "alltoall 'bad': dtype is null");
      assertInvalid(() -> ctx.alltoall("bad", (ByteBuffer) null, DataType.INT8, null, null), "buffer is null");
      assertIllegal(() -> ctx.alltoall("bad", direct(5), DataType.INT32, null, null),
          "5 bytes remaining, not a multiple of INT32's 4 bytes");
      assertIllegal(() -> ctx.allgather("bad", direct(6), DataType.FLOAT64, null), "allgather 'bad'");
      assertIllegal(() -> ctx.reducescatter("bad", ByteBuffer.allocateDirect(8), DataType.FLOAT32, null,
          ReduceOp.SUM), "the input ByteBuffer is BIG_ENDIAN");

      assertInvalid(() -> ctx.reducescatter("bad", (long[]) null, ReduceOp.SUM), "data is null");
      assertInvalid(() -> ctx.reducescatter("bad", four, null), "op is null");
      assertInvalid(() -> ctx.reducescatter("bad", six, DataType.INT32, new long[0], ReduceOp.SUM),
          "shape is empty");
      assertInvalid(() -> ctx.reducescatter("bad", six, DataType.INT32, new long[] {-2, -3}, ReduceOp.SUM),
          "negative dimension");
      assertInvalid(() -> ctx.reducescatter("bad", six, DataType.INT32, null, null), "op is null");
      // Rejected by the library: AVERAGE is not defined for BOOL.
      HvdException e = assertThrows(HvdException.class,
          () -> ctx.reducescatter("bad", direct(2), DataType.BOOL, null, ReduceOp.AVERAGE));
      assertEquals(HvdException.UNSUPPORTED, e.status(), e.getMessage());

      // Ranks disagree on the length: HVD_ERR_MISMATCH on both, and the context stays usable.
      e = assertThrows(HvdException.class,
          () -> ctx.reducescatter("rs.mismatch", new float[2 + rank], ReduceOp.SUM));
      assertEquals(HvdException.MISMATCH, e.status(), e.getMessage());
      // Trailing dimensions must agree for alltoall.
      e = assertThrows(HvdException.class, () -> ctx.alltoall("a2a.mismatch", direct(4 * 4),
          DataType.INT32, rank == 0 ? new long[] {2, 2} : new long[] {4, 1}, null));
      assertEquals(HvdException.MISMATCH, e.status(), e.getMessage());

      // receivedSplits before completion: rank 0 asks while rank 1 has not submitted yet.
      if (rank == 0) {
        HvdHandle<int[]> h = ctx.alltoallAsync("a2a.pending", new int[] {0, 1}, null);
        IllegalStateException ise = assertThrows(IllegalStateException.class, h::receivedSplits);
        assertTrue(ise.getMessage().contains("await"), ise.getMessage());
        submitted.countDown();
        assertArrayEquals(new int[] {0, 10}, h.await());
        assertArrayEquals(new long[] {1, 1}, h.receivedSplits());
      } else {
        assertTrue(submitted.await(30, TimeUnit.SECONDS));
        assertArrayEquals(new int[] {1, 11}, ctx.alltoall("a2a.pending", new int[] {10, 11}, null));
      }
      assertArrayEquals(new int[] {2}, ctx.reducescatter("after", new int[] {1, 1}, ReduceOp.SUM));
      return "ok";
    });
    assertEquals(List.of("ok", "ok"), ok);
  }

  static void assertIllegal(org.junit.jupiter.api.function.Executable call, String text) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call);
    assertTrue(e.getMessage().contains(text), "'" + e.getMessage() + "' should mention '" + text + "'");
  }

  static void assertInvalid(org.junit.jupiter.api.function.Executable call, String text) {
    HvdException e = assertThrows(HvdException.class, call);
    assertEquals(HvdException.INVALID_ARGUMENT, e.status(), e.getMessage());
    assertTrue(e.getMessage().contains(text), "'" + e.getMessage() + "' should mention '" + text + "'");
  }

  @Test
  void mismatchIsReportedOnEveryRankAndTheContextStaysUsable() throws Exception {
    List<Integer> statuses = Ranks.run(2, (ctx, rank) -> {
      HvdException e = assertThrows(HvdException.class,
          () -> ctx.allreduce("mismatch", new float[rank + 1], ReduceOp.SUM));
      assertArrayEquals(new float[] {2}, ctx.allreduce("after", new float[] {1}, ReduceOp.SUM));
      return e.status();
    });
    assertEquals(List.of(HvdException.MISMATCH, HvdException.MISMATCH), statuses);
  }

  @Test
  void closingOneRankAbortsThePeersPendingOperation() throws Exception {
    CountDownLatch waiting = new CountDownLatch(1);
    List<Integer> statuses = Ranks.run(2, (ctx, rank) -> {
      if (rank == 1) {
        assertTrue(waiting.await(30, TimeUnit.SECONDS));
        Thread.sleep(200);
        return 0;  // Ranks closes the context: rank 0's pending allreduce must end
      }
      HvdHandle<float[]> h = ctx.allreduceAsync("never", new float[] {1}, ReduceOp.SUM);
      waiting.countDown();
      long t0 = System.nanoTime();
      HvdException e = assertThrows(HvdException.class, () -> h.await(30));
      assertTrue((System.nanoTime() - t0) / 1e9 < 20, "the peer's close ends the wait promptly");
      return e.status();
    });
    assertTrue(statuses.get(0) == HvdException.ABORTED || statuses.get(0) == HvdException.TRANSPORT,
        "status " + statuses.get(0));
  }

  @Test
  void cancellationCheckEndsABlockingWait() throws Exception {
    AtomicBoolean cancel = new AtomicBoolean();
    List<Integer> statuses = Ranks.run(2, (ctx, rank) -> {
      if (rank == 1) {
        Thread.sleep(300);
        cancel.set(true);
        return 0;
      }
      ctx.setCancellationCheck(cancel::get);
      HvdException e = assertThrows(HvdException.class,
          () -> ctx.allreduce("cancelled", new float[] {1}, ReduceOp.SUM));
      return e.status();
    });
    assertEquals(HvdException.ABORTED, statuses.get(0));
  }

  @Test
  void aThrowingOobCallbackFailsCreationWithItsCause() {
    RuntimeException boom = new RuntimeException("no barrier today");
    HvdConfig cfg = HvdConfig.builder().rank(1).size(2).localRank(1).localSize(2)
        .oobAllgather(mine -> {
          throw boom;
        }).build();
    HvdException e = assertThrows(HvdException.class, () -> HvdContext.create(cfg));
    assertEquals(HvdException.RENDEZVOUS, e.status());
    assertSame(boom, e.getCause());
  }

  @Test
  void oobNeedsRankAndSize() {
    HvdConfig cfg = HvdConfig.builder().oobAllgather(mine -> mine).build();
    HvdException e = assertThrows(HvdException.class, () -> HvdContext.create(cfg));
    assertEquals(HvdException.INVALID_ARGUMENT, e.status());
  }

  @Test
  void closedContextRefusesCalls() throws Exception {
    HvdContext ctx = HvdContext.create(HvdConfig.builder().rank(0).size(1).build());
    ctx.close();
    ctx.close();  // idempotent
    HvdException e = assertThrows(HvdException.class, ctx::rank);
    assertEquals(HvdException.NOT_INITIALIZED, e.status());
  }

  @Test
  void failuresInsideRanksSurface() {
    ExecutionException e = assertThrows(ExecutionException.class,
        () -> Ranks.run(1, (ctx, rank) -> ctx.broadcast("bad", new int[] {1}, -1)));
    assertTrue(e.getCause() instanceof HvdException, e.toString());
  }
  @Test
  void awaitThatRunsOutNamesTheRanksNotYetThere() throws Exception {
    final int n = 3;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      // Rank 0 waits, with a limit, on a tensor the others submit only after
      // the barrier.
      HvdHandle<double[]> h;
      if (rank == 0) {
        h = ctx.allreduceAsync("late.x", new double[] {1, 1}, ReduceOp.SUM);
        final HvdHandle<double[]> first = h;
        HvdException e = assertThrows(HvdException.class, () -> first.await(1.5));
        assertEquals(HvdException.TIMEOUT, e.status(), e.toString());
        assertTrue(e.getMessage().contains("ranks [1, 2] have not submitted 'late.x'"), e.getMessage());
        ctx.barrier();
      } else {
        ctx.barrier();
        h = ctx.allreduceAsync("late.x", new double[] {1, 1}, ReduceOp.SUM);
      }
      assertArrayEquals(new double[] {n, n}, h.await());
      return "ok";
    });
    assertEquals(n, ok.size());
  }
}
