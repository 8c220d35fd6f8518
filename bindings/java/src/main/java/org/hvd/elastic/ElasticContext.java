package org.hvd.elastic;

import java.nio.ByteBuffer;
import java.util.Objects;
import java.util.function.Supplier;
import org.hvd.DataType;
import org.hvd.Hvd;
import org.hvd.HvdContext;
import org.hvd.Membership;
import org.hvd.ReduceOp;

/**
 * What the elastic machinery ({@link State}, {@link Elastic#run}) needs from
 * a communicator. {@link #of(HvdContext)} and {@link #current()} adapt an
 * {@link HvdContext}; tests may supply their own.
 */
public interface ElasticContext {
  /** {@link HvdContext#membership()}. */
  Membership membership();

  /** {@link HvdContext#reset()}: forms the job again under the next epoch. */
  void reset();

  /** This process's rank. */
  int rank();

  /** True on every rank when {@code flag} is true on any rank (collective). */
  boolean any(boolean flag, String name);

  /** {@code root}'s bytes on every rank (collective; other ranks' {@code data} is ignored). */
  byte[] broadcast(byte[] data, int root, String name);

  /** The given context. */
  static ElasticContext of(HvdContext ctx) {
    Objects.requireNonNull(ctx, "ctx");
    return new Adapter(() -> ctx);
  }

  /**
   * The calling thread's context at each call ({@link Hvd#context()}: the one
   * bound with {@link Hvd#bind}, else the default context of {@link Hvd#init()}).
   */
  static ElasticContext current() {
    return new Adapter(Hvd::context);
  }

  /** The adapter over an HvdContext. */
  final class Adapter implements ElasticContext {
    private final Supplier<HvdContext> ctx;

    Adapter(Supplier<HvdContext> ctx) {
      this.ctx = ctx;
    }

    /** The context the next call acts on. */
    public HvdContext context() {
      return ctx.get();
    }

    @Override
    public Membership membership() {
      return ctx.get().membership();
    }

    @Override
    public void reset() {
      ctx.get().reset();
    }

    @Override
    public int rank() {
      return ctx.get().rank();
    }

    @Override
    public boolean any(boolean flag, String name) {
      int[] r = ctx.get().allreduce(name, new int[] {flag ? 1 : 0}, ReduceOp.MAX);
      return r[0] != 0;
    }

    @Override
    public byte[] broadcast(byte[] data, int root, String name) {
      HvdContext c = ctx.get();
      boolean isRoot = c.rank() == root;
      if (isRoot) Objects.requireNonNull(data, "data (on the root)");
      long[] n = c.broadcast(name + ".length", new long[] {isRoot ? data.length : 0}, root);
      if (n[0] < 0 || n[0] > Integer.MAX_VALUE - 8) {
        throw new IllegalStateException("ElasticContext.broadcast: the root sent " + n[0] + " bytes");
      }
      int len = (int) n[0];
      if (len == 0) return new byte[0];
      ByteBuffer buf = ByteBuffer.allocateDirect(len);
      if (isRoot) {
        buf.put(data);
        buf.flip();
      }
      c.broadcast(name + ".data", buf, buf, DataType.UINT8, root);
      byte[] out = new byte[len];
      buf.position(0);
      buf.get(out);
      return out;
    }
  }
}
