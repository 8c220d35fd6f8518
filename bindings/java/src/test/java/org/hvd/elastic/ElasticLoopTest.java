package org.hvd.elastic;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.Serializable;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import org.hvd.HvdException;
import org.hvd.HvdMembershipChangedException;
import org.hvd.Membership;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Elastic.run, State and ObjectState against a fake context: every call the
 * loop makes on the context is logged, and failures come exactly where the
 * test puts them.
 */
@Timeout(30)
class ElasticLoopTest {
  /** A scripted communicator. */
  static final class FakeContext implements ElasticContext {
    boolean elastic = true;
    boolean hostsUpdated;
    boolean othersSeeHostsUpdated;  // what any() hears from the other ranks
    long epoch;
    int rank;
    byte[] rootBytes;  // rank 0's bytes for a broadcast to this (non-root) rank
    final Deque<RuntimeException> resetFailures = new ArrayDeque<>();
    final List<String> log = new ArrayList<>();
    int resets;

    @Override
    public Membership membership() {
      log.add("membership");
      return new Membership(elastic, hostsUpdated, elastic ? epoch : 0);
    }

    @Override
    public void reset() {
      resets++;
      log.add("reset");
      RuntimeException e = resetFailures.poll();
      if (e != null) throw e;
      epoch++;
      hostsUpdated = false;
    }

    @Override
    public int rank() {
      return rank;
    }

    @Override
    public boolean any(boolean flag, String name) {
      log.add("any " + name + " " + flag);
      return flag || othersSeeHostsUpdated;
    }

    @Override
    public byte[] broadcast(byte[] data, int root, String name) {
      log.add("broadcast " + name + " from " + root);
      return rank != root && rootBytes != null ? rootBytes.clone() : data.clone();
    }
  }

  static final class Progress implements Serializable {
    private static final long serialVersionUID = 1L;
    int step;
    long total;
    final List<Integer> seen = new ArrayList<>();  // steps done since the last commit, for in-place checks
  }

  /** An ObjectState that counts its restores. */
  static final class Counted extends ObjectState<Progress> {
    int restores;
    int resetHooks;

    Counted(ElasticContext ctx) {
      super(ctx, new Progress());
    }

    @Override
    public void restore() {
      restores++;
      super.restore();
    }

    @Override
    protected void reset() {
      resetHooks++;
    }
  }

  static HvdMembershipChangedException lostPeer() {
    return new HvdMembershipChangedException("hvd_handle_wait", "rank 2 lost (connection closed)");
  }

  /**
   * Training of `steps` steps: step s adds s + 1; a commit every 2 steps.
   * `trace` gets every step run; failAt throws a lost peer the first time
   * that step is reached.
   */
  static Progress train(Counted s, int steps, int failAt, List<Integer> trace, boolean[] failed) {
    Progress p = s.get();
    while (p.step < steps) {
      if (p.step == failAt && !failed[0]) {
        failed[0] = true;
        throw lostPeer();
      }
      trace.add(p.step);
      p.total += p.step + 1;
      p.step++;
      if (p.step % 2 == 0) s.commit();
    }
    return p;
  }

  @Test
  void withoutFailuresTheFunctionRunsOnceAfterOneSync() {
    FakeContext ctx = new FakeContext();
    Counted state = new Counted(ctx);
    List<Integer> trace = new ArrayList<>();
    Progress p = Elastic.run(state, s -> train(s, 6, -1, trace, new boolean[1]));
    assertEquals(21, p.total);  // 1 + 2 + ... + 6
    assertEquals(List.of(0, 1, 2, 3, 4, 5), trace);
    assertEquals(List.of("broadcast elastic.object_state from 0",
        "membership", "any elastic.hosts_updated false",
        "membership", "any elastic.hosts_updated false",
        "membership", "any elastic.hosts_updated false"), ctx.log);
    assertEquals(0, ctx.resets);
    assertEquals(0, state.restores);
  }

