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
}
