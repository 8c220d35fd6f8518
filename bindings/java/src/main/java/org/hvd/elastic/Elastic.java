package org.hvd.elastic;

import java.util.function.Function;
import org.hvd.HvdException;
import org.hvd.HvdMembershipChangedException;

/**
 * Horovod's elastic loop ({@code hvd.elastic.run}) for Java.
 *
 * <pre>{@code
 * Hvd.init();
 * ObjectState<Progress> state = new ObjectState<>(new Progress());
 * Progress done = Elastic.run(state, s -> {
 *   for (Progress p = s.get(); p.step < steps; ) {
 *     train(p);              // collectives
 *     p.step++;
 *     s.commit();            // a copy to go back to; may throw HostsUpdatedInterrupt
 *   }
 *   return s.get();
 * });
 * }</pre>
 *
 * Run under {@code hvdrun --min-np N --max-np M --host-discovery-script S}
 * (docs/elastic.md). Outside an elastic job the loop runs the function once
 * (after a sync) and lets its errors through.
 */
public final class Elastic {
  /**
   * Resets in a row that may fail because the membership changed again (a
   * peer lost while the next epoch forms) before {@link #run} gives up.
   */
  public static final int MAX_RESET_ATTEMPTS = 10;

  private Elastic() {}

  /**
   * Runs {@code fn.apply(state)} until it returns, going back to the last
   * commit after a failure. Each round: {@code state.sync()} (skipped after a
   * {@link HostsUpdatedInterrupt} with skipSync), then {@code fn}.
   * <ul>
   *   <li>{@link HvdMembershipChangedException} (a peer was lost; also found
   *       as the cause of another exception): {@code state.restore()}, then reset;
   *   <li>{@link HostsUpdatedInterrupt} (from {@code state.commit()}): reset;
   *   <li>anything else, and a membership change outside an elastic job: thrown.
   * </ul>
   * A reset is {@code context.reset()} (tried again while it fails with a
   * membership change, at most {@link #MAX_RESET_ATTEMPTS} times; a launcher
   * that ends the job is not retried: its exception is thrown), then
   * {@code state.onReset()} (the reset callbacks). A worker the launcher adds
   * later runs the program from the top and meets the others in
   * {@code state.sync()}: it must do no collective before calling run.
   */
  public static <S extends State, R> R run(S state, Function<? super S, ? extends R> fn) {
    ElasticContext ctx = state.context();
    boolean skipSync = false;
    while (true) {
      try {
        if (!skipSync) state.sync();
        return fn.apply(state);
      } catch (RuntimeException | Error e) {
        HvdMembershipChangedException changed = find(e, HvdMembershipChangedException.class);
        HostsUpdatedInterrupt interrupt = find(e, HostsUpdatedInterrupt.class);
        if (changed != null && (interrupt == null || depth(e, changed) < depth(e, interrupt))) {
          if (changed.launcherEnded() || !recoverable(ctx)) throw e;
          state.restore();
          skipSync = false;
        } else if (interrupt != null) {
          skipSync = interrupt.skipSync();
        } else {
          throw e;
        }
      }
      reset(ctx);
      state.onReset();
    }
  }

  /** Whether a membership change can be recovered from: an elastic job's context. */
  private static boolean recoverable(ElasticContext ctx) {
    try {
      return ctx.membership().elastic();
    } catch (HvdMembershipChangedException e) {
      return true;  // the query itself met the changed membership
    } catch (HvdException e) {
      return false;
    }
  }

  /** context.reset(), tried again while the membership changes under it. */
  static void reset(ElasticContext ctx) {
    HvdMembershipChangedException last = null;
    for (int i = 0; i < MAX_RESET_ATTEMPTS; ++i) {
      try {
        ctx.reset();
        return;
      } catch (HvdMembershipChangedException e) {
        if (e.launcherEnded()) throw e;
        last = e;
      }
    }
    HvdMembershipChangedException e = new HvdMembershipChangedException("Elastic.run",
        MAX_RESET_ATTEMPTS + " resets in a row failed; the last: " + last.libraryMessage());
    e.initCause(last);
    throw e;
  }

  private static <E extends Throwable> E find(Throwable t, Class<E> type) {
    for (int i = 0; t != null && i < 32; ++i, t = t.getCause()) {
      if (type.isInstance(t)) return type.cast(t);
    }
    return null;
  }

  private static int depth(Throwable t, Throwable target) {
    for (int i = 0; t != null && i < 32; ++i, t = t.getCause()) {
      if (t == target) return i;
    }
    return Integer.MAX_VALUE;
  }
}
