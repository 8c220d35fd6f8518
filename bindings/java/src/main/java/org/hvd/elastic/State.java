package org.hvd.elastic;

import java.util.Collection;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CopyOnWriteArrayList;
import org.hvd.Membership;

/**
 * Horovod's elastic State: what training needs to go on after the job's
 * membership changed. Subclasses implement {@link #save()} (keep a copy),
 * {@link #restore()} (go back to it) and {@link #sync()} (rank 0's copy to
 * every rank; collective). {@link ObjectState} does it for Serializable values.
 *
 * <p>Call {@link #commit()} at the same points on every rank (every N batches):
 * it saves, then checks whether the launcher changed the hosts.
 */
public abstract class State {
  private final ElasticContext context;
  private final List<Runnable> resetCallbacks = new CopyOnWriteArrayList<>();

  /** A state over the calling thread's context ({@link ElasticContext#current()}). */
  protected State() {
    this(ElasticContext.current());
  }

  protected State(ElasticContext context) {
    this.context = Objects.requireNonNull(context, "context");
  }

  /** The communicator this state commits, syncs and resets over. */
  public final ElasticContext context() {
    return context;
  }

  /**
   * Runs {@code callback} after every reset, after the callbacks registered
   * before it and before the state is synced (e.g. to scale the learning rate
   * to the new size).
   */
  public void registerResetCallback(Runnable callback) {
    resetCallbacks.add(Objects.requireNonNull(callback, "callback"));
  }

  /** {@link #registerResetCallback} for each, in order. */
  public void registerResetCallbacks(Collection<? extends Runnable> callbacks) {
    for (Runnable r : callbacks) registerResetCallback(r);
  }

  /**
   * Called by {@link Elastic#run} after the context was reset:
   * {@link #reset()}, then the registered callbacks in order.
   */
  public void onReset() {
    reset();
    for (Runnable r : resetCallbacks) r.run();
  }

  /**
   * {@link #save()}, then {@link #checkHostUpdates()}: a copy to go back to
   * after a failure. Collective in an elastic job (every rank commits at the
   * same points); throws {@link HostsUpdatedInterrupt} when hosts changed.
   */
  public void commit() {
    save();
    checkHostUpdates();
  }

  /**
   * Throws {@link HostsUpdatedInterrupt} on every rank when the launcher
   * changed the hosts since this epoch formed (on any rank's reading: the
   * ranks agree with one allreduce, so all of them throw at the same commit).
   * Outside an elastic job there is nothing to check and no collective.
   */
  public void checkHostUpdates() {
    Membership m = context.membership();
    if (!m.elastic()) return;
    if (context.any(m.hostsUpdated(), "elastic.hosts_updated")) {
      throw new HostsUpdatedInterrupt(false);
    }
  }

  /** Keeps a copy of the state to go back to. */
  public abstract void save();

  /** Goes back to the last saved copy. */
  public abstract void restore();

  /** Makes every rank's state rank 0's (collective). */
  public abstract void sync();

  /** Hook for subclasses, run first by {@link #onReset()}. */
  protected void reset() {}
}
