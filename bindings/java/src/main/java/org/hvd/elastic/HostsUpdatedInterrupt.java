package org.hvd.elastic;

/**
 * Thrown by {@link State#commit()} (on every rank at the same commit) when the
 * launcher added or removed hosts since the current epoch formed:
 * {@link Elastic#run} then resets the context without restoring the state,
 * so that new workers join. {@link #skipSync()} (Horovod's skip_sync): the
 * state need not be synced after the reset; hvd cannot tell added hosts from
 * removed ones, so it is false when hvd throws it.
 */
public class HostsUpdatedInterrupt extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final boolean skipSync;

  public HostsUpdatedInterrupt(boolean skipSync) {
    super("the launcher changed the hosts of this elastic job"
        + (skipSync ? " (state sync skipped)" : ""));
    this.skipSync = skipSync;
  }

  public boolean skipSync() {
    return skipSync;
  }
}
