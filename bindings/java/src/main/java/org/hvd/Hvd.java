package org.hvd;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import org.hvd.swig.HvdNative;

/**
 * Horovod-style API on the default context.
 *
 * <pre>{@code
 * Hvd.init();                                   // hvdrun, torchrun, mpirun, Slurm, or a world of one
 * float[] avg = Hvd.allreduce("grad", grad);   // the op defaults to ReduceOp.AVERAGE
 * float[] sum = Hvd.allreduce("n", count, ReduceOp.SUM);
 * Hvd.shutdown();
 * }</pre>
 *
 * {@link #init()} is reference counted like hvd_init: every call needs a
 * {@link #shutdown()}. For several communicators in one JVM (Spark local mode,
 * threads as ranks) use {@link HvdContext#create}, and {@link #bind} each to
 * its thread where code uses the static API.
 *
 * <p>Every static call acts on the context of the calling thread: the one bound
 * to it with {@link #bind(HvdContext)} (the Spark runner binds each task's), or
 * else the process's default context of {@link #init()}. Inside a bound scope
 * {@code init()} only checks that its settings fit the bound context and counts
 * a reference, {@code shutdown()} releases one and never destroys anything,
 * and {@code isInitialized()} is true, so code written for hvdrun runs
 * unchanged on a thread that is one rank among several in the JVM. A binding
 * belongs to the thread that made it: threads started inside the scope do not
 * inherit it (bind {@link #context()} there to share it).
 */
public final class Hvd {
  private static HvdContext current;  // the default context's facade while initialized
  private static int refs;
  private static boolean exitHookAdded;
  /** The innermost open binding of each thread (not inherited by new threads). */
  private static final ThreadLocal<Binding> BOUND = new ThreadLocal<>();

  private Hvd() {}

  /**
   * A context bound to one thread, from {@link Hvd#bind(HvdContext)} to
   * {@link #close()}. Closing restores the binding that was current when this
   * one was made (none: the process default again); it does not close the
   * context.
   */
  public static final class Binding implements AutoCloseable {
    private final HvdContext context;
    private final Binding previous;
    private final Thread owner;
    private volatile boolean closed;
    private volatile int initCount;

    private Binding(HvdContext context, Binding previous, Thread owner) {
      this.context = context;
      this.previous = previous;
      this.owner = owner;
    }

    /** The bound context. */
    public HvdContext context() {
      return context;
    }

    /** {@link Hvd#init()} calls made in this scope and not yet matched by {@link Hvd#shutdown()}. */
    public int initCount() {
      return initCount;
    }

    public boolean isClosed() {
      return closed;
    }

    /**
     * Ends the binding on its thread (idempotent): the binding current before
     * {@link Hvd#bind} becomes current again. Bindings made after this one on
     * the thread and still open end with it (an inner scope that was never
     * closed cannot outlive the outer one). Throws IllegalStateException on
     * another thread: a thread's binding can only be changed by that thread.
     */
    @Override
    public void close() {
      if (closed) return;
      if (Thread.currentThread() != owner) {
        throw new IllegalStateException("Hvd.Binding.close: the binding was made on thread '"
            + owner.getName() + "' and can only be closed there, not on '"
            + Thread.currentThread().getName() + "'");
      }
      for (Binding b = BOUND.get(); b != null && b != this; b = b.previous) b.closed = true;
      closed = true;
      if (previous == null) BOUND.remove();
      else BOUND.set(previous);
    }

    private HvdContext open(String fn) {
      if (context.isClosed()) {
        throw new HvdException(HvdException.NOT_INITIALIZED, fn,
            "the context bound to this thread (Hvd.bind) was closed");
      }
      return context;
    }

    /** Hvd.init inside the scope: settings given must describe the bound context. */
    private void init(HvdConfig config) {
      HvdContext c = open("Hvd.init");
      if (config != null) {
        check("rank", config.rank(), c.rank(), c);
        check("size", config.size(), c.size(), c);
        check("localRank", config.localRank(), c.localRank(), c);
        check("localSize", config.localSize(), c.localSize(), c);
        check("crossRank", config.crossRank(), c.crossRank(), c);
        check("crossSize", config.crossSize(), c.crossSize(), c);
      }
      initCount++;
    }

