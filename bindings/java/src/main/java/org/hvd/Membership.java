package org.hvd;

/**
 * A context's place in an elastic job ({@code hvd_context_membership}):
 * whether the job is elastic, the epoch the context was formed in (0 the
 * first, and 0 outside an elastic job), and whether the launcher added or
 * removed hosts since then.
 */
public final class Membership {
  private final boolean elastic;
  private final boolean hostsUpdated;
  private final long epoch;

  public Membership(boolean elastic, boolean hostsUpdated, long epoch) {
    this.elastic = elastic;
    this.hostsUpdated = hostsUpdated;
    this.epoch = epoch;
  }

  /** True in an elastic job ({@link HvdContext#reset()} works). */
  public boolean elastic() {
    return elastic;
  }

  /**
   * True when the launcher added or removed hosts since this epoch formed
   * (the value of one query: it costs a round trip to the launcher's store).
   */
  public boolean hostsUpdated() {
    return hostsUpdated;
  }

  /** The epoch the context was formed in: 0 the first, one more per reset of the job. */
  public long epoch() {
    return epoch;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof Membership)) return false;
    Membership m = (Membership) o;
    return elastic == m.elastic && hostsUpdated == m.hostsUpdated && epoch == m.epoch;
  }

  @Override
  public int hashCode() {
    return Long.hashCode(epoch) * 4 + (elastic ? 2 : 0) + (hostsUpdated ? 1 : 0);
  }

  @Override
  public String toString() {
    return "Membership(elastic=" + elastic + ", hostsUpdated=" + hostsUpdated + ", epoch=" + epoch
        + ")";
  }
}
