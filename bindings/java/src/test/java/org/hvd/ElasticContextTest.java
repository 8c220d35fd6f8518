package org.hvd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.hvd.elastic.Elastic;
import org.hvd.elastic.ElasticContext;
import org.hvd.elastic.ObjectState;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The elastic calls on contexts that are not in an elastic job (the library
 * refuses a reset and says why), and the elastic loop's collectives on real
 * contexts (threads as ranks).
 */
@Timeout(120)
class ElasticContextTest {
  @Test
  void theDefaultContextOutsideAnElasticJob() {
    Hvd.init();
    try {
      assertEquals(new Membership(false, false, 0), Hvd.membership());
      HvdException e = assertThrows(HvdException.class, Hvd::reset);
      assertEquals(HvdException.UNSUPPORTED, e.status());
      assertFalse(e instanceof HvdMembershipChangedException);
      assertEquals("hvd_context_reset", e.function());
      assertTrue(e.libraryMessage().contains("not in an elastic job"), e.libraryMessage());
      // The context still works.
      assertEquals(1, Hvd.allreduce("after", new int[] {1}, ReduceOp.SUM)[0]);
    } finally {
      while (Hvd.isInitialized()) Hvd.shutdown();
    }
  }

  @Test
  void explicitContextsAndProcessSetsOutsideAnElasticJob() throws Exception {
    List<String> out = Ranks.run(2, (ctx, rank) -> {
      Membership m = ctx.membership();
      HvdException e = assertThrows(HvdException.class, ctx::reset);
      HvdContext set = ctx.processSet(0, 1);
      assertNotNull(set);
      Membership sm = set.membership();
      HvdException se = assertThrows(HvdException.class, set::reset);
      set.close();
      return m + " " + e.status() + " " + sm + " " + se.status() + " "
          + se.libraryMessage().contains("a process set cannot be reset");
    });
    String want = "Membership(elastic=false, hostsUpdated=false, epoch=0) -7 "
        + "Membership(elastic=false, hostsUpdated=false, epoch=0) -7 true";
    assertEquals(List.of(want, want), out);
  }

  static final class Model implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    double[] w;
    int step;

    Model(double[] w) {
      this.w = w;
    }
  }

  /**
   * Elastic.run over two threads-as-ranks contexts: sync hands rank 0's
   * state to rank 1 (through ElasticContext's broadcast of bytes), commits
   * outside an elastic job cost no collective, and the function's result
   * comes back.
   */
  @Test
  void theLoopOverRealContexts() throws Exception {
    List<String> out = Ranks.run(2, (ctx, rank) -> {
      // Rank 1 starts from other weights: sync must replace them with rank 0's.
      ObjectState<Model> state = new ObjectState<>(ElasticContext.of(ctx),
          new Model(rank == 0 ? new double[] {1, 2, 3} : new double[] {-5, -5, -5}));
      Model m = Elastic.run(state, s -> {
        Model x = s.get();
        for (; x.step < 3; ++x.step) {
          double[] g = ctx.allreduce("grad", new double[] {rank + 1.0, 0, 1}, ReduceOp.SUM);
          for (int i = 0; i < 3; ++i) x.w[i] -= 0.5 * g[i];
          s.commit();
        }
        return x;
      });
      return m.step + " " + java.util.Arrays.toString(m.w);
    });
    // g = {3, 0, 2} each step: w = {1, 2, 3} - 3 * 0.5 * g
    assertEquals(List.of("3 [-3.5, 2.0, 0.0]", "3 [-3.5, 2.0, 0.0]"), out);
  }

  @Test
  void bytesOfAnyLengthBroadcastFromTheRoot() throws Exception {
    List<String> out = Ranks.run(3, (ctx, rank) -> {
      ElasticContext ec = ElasticContext.of(ctx);
      byte[] big = new byte[100_003];
      for (int i = 0; i < big.length; ++i) big[i] = (byte) (i * 7 + rank);
      byte[] got = ec.broadcast(big, 1, "bytes");
      byte[] none = ec.broadcast(new byte[0], 2, "empty");
      boolean any = ec.any(rank == 2, "any");
      boolean all0 = ec.any(false, "none");
      int bad = 0;
      for (int i = 0; i < got.length; ++i) if (got[i] != (byte) (i * 7 + 1)) ++bad;
      return got.length + " " + bad + " " + none.length + " " + any + " " + all0;
    });
    assertEquals(List.of("100003 0 0 true false", "100003 0 0 true false", "100003 0 0 true false"), out);
  }
}
