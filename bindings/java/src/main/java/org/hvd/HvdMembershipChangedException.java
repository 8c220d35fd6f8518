package org.hvd;

/**
 * {@link HvdException#MEMBERSHIP_CHANGED}: the membership of an elastic job
 * changed under this operation (a peer died, stopped or was cut off; the
 * context is being reset; or the launcher ended this worker's part in the
 * job). The context stays stopped until {@link HvdContext#reset()} forms the
 * job again; {@link org.hvd.elastic.Elastic#run} does that, after restoring
 * the last committed state.
 *
 * <p>Thrown by native code for every call that returns
 * {@code HVD_ERR_MEMBERSHIP_CHANGED} (docs/elastic.md).
 */
public class HvdMembershipChangedException extends HvdException {
  private static final long serialVersionUID = 1L;

  /** The core's words when the launcher ends this worker (the job is ending). */
  static final String LAUNCHER_ENDED = "the launcher ends this worker";

  /** Called from native code (hvd.i) and by {@link HvdException#of}. */
  public HvdMembershipChangedException(int status, String function, String message) {
    super(status, function, message);
  }

  public HvdMembershipChangedException(String function, String message) {
    this(MEMBERSHIP_CHANGED, function, message);
  }

  /**
   * True when the launcher ended this worker's part in the job (fewer workers
   * than --min-np, the reset limit, a worker no longer wanted): resetting
   * again cannot succeed, the worker should exit.
   */
  public boolean launcherEnded() {
    String m = libraryMessage();
    return m != null && m.contains(LAUNCHER_ENDED);
  }
}
