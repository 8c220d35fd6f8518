package org.hvd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.stream.IntStream;
import org.hvd.it.SetChecks;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.function.Executable;

/**
 * Process sets ({@link HvdContext#split}, {@link HvdContext#processSet}) with
 * 3-4 ranks as threads of one JVM over Gloo, and a world of one. Every
 * collective runs inside the sets with exact integer checks and float checks
 * within {@link SetChecks#FLOAT_TOL} (org.hvd.it.SetChecks).
 */
@Timeout(120)
class ProcessSetTest {
  static boolean gloo() {
    return Files.isRegularFile(Paths.get(Hvd.libraryFolder()).resolve("libhvd_transport_gloo.so"));
  }

  static int[] range(int from, int to) {
    return IntStream.range(from, to).toArray();
  }

  static boolean contains(int[] a, int v) {
    return IntStream.of(a).anyMatch(x -> x == v);
  }

  /** Asserts the call throws HvdException with the status, and returns it. */
  static HvdException fails(int status, Executable call) {
    HvdException e = assertThrows(HvdException.class, call);
    assertEquals(status, e.status(), e.getMessage());
    return e;
  }

  // ---- split --------------------------------------------------------------------

  /**
   * split(rank % 2, -rank): two sets ordered by descending parent rank, and
   * split(UNDEFINED_COLOR on rank 0, 7 elsewhere): one set of the other ranks
   * (rank 0 gets null). Every collective runs in both sets and in the parent
   * at once, under the same names, submitted in a different order on every
   * rank.
   */
  @ParameterizedTest(name = "{0} ranks")
  @ValueSource(ints = {3, 4})
  void splitWithKeysAndAnUndefinedColor(int n) throws Exception {
    assumeTrue(gloo(), "hvd was built without the Gloo transport");
    int[] colors = new int[n], keys = new int[n];
    for (int q = 0; q < n; ++q) {
      colors[q] = q % 2;
      keys[q] = -q;
    }
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      assertEquals(org.hvd.swig.HvdNativeConstants.HVD_UNDEFINED_COLOR, HvdContext.UNDEFINED_COLOR);
      try (HvdContext parity = ctx.split(rank % 2, -rank);
           HvdContext rest = ctx.split(rank == 0 ? HvdContext.UNDEFINED_COLOR : 7, 0)) {
        int[] mine = SetChecks.membersOf(colors, keys, rank % 2);
        assertNotNull(parity);
        assertTrue(parity.isProcessSet());
        assertSame(ctx, parity.parent());
        assertFalse(ctx.isProcessSet());
        assertArrayEquals(mine, parity.parentRanks());
        // Descending parent ranks: the highest member of the color is rank 0.
        assertEquals(mine.length - 1 - (rank / 2), parity.rank());
        assertEquals(mine.length, parity.size());
        assertEquals("gloo", parity.transport());
        if (rank == 0) {
          assertNull(rest);
        } else {
          assertEquals(rank - 1, rest.rank());
          assertEquals(n - 1, rest.size());
        }
        assertArrayEquals(range(0, n), ctx.parentRanks(), "a context that is no set: 0 .. size-1");

        List<SetChecks.Check> checks = new ArrayList<>();
        checks.addAll(SetChecks.submit(parity, mine, "parity set " + rank % 2, rank));
        if (rest != null) checks.addAll(SetChecks.submit(rest, range(1, n), "rest", 2 * rank));
        checks.addAll(SetChecks.submit(ctx, range(0, n), "parent", 3 * rank));
        SetChecks.runAll(checks);

        // The static API on a thread bound to a set acts on the set.
        try (Hvd.Binding b = Hvd.bind(parity)) {
          assertEquals(parity.rank(), Hvd.rank());
          assertEquals(mine.length, Hvd.size());
          long sum = IntStream.of(mine).sum();
          assertArrayEquals(new long[] {sum}, Hvd.allreduce("bound", new long[] {rank}, ReduceOp.SUM));
        }
      }
      ctx.barrier();  // no rank closes the parent while another still works in a set
      return "ok";
    });
    assertEquals(Collections.nCopies(n, "ok"), ok);
  }

  // ---- rank lists ---------------------------------------------------------------

  /**
   * Overlapping and disjoint lists: {0..n-2}, {1..n-1} (overlapping), {0, n-1}
   * and {1, 2} (disjoint from each other), made in that order on every rank;
   * the ranks outside a list get null. Every collective runs in all of them
   * and in the parent at once, under the same names.
   */
  @ParameterizedTest(name = "{0} ranks")
  @ValueSource(ints = {3, 4})
  void overlappingAndDisjointLists(int n) throws Exception {
    assumeTrue(gloo(), "hvd was built without the Gloo transport");
    int[][] lists = {range(0, n - 1), range(1, n), {0, n - 1}, {1, 2}};
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      HvdContext[] sets = new HvdContext[lists.length];
      try {
        for (int i = 0; i < lists.length; ++i) {
          final int[] list = lists[i];
          sets[i] = ctx.processSet(list);
          int at = IntStream.range(0, list.length).filter(k -> list[k] == rank).findFirst().orElse(-1);
          if (at < 0) {
            assertNull(sets[i], "rank " + rank + " is not in list " + i);
          } else {
            assertNotNull(sets[i], "rank " + rank + " is in list " + i);
            assertEquals(at, sets[i].rank());
            assertArrayEquals(lists[i], sets[i].parentRanks());
          }
        }
        List<SetChecks.Check> checks = new ArrayList<>();
        for (int i = 0; i < lists.length; ++i) {
          if (sets[i] != null) checks.addAll(SetChecks.submit(sets[i], lists[i], "list " + i, rank + i));
        }
        checks.addAll(SetChecks.submit(ctx, range(0, n), "parent", rank));
        // Await in reverse: a set's operations do not wait on another's.
        Collections.reverse(checks);
        SetChecks.runAll(checks);

        // A broadcast root is a rank within the set: the set's size is out of range.
        if (sets[2] != null) {
          fails(HvdException.INVALID_ARGUMENT, () -> sets[2].broadcast("root", new int[] {1}, 2));
        }
      } finally {
        for (HvdContext s : sets) if (s != null) s.close();
      }
      ctx.barrier();  // no rank closes the parent while another still works in a set
      return "ok";
    });
    assertEquals(Collections.nCopies(n, "ok"), ok);
  }

  /** Sets of one: split by rank (every rank alone), and a list of one rank. */
  @Test
  void setsOfOne() throws Exception {
    assumeTrue(gloo(), "hvd was built without the Gloo transport");
    final int n = 3;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      try (HvdContext alone = ctx.split(rank, 0);
           HvdContext last = ctx.processSet(n - 1)) {
        assertEquals(0, alone.rank());
        assertEquals(1, alone.size());
        assertEquals(0, alone.localRank());
        assertEquals(1, alone.localSize());
        assertArrayEquals(new int[] {rank}, alone.parentRanks());
        assertEquals(rank == n - 1, last != null);
        List<SetChecks.Check> checks = new ArrayList<>(SetChecks.submit(alone, new int[] {rank}, "alone", rank));
        if (last != null) checks.addAll(SetChecks.submit(last, new int[] {n - 1}, "last", 1));
        SetChecks.runAll(checks);
        // Explicit values too: an allreduce over one rank is the identity.
        assertArrayEquals(new long[] {rank * 7L}, alone.allreduce("x", new long[] {rank * 7L}, ReduceOp.SUM));
        assertArrayEquals(new int[] {rank}, alone.broadcast("b", new int[] {rank}, 0));
      }
      ctx.barrier();  // no rank closes the parent while another still works in a set
      return "ok";
    });
    assertEquals(Collections.nCopies(n, "ok"), ok);
  }

  // ---- errors -------------------------------------------------------------------

  /**
   * Bad lists and colors, on one rank or all, make every rank throw with the
   * library's status and message (naming the rank); nested sets are refused;
   * afterwards the parent and new sets still work.
   */
  @Test
  void badListsRaiseOnEveryRank() throws Exception {
    assumeTrue(gloo(), "hvd was built without the Gloo transport");
    final int n = 3;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      HvdException e = fails(HvdException.INVALID_ARGUMENT,
          () -> ctx.processSet(rank == 1 ? new int[] {2, 0} : new int[] {0, 2}));
      assertEquals("hvd_process_set_create", e.function());
      assertTrue(e.getMessage().contains("rank 1 passed the process-set rank list [2, 0]: it is not sorted"
          + " ascending"), e.getMessage());

      e = fails(HvdException.INVALID_ARGUMENT, () -> ctx.processSet(0, 1, 1));
      assertTrue(e.getMessage().contains("twice"), e.getMessage());
      e = fails(HvdException.INVALID_ARGUMENT, () -> ctx.processSet(0, n));
      assertTrue(e.getMessage().contains("out of range"), e.getMessage());
      e = fails(HvdException.INVALID_ARGUMENT, () -> ctx.processSet());
      assertTrue(e.getMessage().contains("empty"), e.getMessage());
      e = fails(HvdException.INVALID_ARGUMENT, () -> ctx.processSet((int[]) null));
      assertTrue(e.getMessage().contains("empty"), e.getMessage());

      // Different (each valid) lists on different ranks.
      e = fails(HvdException.MISMATCH, () -> ctx.processSet(rank == 0 ? new int[] {0, 1} : new int[] {0, 2}));
      assertTrue(e.getMessage().contains("rank 0 listed [0, 1], rank 1 listed [0, 2]"), e.getMessage());
      // One rank splits while the others list.
      e = fails(HvdException.MISMATCH, () -> {
        if (rank == 0) ctx.split(0, 0);
        else ctx.processSet(0, 1, 2);
      });
      assertTrue(e.getMessage().contains("hvd_context_split") && e.getMessage().contains("hvd_process_set_create"),
          e.getMessage());
      // A color below -1 on rank 2.
      e = fails(HvdException.INVALID_ARGUMENT, () -> ctx.split(rank == 2 ? -5 : 0, 0));
      assertEquals("hvd_context_split", e.function());
      assertTrue(e.getMessage().contains("rank 2 passed color -5"), e.getMessage());

      // The parent still works, and so does a set made now.
      assertArrayEquals(new int[] {3}, ctx.allreduce("after", new int[] {rank}, ReduceOp.SUM));
      try (HvdContext all = ctx.processSet(0, 1, 2)) {
        assertNotNull(all);
        // Sets of sets are not supported.
        e = fails(HvdException.UNSUPPORTED, () -> all.split(0, 0));
        assertEquals("hvd_context_split", e.function());
        fails(HvdException.UNSUPPORTED, () -> all.processSet(0));
        assertArrayEquals(new int[] {6}, all.allreduce("after", new int[] {rank + 1}, ReduceOp.SUM));
      }
      ctx.barrier();
      return "ok";
    });
    assertEquals(Collections.nCopies(n, "ok"), ok);
  }

  // ---- closing ------------------------------------------------------------------

  /**
   * Closing is collective over a set's members only: two disjoint sets, each
   * closed by its members while the other is still in use; a closed set
   * refuses calls, close is idempotent, a pending operation ends with
   * ABORTED; sets can be made again; closing the parent closes its sets.
   */
  @Test
  void closingSets() throws Exception {
    assumeTrue(gloo(), "hvd was built without the Gloo transport");
    final int n = 4;
    List<String> ok = Ranks.run(n, (ctx, rank) -> {
      HvdContext low = ctx.processSet(0, 1);
      HvdContext high = ctx.processSet(2, 3);
      HvdContext mine = rank < 2 ? low : high;
      assertNull(rank < 2 ? high : low);
      assertArrayEquals(rank < 2 ? new int[] {0, 1} : new int[] {2, 3}, mine.parentRanks());
      if (rank < 2) {
        // Closed while the other set is still working.
        mine.close();
      } else {
        for (int i = 0; i < 5; ++i) {
          assertArrayEquals(new int[] {5 + 2 * i}, mine.allreduce("busy", new int[] {rank + i}, ReduceOp.SUM));
        }
        // An operation only this rank submits is pending when the set closes.
        HvdHandle<int[]> lone = mine.allreduceAsync("lone." + rank, new int[] {1}, ReduceOp.SUM);
        mine.close();
        fails(HvdException.ABORTED, () -> lone.await(SetChecks.WAIT_S));
      }
      assertTrue(mine.isClosed());
      mine.close();  // idempotent
      HvdException e = fails(HvdException.NOT_INITIALIZED, () -> mine.allreduce("x", new int[] {1}, ReduceOp.SUM));
      assertTrue(e.getMessage().contains("the context was closed"), e.getMessage());
      fails(HvdException.NOT_INITIALIZED, mine::rank);
      fails(HvdException.NOT_INITIALIZED, mine::parentRanks);

      // The parent goes on; new sets (reusing the freed slots) work.
      ctx.barrier();
      for (int round = 0; round < 3; ++round) {
        try (HvdContext again = ctx.split(0, -rank)) {
          assertEquals(n - 1 - rank, again.rank());
          assertArrayEquals(new int[] {6}, again.allreduce("again", new int[] {rank}, ReduceOp.SUM));
        }
      }

      // Closing the parent closes the sets still open.
      HvdContext left = ctx.processSet(range(0, n));
      assertArrayEquals(new int[] {n}, left.allreduce("left", new int[] {1}, ReduceOp.SUM));
      ctx.barrier();
      ctx.close();
      assertTrue(left.isClosed());
      e = fails(HvdException.NOT_INITIALIZED, left::size);
      assertTrue(e.getMessage().contains("its parent context was closed"), e.getMessage());
      left.close();  // nothing left to do
      fails(HvdException.NOT_INITIALIZED, () -> ctx.split(0, 0));
      return "ok";
    });
    assertEquals(Collections.nCopies(n, "ok"), ok);
  }

  // ---- a world of one -----------------------------------------------------------

  /**
   * The default context of a world of one ("local" transport, no
   * point-to-point): a set of one works; UNDEFINED_COLOR gives null; nested
   * sets are refused; the last Hvd.shutdown() closes the sets.
   */
  @Test
  void worldOfOneOnTheDefaultContext() {
    Hvd.init();
    try {
      HvdContext world = Hvd.context();
      assertArrayEquals(new int[] {0}, world.parentRanks());
      assertNull(world.split(HvdContext.UNDEFINED_COLOR, 0));
      HvdContext one = world.processSet(0);
      assertNotNull(one);
      assertSame(world, one.parent());
      assertEquals("local", one.transport());
      assertArrayEquals(new double[] {2.5}, one.allreduce("x", new double[] {2.5}, ReduceOp.SUM));
      SetChecks.runAll(SetChecks.submit(one, new int[] {0}, "one", 0));
      fails(HvdException.UNSUPPORTED, () -> one.split(0, 0));
      fails(HvdException.INVALID_ARGUMENT, () -> world.processSet(1));
      HvdContext split = world.split(3, 9);
      assertArrayEquals(new int[] {0}, split.parentRanks());
      split.close();
      assertFalse(one.isClosed());
      Hvd.shutdown();
      assertTrue(one.isClosed());
      fails(HvdException.NOT_INITIALIZED, one::rank);
    } finally {
      while (Hvd.isInitialized()) Hvd.shutdown();
    }
  }
}
