package org.hvd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Hvd.bind: the static API on a thread acts on the context bound to it, else on
 * the process default. Ranks are threads of this JVM, each with its own explicit
 * context (as the Spark runner's tasks in local mode), talking over Gloo.
 */
@Timeout(120)
class BindTest {
  static void assumeGloo() {
    assumeTrue(Files.isRegularFile(Paths.get(Hvd.libraryFolder()).resolve("libhvd_transport_gloo.so")),
        "hvd was built without the Gloo transport");
  }

  /** A world of one as an explicit context (for nesting). */
  static HvdContext solo() {
    return HvdContext.create(HvdConfig.builder().rank(0).size(1).build());
  }

  @AfterEach
  void cleanUp() {
    while (Hvd.binding() != null) Hvd.binding().close();
    while (Hvd.isInitialized()) Hvd.shutdown();
  }

  @Test
  void staticCallsOnEachThreadReachItsOwnContext() throws Exception {
    assumeGloo();
    final int n = 3;
    assertFalse(Hvd.isInitialized(), "no default context in this JVM");
    List<Integer> done = Ranks.run(n, (ctx, rank) -> {
      assertNull(Hvd.binding());
      assertFalse(Hvd.isInitialized());
      HvdException before = assertThrows(HvdException.class, Hvd::rank);
      assertEquals(HvdException.NOT_INITIALIZED, before.status());

      try (Hvd.Binding b = Hvd.bind(ctx)) {
        assertSame(b, Hvd.binding());
        assertSame(ctx, b.context());
        assertSame(ctx, Hvd.context());
        assertTrue(Hvd.isInitialized());
        Hvd.init();  // code written for hvdrun: only counts
        assertEquals(1, b.initCount());

        assertEquals(rank, Hvd.rank());
        assertEquals(n, Hvd.size());
        assertEquals(rank, Hvd.localRank());
        assertEquals(n, Hvd.localSize());
        assertEquals(ctx.crossRank(), Hvd.crossRank());
        assertEquals(ctx.crossSize(), Hvd.crossSize());

        assertArrayEquals(new int[] {6, 30, -3},
            Hvd.allreduce("bind.sum", new int[] {rank + 1, 10 * rank, -1}, ReduceOp.SUM));
        assertArrayEquals(new long[] {(3L << 40) + 3},
            Hvd.allreduce("bind.long", new long[] {(1L << 40) + rank}, ReduceOp.SUM));
        assertArrayEquals(new int[] {10}, Hvd.allreduce("bind.avg", new int[] {10 * rank}));  // AVERAGE
        assertArrayEquals(new int[] {n - 1}, Hvd.allreduce("bind.max", new int[] {rank}, ReduceOp.MAX));
        assertArrayEquals(new int[] {3}, Hvd.allreduce(new int[] {rank}, ReduceOp.SUM));  // unnamed
        assertArrayEquals(new int[] {0, 1, 1, 2, 2, 2},
            Hvd.allgather("bind.gather", java.util.Collections.nCopies(rank + 1, rank).stream()
                .mapToInt(Integer::intValue).toArray()));
        assertArrayEquals(new long[] {101}, Hvd.broadcast("bind.bcast", new long[] {100 + rank}, 1));
        HvdHandle<int[]> h = Hvd.allreduceAsync("bind.async", new int[] {rank * rank}, ReduceOp.SUM);
        assertArrayEquals(new int[] {5}, h.await());
        Hvd.barrier();

        Hvd.shutdown();
        assertEquals(0, b.initCount());
        assertTrue(Hvd.isInitialized(), "the bound context stays");
      }
      assertNull(Hvd.binding());
      assertFalse(Hvd.isInitialized());
      assertThrows(HvdException.class, Hvd::size);
      assertFalse(ctx.isClosed());
      assertArrayEquals(new int[] {3}, ctx.allreduce("bind.after", new int[] {rank}, ReduceOp.SUM));
      return rank;
    });
    assertEquals(List.of(0, 1, 2), done);
    assertFalse(Hvd.isInitialized());
  }

  @Test
  void bindingsNestAndRestore() throws Exception {
    assumeGloo();
    List<Integer> done = Ranks.run(2, (ctx, rank) -> {
      try (HvdContext one = solo()) {
        try (Hvd.Binding outer = Hvd.bind(ctx)) {
          assertEquals(2, Hvd.size());
          try (Hvd.Binding inner = Hvd.bind(one)) {
            assertSame(inner, Hvd.binding());
            assertSame(one, Hvd.context());
            assertEquals(0, Hvd.rank());
            assertEquals(1, Hvd.size());
            assertArrayEquals(new int[] {7 + rank},
                Hvd.allreduce("nest.solo", new int[] {7 + rank}, ReduceOp.SUM));
            Hvd.init();
            Hvd.shutdown();
            Hvd.shutdown();  // one more than inits: still nothing destroyed
            assertEquals(0, inner.initCount());
            assertFalse(one.isClosed());
          }
          assertSame(outer, Hvd.binding());
          assertSame(ctx, Hvd.context());
          assertEquals(rank, Hvd.rank());
          assertEquals(2, Hvd.size());
          assertArrayEquals(new int[] {3}, Hvd.allreduce("nest.outer", new int[] {rank + 1}, ReduceOp.SUM));

          // An inner binding left open ends with the outer one.
          Hvd.Binding leaked = Hvd.bind(one);
          assertEquals(1, Hvd.size());
          outer.close();
          assertTrue(outer.isClosed());
          assertTrue(leaked.isClosed());
          assertNull(Hvd.binding());
          leaked.close();  // idempotent, changes nothing
          assertNull(Hvd.binding());
          assertFalse(Hvd.isInitialized());
        }  // and the try's own close() of outer changes nothing either
        assertNull(Hvd.binding());

        // The same context bound again, twice nested.
        try (Hvd.Binding again = Hvd.bind(ctx); Hvd.Binding twice = Hvd.bind(ctx)) {
          assertSame(twice, Hvd.binding());
          assertArrayEquals(new long[] {1, 2},
              Hvd.allgather("nest.again", new long[] {rank + 1}));
        }
        assertNull(Hvd.binding());
        assertFalse(one.isClosed());
        assertFalse(ctx.isClosed());
      }
      return rank;
    });
    assertEquals(List.of(0, 1), done);
  }

  @Test
  void shutdownInsideTheScopeLeavesTheContextAndTheDefaultAlone() throws Exception {
    assumeGloo();
    final int n = 2;
    Hvd.init();  // the process default: a world of one
    try {
      assertEquals(1, Hvd.size());
      HvdContext dflt = Hvd.context();
      assertTrue(dflt.isDefault());
      List<Integer> done = Ranks.run(n, (ctx, rank) -> {
        // Unbound threads see the process default.
        assertSame(dflt, Hvd.context());
        assertEquals(1, Hvd.size());
        try (Hvd.Binding b = Hvd.bind(ctx)) {
          Hvd.init();
          Hvd.init(HvdConfig.builder().rank(rank).size(n).localRank(rank).localSize(n).build());
          assertEquals(2, b.initCount());
          for (int i = 0; i < 5; ++i) Hvd.shutdown();  // more than the inits
          assertEquals(0, b.initCount());
          assertTrue(Hvd.isInitialized());
          assertEquals(rank, Hvd.rank());
          assertEquals(n, Hvd.size());
          assertArrayEquals(new int[] {3, 2},
              Hvd.allreduce("shut.sum", new int[] {rank + 1, 1}, ReduceOp.SUM));
        }
        // The context is still its owner's, and usable.
        assertFalse(ctx.isClosed());
        assertArrayEquals(new int[] {1}, ctx.allreduce("shut.after", new int[] {rank}, ReduceOp.SUM));
        // Back to the default, which the shutdowns above did not touch.
        assertSame(dflt, Hvd.context());
        return rank;
      });
      assertEquals(List.of(0, 1), done);
      assertTrue(Hvd.isInitialized(), "the default context survived the bound shutdowns");
      assertEquals(0, Hvd.rank());
      assertEquals(1, Hvd.size());
      assertArrayEquals(new int[] {5}, Hvd.allreduce("dflt", new int[] {5}, ReduceOp.SUM));
    } finally {
      Hvd.shutdown();
    }
    assertFalse(Hvd.isInitialized());
  }

  @Test
  void initWithSettingsThatDoNotDescribeTheBoundContextThrows() throws Exception {
    assumeGloo();
    Ranks.run(2, (ctx, rank) -> {
      try (Hvd.Binding b = Hvd.bind(ctx)) {
        HvdException e = assertThrows(HvdException.class,
            () -> Hvd.init(HvdConfig.builder().rank(1 - rank).build()));
        assertEquals(HvdException.INVALID_ARGUMENT, e.status());
        assertTrue(e.getMessage().contains("rank is " + rank + ", but the settings ask for rank "
            + (1 - rank)), e.getMessage());
        e = assertThrows(HvdException.class, () -> Hvd.init(HvdConfig.builder().size(5).build()));
        assertTrue(e.getMessage().contains("size is 2, but the settings ask for size 5"), e.getMessage());
        e = assertThrows(HvdException.class, () -> Hvd.init(HvdConfig.builder().localSize(3).build()));
        assertTrue(e.getMessage().contains("localSize"), e.getMessage());
        assertEquals(0, b.initCount(), "a refused init counts nothing");
        Hvd.init(HvdConfig.builder().rank(rank).size(2).build());
        assertEquals(1, b.initCount());
      }
      return rank;
    });
  }

  @Test
  void threadsStartedInsideAScopeAreNotBound() throws Exception {
    assumeGloo();
    Ranks.run(2, (ctx, rank) -> {
      try (Hvd.Binding b = Hvd.bind(ctx)) {
        AtomicReference<Object> seen = new AtomicReference<>();
        Thread child = new Thread(() -> {
          try {
            Object binding = Hvd.binding();
            boolean initialized = Hvd.isInitialized();
            int status = 0;
            try {
              Hvd.rank();
            } catch (HvdException e) {
              status = e.status();
            }
            String closeElsewhere;
            try {
              b.close();
              closeElsewhere = "closed";
            } catch (IllegalStateException e) {
              closeElsewhere = "refused";
            }
            // Bound explicitly, the child shares the parent's context.
            int[] sum;
            try (Hvd.Binding mine = Hvd.bind(b.context())) {
              sum = Hvd.allreduce("child.sum", new int[] {10 + rank}, ReduceOp.SUM);
            }
            seen.set(List.of(String.valueOf(binding), initialized, status, closeElsewhere, sum[0],
                String.valueOf(Hvd.binding())));
          } catch (Throwable t) {
            seen.set(t);
          }
        }, "child-of-rank-" + rank);
        child.start();
        child.join(TimeUnit.SECONDS.toMillis(60));
        assertFalse(child.isAlive(), "the child thread finished");
        assertEquals(List.of("null", false, HvdException.NOT_INITIALIZED, "refused", 21, "null"),
            seen.get());
        assertFalse(b.isClosed());
        assertSame(b, Hvd.binding());
        assertEquals(rank, Hvd.rank());
      }
      return rank;
    });
  }

  @Test
  void bindRefusesNullAndClosedContexts() {
    assertThrows(IllegalArgumentException.class, () -> Hvd.bind(null));
    HvdContext one = solo();
    one.close();
    HvdException e = assertThrows(HvdException.class, () -> Hvd.bind(one));
    assertEquals(HvdException.NOT_INITIALIZED, e.status());
    assertNull(Hvd.binding());

    // A context closed while bound: the thread's Hvd.* say so, and the binding still restores.
    HvdContext other = solo();
    try (Hvd.Binding b = Hvd.bind(other)) {
      assertEquals(1, Hvd.size());
      other.close();
      assertFalse(Hvd.isInitialized());
      e = assertThrows(HvdException.class, Hvd::rank);
      assertEquals(HvdException.NOT_INITIALIZED, e.status());
      e = assertThrows(HvdException.class, () -> Hvd.init());
      assertEquals(HvdException.NOT_INITIALIZED, e.status());
      assertTrue(e.getMessage().contains("bound to this thread"), e.getMessage());
      Hvd.shutdown();  // does nothing
    }
    assertNull(Hvd.binding());
    assertFalse(Hvd.isInitialized());
  }
}