  @Test
  void aLostPeerRestoresTheLastCommitResetsAndGoesOn() {
    FakeContext ctx = new FakeContext();
    Counted state = new Counted(ctx);
    List<String> callbacks = new ArrayList<>();
    state.registerResetCallback(() -> {
      callbacks.add("first epoch=" + ctx.epoch);
      ctx.log.add("callback");
    });
    state.registerResetCallback(() -> callbacks.add("second"));
    List<Integer> trace = new ArrayList<>();
    boolean[] failed = new boolean[1];
    Progress p = Elastic.run(state, s -> train(s, 6, 3, trace, failed));
    // Steps 0-2 ran, step 3 failed: back to the commit after step 1 (step 2,
    // total 3), so step 2 runs again (without the restore, step 3 would be next).
    assertEquals(List.of(0, 1, 2, 2, 3, 4, 5), trace);
    assertEquals(21, p.total);
    assertEquals(6, p.step);
    assertEquals(1, state.restores);
    assertEquals(1, ctx.resets);
    assertEquals(1, state.resetHooks);
    assertEquals(List.of("first epoch=1", "second"), callbacks);
    assertEquals(List.of("broadcast elastic.object_state from 0",
        "membership", "any elastic.hosts_updated false",  // commit after step 1
        "membership",                                     // run(): is the job elastic?
        "reset", "callback",
        "broadcast elastic.object_state from 0",
        "membership", "any elastic.hosts_updated false",
        "membership", "any elastic.hosts_updated false"), ctx.log);
  }

  @Test
  void aLostPeerFoundAsTheCauseOfAnotherExceptionCountsToo() {
    FakeContext ctx = new FakeContext();
    Counted state = new Counted(ctx);
    int[] calls = new int[1];
    String r = Elastic.run(state, s -> {
      if (calls[0]++ == 0) throw new IllegalStateException("wrapped", lostPeer());
      return "done";
    });
    assertEquals("done", r);
    assertEquals(2, calls[0]);
    assertEquals(1, ctx.resets);
    assertEquals(1, state.restores);
  }

  @Test
  void hostsUpdatedInterruptsAtACommitAndResetsWithoutRestoring() {
    FakeContext ctx = new FakeContext();
    ctx.hostsUpdated = true;  // cleared by the reset (the new epoch has the new hosts)
    Counted state = new Counted(ctx);
    List<Integer> trace = new ArrayList<>();
    Progress p = Elastic.run(state, s -> train(s, 6, -1, trace, new boolean[1]));
    assertEquals(List.of(0, 1, 2, 3, 4, 5), trace);  // nothing ran twice
    assertEquals(21, p.total);
    assertEquals(0, state.restores);
    assertEquals(1, ctx.resets);
    assertEquals(List.of("broadcast elastic.object_state from 0",
        "membership", "any elastic.hosts_updated true",
        "reset",
        "broadcast elastic.object_state from 0",
        "membership", "any elastic.hosts_updated false",
        "membership", "any elastic.hosts_updated false"), ctx.log);
  }

  @Test
  void anotherRanksReadingOfHostsUpdatedInterruptsThisOneToo() {
    FakeContext ctx = new FakeContext();
    ctx.othersSeeHostsUpdated = true;
    Counted state = new Counted(ctx);
    HostsUpdatedInterrupt e = assertThrows(HostsUpdatedInterrupt.class, state::commit);
    assertFalse(e.skipSync());
    assertEquals(List.of("membership", "any elastic.hosts_updated false"), ctx.log);
  }

  @Test
  void skipSyncSkipsTheNextSync() {
    FakeContext ctx = new FakeContext();
    Counted state = new Counted(ctx);
    int[] calls = new int[1];
    int r = Elastic.run(state, s -> {
      if (calls[0]++ == 0) throw new HostsUpdatedInterrupt(true);
      return 7;
    });
    assertEquals(7, r);
    assertEquals(List.of("broadcast elastic.object_state from 0", "reset"), ctx.log);
  }

  @Test
  void outsideAnElasticJobErrorsPassThroughAndCommitsCostNoCollective() {
    FakeContext ctx = new FakeContext();
    ctx.elastic = false;
    Counted state = new Counted(ctx);
    state.commit();
    assertEquals(List.of("membership"), ctx.log);
    HvdMembershipChangedException thrown = lostPeer();
    HvdMembershipChangedException e = assertThrows(HvdMembershipChangedException.class,
        () -> Elastic.run(state, s -> {
          throw thrown;
        }));
    assertSame(thrown, e);
    assertEquals(0, ctx.resets);
    assertEquals(0, state.restores);
  }

