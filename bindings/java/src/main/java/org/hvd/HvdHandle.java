package org.hvd;

import java.util.concurrent.locks.ReentrantLock;
import org.hvd.swig.HvdNative;
import org.hvd.swig.HvdNativeConstants;

/**
 * One pending operation. {@link #await()} blocks until it completes and returns
 * its result (or throws its {@link HvdException}); {@link #poll()} tells whether
 * it has completed without blocking.
 *
 * <p>The buffers of the operation stay strongly referenced by this handle and by
 * its context until the operation has completed, even when the handle itself is
 * dropped. A wait never holds a JNI critical section or a lock the library
 * needs: it waits in short slices, between which it notices
 * {@link Thread#interrupt()} and the context's cancellation check (Spark's
 * task kill), throwing {@link HvdException#ABORTED}; the operation then goes on
 * and its buffers stay referenced until it completes or the context is closed.
 */
public final class HvdHandle<T> implements AutoCloseable {
  /** Reads an operation's result once it has succeeded (the native handle still open). */
  interface Completion<T> {
    T complete(long handle);
  }

  private static final double SLICE_S = 0.1;

  private final HvdContext ctx;
  private final String description;
  private final Completion<T> completion;
  private final Runnable cleanup;  // frees scratch memory; runs exactly once
  private final long[] recvSplits; // alltoall: filled by the completion; else null
  private Object keepAlive;        // the caller's buffers
  private long ptr;                // 0 once released
  private boolean done;
  private T result;
  private RuntimeException error;
  // Held for the whole of a wait (the native handle must not be released
  // under a waiting thread); the context's reaper only tries it.
  private final ReentrantLock lock = new ReentrantLock();

  HvdHandle(HvdContext ctx, long ptr, String description, Object keepAlive,
            Completion<T> completion, Runnable cleanup, long[] recvSplits) {
    this.ctx = ctx;
    this.recvSplits = recvSplits;
    this.ptr = ptr;
    this.description = description;
    this.keepAlive = keepAlive;
    this.completion = completion;
    this.cleanup = cleanup;
  }

  /** Waits without a limit (the library's stall inspector still bounds it). */
  public T await() {
    return await(-1);
  }

  /**
   * Waits up to timeoutSeconds (negative: no limit). Throws HvdException with
   * {@link HvdException#TIMEOUT} when the time runs out; the handle stays valid.
   */
  public T await(double timeoutSeconds) {
    lock.lock();
    try {
      return awaitLocked(timeoutSeconds);
    } finally {
      lock.unlock();
    }
  }

  private static final java.util.regex.Pattern WAITING_ON =
      java.util.regex.Pattern.compile("ranks \\[[0-9, ]*\\] have not submitted '.*'$");

  /**
   * The part of a timed-out wait's library message that names the ranks that
   * have not submitted the tensor ("; ranks [2] have not submitted 'x'"), or "".
   */
  static String waitingOn(String message) {
    if (message == null) return "";
    java.util.regex.Matcher m = WAITING_ON.matcher(message);
    return m.find() ? "; " + m.group() : "";
  }

  private T awaitLocked(double timeoutSeconds) {
    if (done) return outcome();
    final long start = System.nanoTime();
    while (true) {
      double slice = SLICE_S;
      if (timeoutSeconds >= 0) {
        double left = timeoutSeconds - (System.nanoTime() - start) / 1e9;
        slice = Math.max(0.0, Math.min(slice, left));
      }
      int st;
      try {
        st = HvdNative.hvdj_handle_wait(ptr, slice);
      } catch (HvdException e) {
        finish(null, e);
        throw e;
      }
      if (st != HvdNativeConstants.HVD_IN_PROGRESS) {
        succeed();
        return outcome();
      }
      if (Thread.interrupted()) {
        Thread.currentThread().interrupt();
        throw new HvdException(HvdException.ABORTED, "HvdHandle.await",
            description + ": the waiting thread was interrupted (the operation goes on)");
      }
      if (ctx.isCancelled()) {
        throw new HvdException(HvdException.ABORTED, "HvdHandle.await",
            description + ": cancelled by the context's cancellation check (the operation goes on)");
      }
      if (timeoutSeconds >= 0 && (System.nanoTime() - start) / 1e9 >= timeoutSeconds) {
        throw new HvdException(HvdException.TIMEOUT, "HvdHandle.await",
            description + " did not complete within " + timeoutSeconds + " s"
                + waitingOn(HvdNative.hvd_last_error()));
      }
    }
  }

  /**
   * True once the operation has completed, successfully or not; {@link #await()}
   * then returns at once (the result, or throws the error).
   */
  public boolean poll() {
    lock.lock();
    try {
      return pollLocked();
    } finally {
      lock.unlock();
    }
  }

  private boolean pollLocked() {
    if (done) return true;
    int st;
    try {
      st = HvdNative.hvd_handle_poll(ptr);
    } catch (HvdException e) {
      finish(null, e);
      return true;
    }
    if (st == HvdNativeConstants.HVD_IN_PROGRESS) return false;
    succeed();
    return true;
  }

  /**
   * For an alltoall that completed successfully: how many rows (elements, for
   * the array overloads) this rank received from each rank, in rank order; they
   * sum to the first dimension of the result. Throws IllegalStateException for
   * another operation or before completion ({@link #await()} first), and the
   * operation's own exception if it failed.
   */
  public long[] receivedSplits() {
    if (recvSplits == null) {
      throw new IllegalStateException(description + " is not an alltoall: no receive splits");
    }
    lock.lock();
    try {
      if (!done) {
        throw new IllegalStateException(description + " has not completed: await() it first");
      }
      if (error != null) throw error;
      return recvSplits.clone();
    } finally {
      lock.unlock();
    }
  }

  /** What the operation is, e.g. "allreduce 'grad.w'". */
  public String description() {
    return description;
  }

  /**
   * Releases the handle. A pending operation runs on; its buffers stay
   * referenced by the context until it completes or the context is closed.
   */
  @Override
  public void close() {
    // Nothing to do: a completed handle is already released, and a pending one
    // is left to the context, which reaps it once it completes.
  }

  // ---- internals ------------------------------------------------------------

  private void succeed() {
    T r;
    try {
      r = completion == null ? null : completion.complete(ptr);
    } catch (RuntimeException e) {
      finish(null, e);
      return;
    }
    finish(r, null);
  }

  private void finish(T r, RuntimeException e) {
    if (done) return;
    done = true;
    result = r;
    error = e;
    long p = ptr;
    ptr = 0;
    try {
      if (p != 0) HvdNative.hvd_handle_release(p);
    } catch (HvdException ignored) {
      // A released handle is gone either way.
    } finally {
      runCleanup();
      ctx.forget(this);
    }
  }

  private void runCleanup() {
    keepAlive = null;
    if (cleanup != null) cleanup.run();
  }

  private T outcome() {
    if (error != null) throw error;
    return result;
  }

  /** Called by the context to reap completed handles; never blocks. */
  boolean reapIfDone() {
    if (!lock.tryLock()) return false;
    try {
      return pollLocked();
    } finally {
      lock.unlock();
    }
  }

  /** Called by the context after hvd_context_destroy: every operation has ended. */
  void abandon(String why) {
    lock.lock();
    try {
      if (done) return;
      finish(null, new HvdException(HvdException.ABORTED, "HvdContext.close", description + ": " + why));
    } finally {
      lock.unlock();
    }
  }
}
