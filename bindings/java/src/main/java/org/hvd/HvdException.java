package org.hvd;

/**
 * A failed hvd call: the library's status code, the C function that failed and
 * the library's message ({@code hvd_last_error()}, read on the failing thread
 * inside the same native call).
 *
 * <p>Unchecked, so it passes through Spark closures and lambdas; catch it where
 * a failure is expected (for example {@link #status()} ==
 * {@link #MISMATCH} after ranks disagreed on a tensor's shape).
 *
 * <p>A status of {@link #MEMBERSHIP_CHANGED} always comes as the subclass
 * {@link HvdMembershipChangedException} (from native code and from
 * {@link #of}), so elastic code can catch that alone.
 */
public class HvdException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  // Status codes of include/hvd.h (numbers are frozen there).
  public static final int IN_PROGRESS = 1;
  public static final int INVALID_ARGUMENT = -1;
  public static final int NOT_INITIALIZED = -2;
  public static final int NO_MEMORY = -3;
  public static final int TIMEOUT = -4;
  public static final int MISMATCH = -5;
  public static final int TRANSPORT = -6;
  public static final int UNSUPPORTED = -7;
  public static final int NOT_FOUND = -8;
  public static final int ABORTED = -9;
  public static final int DUPLICATE_NAME = -10;
  public static final int VERSION = -11;
  public static final int RENDEZVOUS = -12;
  public static final int INTERNAL = -13;
  /**
   * An elastic job's membership changed (a peer was lost, or the launcher
   * ended this worker's part): thrown as {@link HvdMembershipChangedException}.
   */
  public static final int MEMBERSHIP_CHANGED = -14;

  private final int status;
  private final String function;
  private final String libraryMessage;

  /** Called from native code (hvd.i) and by the facade. */
  public HvdException(int status, String function, String message) {
    super(statusName(status) + " (" + status + ") in " + function + ": " + message);
    this.status = status;
    this.function = function;
    this.libraryMessage = message;
  }

  public HvdException(int status, String function, String message, Throwable cause) {
    this(status, function, message);
    initCause(cause);
  }

  /**
   * The exception for a status: {@link HvdMembershipChangedException} for
   * {@link #MEMBERSHIP_CHANGED}, else an HvdException.
   */
  public static HvdException of(int status, String function, String message) {
    return status == MEMBERSHIP_CHANGED
        ? new HvdMembershipChangedException(status, function, message)
        : new HvdException(status, function, message);
  }

  /** The hvd_status_t value (negative). */
  public int status() {
    return status;
  }

  /** The C function (or facade method) that failed. */
  public String function() {
    return function;
  }

  /** The message alone, as the library wrote it. */
  public String libraryMessage() {
    return libraryMessage;
  }

  /** The status code's name in include/hvd.h, e.g. "HVD_ERR_MISMATCH". */
  public static String statusName(int status) {
    switch (status) {
      case 0: return "HVD_OK";
      case IN_PROGRESS: return "HVD_IN_PROGRESS";
      case INVALID_ARGUMENT: return "HVD_ERR_INVALID_ARGUMENT";
      case NOT_INITIALIZED: return "HVD_ERR_NOT_INITIALIZED";
      case NO_MEMORY: return "HVD_ERR_NO_MEMORY";
      case TIMEOUT: return "HVD_ERR_TIMEOUT";
      case MISMATCH: return "HVD_ERR_MISMATCH";
      case TRANSPORT: return "HVD_ERR_TRANSPORT";
      case UNSUPPORTED: return "HVD_ERR_UNSUPPORTED";
      case NOT_FOUND: return "HVD_ERR_NOT_FOUND";
      case ABORTED: return "HVD_ERR_ABORTED";
      case DUPLICATE_NAME: return "HVD_ERR_DUPLICATE_NAME";
      case VERSION: return "HVD_ERR_VERSION";
      case RENDEZVOUS: return "HVD_ERR_RENDEZVOUS";
      case INTERNAL: return "HVD_ERR_INTERNAL";
      case MEMBERSHIP_CHANGED: return "HVD_ERR_MEMBERSHIP_CHANGED";
      default: return "HVD_STATUS_" + status;
    }
  }
}
