package org.hvd.spark;

/**
 * A barrier job asked for more ranks than the cluster has task slots. Thrown
 * by the runner before the job is submitted: Spark itself would only log
 * "Barrier stage in job N requires 3 slots, but only 2 are available. Will
 * retry up to 28 more times" and fail after about ten minutes.
 */
public final class InsufficientSlotsException extends IllegalStateException {
  private static final long serialVersionUID = 1L;
  private final int requested;
  private final int available;

  public InsufficientSlotsException(int requested, int available, String message) {
    super(message);
    this.requested = requested;
    this.available = available;
  }

  /** The number of ranks (barrier tasks) the job asked for. */
  public int requested() {
    return requested;
  }

  /** The task slots the cluster had when the runner gave up. */
  public int available() {
    return available;
  }
}