    private static void check(String what, Integer asked, int bound, HvdContext c) {
      if (asked != null && asked != bound) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "Hvd.init",
            "this thread is bound to a context (Hvd.bind) of rank " + c.rank() + " of " + c.size()
                + " whose " + what + " is " + bound + ", but the settings ask for " + what + " "
                + asked + "; inside a bound scope Hvd.init() does not create a context");
      }
    }

    private void shutdown() {
      if (initCount > 0) initCount--;
    }

    @Override
    public String toString() {
      return "Hvd.Binding(thread '" + owner.getName() + "', " + (closed ? "closed" : "open") + ")";
    }
  }

  /**
   * Binds ctx to the calling thread: until the returned binding is closed,
   * every static call on this thread acts on ctx instead of the process
   * default ({@code Hvd.rank()} is {@code ctx.rank()}, {@code Hvd.allreduce}
   * reduces over ctx's ranks). Bindings nest; use try-with-resources:
   *
   * <pre>{@code
   * try (Hvd.Binding b = Hvd.bind(ctx)) {
   *   train();   // code written against Hvd.*
   * }
   * }</pre>
   *
   * Inside the scope {@link #init} checks that explicit settings (rank, size,
   * local and cross topology) match ctx and counts a reference, {@link
   * #shutdown()} only releases one (ctx stays open for its owner), and
   * {@link #isInitialized()} is true while ctx is open. Not inherited by
   * threads started inside the scope.
   */
  public static Binding bind(HvdContext ctx) {
    if (ctx == null) throw new IllegalArgumentException("Hvd.bind: the context is null");
    if (ctx.isClosed()) {
      throw new HvdException(HvdException.NOT_INITIALIZED, "Hvd.bind",
          ctx.isDefault() ? "hvd is not initialized (Hvd.init)" : "the context was closed");
    }
    Binding b = new Binding(ctx, BOUND.get(), Thread.currentThread());
    BOUND.set(b);
    return b;
  }

  /** The innermost open binding of the calling thread, or null (Hvd.* then use the default context). */
  public static Binding binding() {
    return BOUND.get();
  }

  /**
   * Initializes from the environment (launcher variables, HVD_*), or a world of
   * one; on a thread with a {@link #bind bound} context, only counts a reference.
   */
  public static void init() {
    init(null);
  }

  /**
   * Initializes with explicit settings; later calls only count a reference. On
   * a thread with a {@link #bind bound} context it creates nothing: it checks
   * that the settings' rank, size, local and cross topology (those given) are
   * the bound context's (else HvdException, HVD_ERR_INVALID_ARGUMENT) and
   * counts a reference.
   */
  public static void init(HvdConfig config) {
    Binding b = BOUND.get();
    if (b != null) {
      b.init(config);
      return;
    }
    initDefault(config);
  }

  private static synchronized void initDefault(HvdConfig config) {
    NativeLibrary.load();
    if (config == null) config = HvdConfig.fromEnvironment();
    HvdConfig.OobAdapter oob =
        config.oobAllgather() == null ? null : new HvdConfig.OobAdapter(config.oobAllgather());
    org.hvd.swig.HvdjParams params = config.toNative(oob);
    try {
      HvdNative.hvdj_init(params);
    } catch (HvdException e) {
      if (oob != null && oob.error != null) e.initCause(oob.error);
      throw e;
    } finally {
      params.delete();
    }
    if (current == null || current.isClosed()) current = HvdContext.forDefault();
    refs++;
    if (!exitHookAdded) {
      Runtime.getRuntime().addShutdownHook(new Thread(Hvd::shutdownAtExit, "hvd-shutdown-at-exit"));
      exitHookAdded = true;
    }
  }

  /**
   * The JVM's exit shuts the default context down if the program did not (as
   * Python's atexit does): under mpirun that finalizes MPI, without which the
   * launcher reports the rank as exiting improperly. Takes no lock: a thread
   * may be blocked inside a synchronized method (a rendezvous in init) while
   * the JVM exits. hvd_shutdown is thread-safe and counts references, so it
   * is called until the context is gone (bounded, in case another thread
   * keeps calling init).
   */
  private static void shutdownAtExit() {
    try {
      int[] on = new int[1];
      for (int i = 0; i < 1024; ++i) {
        HvdNative.hvd_is_initialized(on);
        if (on[0] == 0) return;
        HvdNative.hvd_shutdown();
      }
    } catch (Throwable t) {
      // Nothing can be reported once the JVM is exiting.
    }
  }

  /**
   * Releases one {@link #init} reference; the last one destroys the default
   * context (pending operations complete with ABORTED). Without hvd
   * initialized (a second shutdown, or none before) it does nothing, as in
   * Horovod, Python and Julia. On a thread with a {@link #bind bound} context
   * it only releases a reference of the scope: the bound context stays open
   * (its owner closes it) and the process default is not touched.
   */
  public static void shutdown() {
    Binding b = BOUND.get();
    if (b != null) {
      b.shutdown();
      return;
    }
    shutdownDefault();
  }

  private static synchronized void shutdownDefault() {
    NativeLibrary.load();
    if (!defaultInitialized()) {
      if (current != null) current.markShutDown();
      current = null;
      refs = 0;
      return;
    }
    HvdNative.hvd_shutdown();
    if (refs > 0) refs--;
    if (!defaultInitialized() && current != null) {
      current.markShutDown();
      current = null;
      refs = 0;
    }
  }

  /**
   * True when the calling thread's Hvd.* calls have a context: its bound one
   * is open, or (on a thread without a binding) the default context exists.
   */
  public static boolean isInitialized() {
    Binding b = BOUND.get();
    if (b != null) return !b.context.isClosed();
    return defaultInitialized();
  }

  private static boolean defaultInitialized() {
    NativeLibrary.load();
    int[] out = new int[1];
    HvdNative.hvd_is_initialized(out);
    return out[0] != 0;
  }

  /**
   * The context the calling thread's Hvd.* calls act on: its bound one
   * ({@link #bind}), else the default context (valid until the last
   * {@link #shutdown()}).
   */
  public static HvdContext context() {
    Binding b = BOUND.get();
    if (b != null) return b.open("Hvd.context");
    return defaultContext();
  }

  private static synchronized HvdContext defaultContext() {
    if (current == null || !defaultInitialized()) {
      throw new HvdException(HvdException.NOT_INITIALIZED, "Hvd.context",
          "hvd is not initialized: call Hvd.init() first");
    }
    return current;
  }

  /** Run-time version of the loaded libhvd: {major, minor, patch}. */
  public static int[] libraryVersion() {
    NativeLibrary.load();
    int[] a = new int[1], b = new int[1], c = new int[1];
    HvdNative.hvd_version(a, b, c);
    return new int[] {a[0], b[0], c[0]};
  }

  /** The folder libhvd was loaded from (the jar's extraction folder, or -Dhvd.native.path). */
  public static String libraryFolder() {
    return NativeLibrary.folder().toString();
  }

  public static int rank() { return context().rank(); }
  public static int size() { return context().size(); }
  public static int localRank() { return context().localRank(); }
  public static int localSize() { return context().localSize(); }
  public static int crossRank() { return context().crossRank(); }
  public static int crossSize() { return context().crossSize(); }
  /** {@link HvdContext#membership()} of the calling thread's context (elastic jobs). */
  public static Membership membership() { return context().membership(); }
  /** {@link HvdContext#reset()} of the calling thread's context (elastic jobs). */
  public static void reset() { context().reset(); }

  // ---- collectives on the default context (see HvdContext for the contract) ----

  public static float[] allreduce(float[] data, ReduceOp op) { return context().allreduce(data, op); }
  public static float[] allreduce(String name, float[] data, ReduceOp op) { return context().allreduce(name, data, op); }
  public static double[] allreduce(double[] data, ReduceOp op) { return context().allreduce(data, op); }
  public static double[] allreduce(String name, double[] data, ReduceOp op) { return context().allreduce(name, data, op); }
  public static int[] allreduce(int[] data, ReduceOp op) { return context().allreduce(data, op); }
  public static int[] allreduce(String name, int[] data, ReduceOp op) { return context().allreduce(name, data, op); }
  public static long[] allreduce(long[] data, ReduceOp op) { return context().allreduce(data, op); }
  public static long[] allreduce(String name, long[] data, ReduceOp op) { return context().allreduce(name, data, op); }
  public static <B extends Buffer> B allreduce(String name, B in, B out, ReduceOp op) { return context().allreduce(name, in, out, op); }

  public static HvdHandle<float[]> allreduceAsync(String name, float[] data, ReduceOp op) { return context().allreduceAsync(name, data, op); }
  public static HvdHandle<double[]> allreduceAsync(String name, double[] data, ReduceOp op) { return context().allreduceAsync(name, data, op); }
  public static HvdHandle<int[]> allreduceAsync(String name, int[] data, ReduceOp op) { return context().allreduceAsync(name, data, op); }
  public static HvdHandle<long[]> allreduceAsync(String name, long[] data, ReduceOp op) { return context().allreduceAsync(name, data, op); }
  public static <B extends Buffer> HvdHandle<B> allreduceAsync(String name, B in, B out, ReduceOp op) { return context().allreduceAsync(name, in, out, op); }
  public static ByteBuffer allreduce(String name, ByteBuffer in, ByteBuffer out, DataType dtype, ReduceOp op) { return context().allreduce(name, in, out, dtype, op); }
  public static HvdHandle<ByteBuffer> allreduceAsync(String name, ByteBuffer in, ByteBuffer out, DataType dtype, ReduceOp op) { return context().allreduceAsync(name, in, out, dtype, op); }
  public static HvdHandle<ByteBuffer> allreduceAsync(String name, ByteBuffer in, ByteBuffer out, DataType dtype, long[] shape, ReduceOp op, double prescale, double postscale) { return context().allreduceAsync(name, in, out, dtype, shape, op, prescale, postscale); }

  // Without an op: ReduceOp.AVERAGE, as in Horovod, Python and Julia.
  public static float[] allreduce(float[] data) { return context().allreduce(data); }
  public static float[] allreduce(String name, float[] data) { return context().allreduce(name, data); }
  public static double[] allreduce(double[] data) { return context().allreduce(data); }
  public static double[] allreduce(String name, double[] data) { return context().allreduce(name, data); }
  public static int[] allreduce(int[] data) { return context().allreduce(data); }
  public static int[] allreduce(String name, int[] data) { return context().allreduce(name, data); }
  public static long[] allreduce(long[] data) { return context().allreduce(data); }
  public static long[] allreduce(String name, long[] data) { return context().allreduce(name, data); }
  public static <B extends Buffer> B allreduce(String name, B in, B out) { return context().allreduce(name, in, out); }
  public static ByteBuffer allreduce(String name, ByteBuffer in, ByteBuffer out, DataType dtype) { return context().allreduce(name, in, out, dtype); }
  public static HvdHandle<float[]> allreduceAsync(String name, float[] data) { return context().allreduceAsync(name, data); }
  public static HvdHandle<double[]> allreduceAsync(String name, double[] data) { return context().allreduceAsync(name, data); }
  public static HvdHandle<int[]> allreduceAsync(String name, int[] data) { return context().allreduceAsync(name, data); }
  public static HvdHandle<long[]> allreduceAsync(String name, long[] data) { return context().allreduceAsync(name, data); }
  public static <B extends Buffer> HvdHandle<B> allreduceAsync(String name, B in, B out) { return context().allreduceAsync(name, in, out); }
  public static HvdHandle<ByteBuffer> allreduceAsync(String name, ByteBuffer in, ByteBuffer out, DataType dtype) { return context().allreduceAsync(name, in, out, dtype); }

  public static float[][] groupedAllreduce(String[] names, float[][] data, ReduceOp op) { return context().groupedAllreduce(names, data, op); }
  public static double[][] groupedAllreduce(String[] names, double[][] data, ReduceOp op) { return context().groupedAllreduce(names, data, op); }
  public static float[][] groupedAllreduce(String[] names, float[][] data) { return context().groupedAllreduce(names, data); }
  public static double[][] groupedAllreduce(String[] names, double[][] data) { return context().groupedAllreduce(names, data); }

  public static float[] allgather(String name, float[] data) { return context().allgather(name, data); }
  public static double[] allgather(String name, double[] data) { return context().allgather(name, data); }
  public static int[] allgather(String name, int[] data) { return context().allgather(name, data); }
  public static long[] allgather(String name, long[] data) { return context().allgather(name, data); }
  public static Gathered allgather(String name, ByteBuffer in, DataType dtype, long[] shape) { return context().allgather(name, in, dtype, shape); }
  public static HvdHandle<Gathered> allgatherAsync(String name, ByteBuffer in, DataType dtype, long[] shape) { return context().allgatherAsync(name, in, dtype, shape); }
  public static HvdHandle<float[]> allgatherAsync(String name, float[] data) { return context().allgatherAsync(name, data); }
  public static HvdHandle<double[]> allgatherAsync(String name, double[] data) { return context().allgatherAsync(name, data); }

  public static float[] alltoall(String name, float[] data, long[] splits) { return context().alltoall(name, data, splits); }
  public static double[] alltoall(String name, double[] data, long[] splits) { return context().alltoall(name, data, splits); }
  public static int[] alltoall(String name, int[] data, long[] splits) { return context().alltoall(name, data, splits); }
  public static long[] alltoall(String name, long[] data, long[] splits) { return context().alltoall(name, data, splits); }
  public static Gathered alltoall(String name, ByteBuffer in, DataType dtype, long[] shape, long[] splits) { return context().alltoall(name, in, dtype, shape, splits); }
  public static HvdHandle<Gathered> alltoallAsync(String name, ByteBuffer in, DataType dtype, long[] shape, long[] splits) { return context().alltoallAsync(name, in, dtype, shape, splits); }
  public static HvdHandle<float[]> alltoallAsync(String name, float[] data, long[] splits) { return context().alltoallAsync(name, data, splits); }
  public static HvdHandle<double[]> alltoallAsync(String name, double[] data, long[] splits) { return context().alltoallAsync(name, data, splits); }
  public static HvdHandle<int[]> alltoallAsync(String name, int[] data, long[] splits) { return context().alltoallAsync(name, data, splits); }
  public static HvdHandle<long[]> alltoallAsync(String name, long[] data, long[] splits) { return context().alltoallAsync(name, data, splits); }

  public static float[] reducescatter(String name, float[] data, ReduceOp op) { return context().reducescatter(name, data, op); }
  public static double[] reducescatter(String name, double[] data, ReduceOp op) { return context().reducescatter(name, data, op); }
  public static int[] reducescatter(String name, int[] data, ReduceOp op) { return context().reducescatter(name, data, op); }
  public static long[] reducescatter(String name, long[] data, ReduceOp op) { return context().reducescatter(name, data, op); }
  public static Gathered reducescatter(String name, ByteBuffer in, DataType dtype, long[] shape, ReduceOp op) { return context().reducescatter(name, in, dtype, shape, op); }
  public static HvdHandle<Gathered> reducescatterAsync(String name, ByteBuffer in, DataType dtype, long[] shape, ReduceOp op) { return context().reducescatterAsync(name, in, dtype, shape, op); }
  public static float[] reducescatter(String name, float[] data) { return context().reducescatter(name, data); }
  public static double[] reducescatter(String name, double[] data) { return context().reducescatter(name, data); }
  public static int[] reducescatter(String name, int[] data) { return context().reducescatter(name, data); }
  public static long[] reducescatter(String name, long[] data) { return context().reducescatter(name, data); }
  public static Gathered reducescatter(String name, ByteBuffer in, DataType dtype, long[] shape) { return context().reducescatter(name, in, dtype, shape); }
  public static HvdHandle<float[]> reducescatterAsync(String name, float[] data, ReduceOp op) { return context().reducescatterAsync(name, data, op); }
  public static HvdHandle<double[]> reducescatterAsync(String name, double[] data, ReduceOp op) { return context().reducescatterAsync(name, data, op); }
  public static HvdHandle<int[]> reducescatterAsync(String name, int[] data, ReduceOp op) { return context().reducescatterAsync(name, data, op); }
  public static HvdHandle<long[]> reducescatterAsync(String name, long[] data, ReduceOp op) { return context().reducescatterAsync(name, data, op); }

  public static float[] broadcast(String name, float[] data, int root) { return context().broadcast(name, data, root); }
  public static double[] broadcast(String name, double[] data, int root) { return context().broadcast(name, data, root); }
  public static int[] broadcast(String name, int[] data, int root) { return context().broadcast(name, data, root); }
  public static long[] broadcast(String name, long[] data, int root) { return context().broadcast(name, data, root); }
  public static <B extends Buffer> B broadcast(String name, B in, B out, int root) { return context().broadcast(name, in, out, root); }
  public static <B extends Buffer> HvdHandle<B> broadcastAsync(String name, B in, B out, int root) { return context().broadcastAsync(name, in, out, root); }
  public static ByteBuffer broadcast(String name, ByteBuffer in, ByteBuffer out, DataType dtype, int root) { return context().broadcast(name, in, out, dtype, root); }
  public static HvdHandle<ByteBuffer> broadcastAsync(String name, ByteBuffer in, ByteBuffer out, DataType dtype, int root) { return context().broadcastAsync(name, in, out, dtype, root); }
  public static HvdHandle<float[]> broadcastAsync(String name, float[] data, int root) { return context().broadcastAsync(name, data, root); }
  public static HvdHandle<double[]> broadcastAsync(String name, double[] data, int root) { return context().broadcastAsync(name, data, root); }

  public static void barrier() { context().barrier(); }
  public static HvdHandle<Void> barrierAsync() { return context().barrierAsync(); }
  public static void join() { context().join(); }
}