  @Test
  void otherErrorsPassThroughWithoutReset() {
    FakeContext ctx = new FakeContext();
    Counted state = new Counted(ctx);
    IllegalArgumentException thrown = new IllegalArgumentException("bad batch");
    assertSame(thrown, assertThrows(IllegalArgumentException.class,
        () -> Elastic.run(state, s -> {
          throw thrown;
        })));
    HvdException other = new HvdException(HvdException.MISMATCH, "hvd_allreduce_async", "shapes");
    assertSame(other, assertThrows(HvdException.class, () -> Elastic.run(state, s -> {
      throw other;
    })));
    assertEquals(0, ctx.resets);
    assertEquals(0, state.restores);
  }

  @Test
  void aResetThatMeetsAnotherChangeIsTriedAgain() {
    FakeContext ctx = new FakeContext();
    ctx.resetFailures.add(lostPeer());
    ctx.resetFailures.add(new HvdMembershipChangedException("hvd_context_reset",
        "forming elastic epoch 1 failed: a peer left; reset again"));
    Counted state = new Counted(ctx);
    int[] calls = new int[1];
    assertEquals("ok", Elastic.run(state, s -> {
      if (calls[0]++ == 0) throw lostPeer();
      return "ok";
    }));
    assertEquals(3, ctx.resets);
    assertEquals(1, ctx.epoch);
    assertEquals(1, state.resetHooks);
  }

  @Test
  void aLauncherThatEndsTheJobIsNotRetried() {
    FakeContext ctx = new FakeContext();
    HvdMembershipChangedException end = new HvdMembershipChangedException("hvd_context_reset",
        "the launcher ends this worker (hostA:0:0): only 1 workers remain, fewer than --min-np 2");
    assertTrue(end.launcherEnded());
    assertFalse(lostPeer().launcherEnded());
    ctx.resetFailures.add(end);
    Counted state = new Counted(ctx);
    assertSame(end, assertThrows(HvdMembershipChangedException.class,
        () -> Elastic.run(state, s -> {
          throw lostPeer();
        })));
    assertEquals(1, ctx.resets);
    assertEquals(0, state.resetHooks);
  }

  @Test
  void resetsGiveUpAfterMaxAttempts() {
    FakeContext ctx = new FakeContext();
    for (int i = 0; i < 50; ++i) ctx.resetFailures.add(lostPeer());
    Counted state = new Counted(ctx);
    HvdMembershipChangedException e = assertThrows(HvdMembershipChangedException.class,
        () -> Elastic.run(state, s -> {
          throw lostPeer();
        }));
    assertEquals(Elastic.MAX_RESET_ATTEMPTS, ctx.resets);
    assertTrue(e.getMessage().contains("10 resets in a row failed; the last: rank 2 lost"), e.getMessage());
    assertInstanceOf(HvdMembershipChangedException.class, e.getCause());
  }

  @Test
  void objectStateKeepsACopyAndSyncTakesRankZeros() {
    FakeContext ctx = new FakeContext();
    ctx.rank = 1;
    Counted state = new Counted(ctx);
    Progress p = state.get();
    p.step = 4;
    p.seen.add(4);
    state.commit();
    p.step = 9;         // in place, after the commit
    p.seen.add(9);
    state.restore();
    assertNotSame(p, state.get());
    assertEquals(4, state.get().step);
    assertEquals(List.of(4), state.get().seen);
    state.get().step = 5;
    state.restore();    // a fresh copy each time
    assertEquals(4, state.get().step);

    Progress zero = new Progress();
    zero.step = 2;
    zero.total = 3;
    ctx.rootBytes = ObjectState.serialize(zero);
    state.sync();
    assertEquals(2, state.get().step);
    assertEquals(3, state.get().total);
    state.get().step = 100;
    state.restore();    // the synced copy is the one to go back to
    assertEquals(2, state.get().step);
  }

  @Test
  void membershipChangedHasItsOwnClassAndName() {
    assertEquals(-14, HvdException.MEMBERSHIP_CHANGED);
    assertEquals("HVD_ERR_MEMBERSHIP_CHANGED", HvdException.statusName(-14));
    assertInstanceOf(HvdMembershipChangedException.class,
        HvdException.of(HvdException.MEMBERSHIP_CHANGED, "f", "m"));
    assertFalse(HvdException.of(HvdException.TIMEOUT, "f", "m") instanceof HvdMembershipChangedException);
    assertEquals("HVD_ERR_MEMBERSHIP_CHANGED (-14) in f: m", HvdException.of(-14, "f", "m").getMessage());
  }
}
