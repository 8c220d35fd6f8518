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
 * threads as ranks) use {@link HvdContext#create} instead.
 */
public final class Hvd {
  private static HvdContext current;  // the default context's facade while initialized
  private static int refs;
  private static boolean exitHookAdded;

  private Hvd() {}

  /** Initializes from the environment (launcher variables, HVD_*), or a world of one. */
  public static void init() {
    init(null);
  }

  /** Initializes with explicit settings; later calls only count a reference. */
  public static synchronized void init(HvdConfig config) {
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
   * Horovod, Python and Julia.
   */
  public static synchronized void shutdown() {
    NativeLibrary.load();
    if (!isInitialized()) {
      if (current != null) current.markShutDown();
      current = null;
      refs = 0;
      return;
    }
    HvdNative.hvd_shutdown();
    if (refs > 0) refs--;
    if (!isInitialized() && current != null) {
      current.markShutDown();
      current = null;
      refs = 0;
    }
  }

  public static boolean isInitialized() {
    NativeLibrary.load();
    int[] out = new int[1];
    HvdNative.hvd_is_initialized(out);
    return out[0] != 0;
  }

  /** The default context (valid until the last {@link #shutdown()}). */
  public static synchronized HvdContext context() {
    if (current == null || !isInitialized()) {
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
