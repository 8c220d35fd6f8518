package org.hvd;

import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.nio.ShortBuffer;
import java.util.ArrayList;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.BooleanSupplier;
import org.hvd.swig.HvdNative;
import org.hvd.swig.HvdjParams;

/**
 * A communicator: the ranks of one job, with its own background thread,
 * transport and fusion buffer. Any number may live in one JVM (threads as
 * ranks, Spark local mode, sub-jobs); {@link #create} is collective over the
 * ranks, and {@link #close()} destroys it (pending operations complete with
 * {@link HvdException#ABORTED}, peers are told).
 *
 * <p>Operations are matched across ranks by name, not call order. Overloads
 * without a name use {@code <op>.noname.<n>}, counted per context: ranks must
 * then issue their unnamed operations in the same order.
 *
 * <p>Data:
 * <ul>
 *   <li>arrays ({@code float[]}, {@code double[]}, {@code int[]}, {@code long[]}):
 *       copied once into native memory, and the result copied once into a new
 *       array; the argument is never modified;
 *   <li>direct buffers in native byte order ({@link ByteBuffer#allocateDirect} +
 *       {@code order(ByteOrder.nativeOrder())}, or views of one): zero-copy, from
 *       {@code position()} for {@code remaining()} elements, positions unchanged;
 *       {@code in == out} works in place;
 *   <li>other buffers (heap, read-only input, other byte order): copied once each way.
 * </ul>
 * Typed buffers imply the element type (Float: FLOAT32, Double: FLOAT64, Int:
 * INT32, Long: INT64, Short: INT16). A {@link ByteBuffer} carries no element
 * type: every operation on one takes an explicit {@link DataType}, and the
 * untyped forms ({@code allreduce(name, in, out, op)}, {@code broadcast(name,
 * in, out, root)} with ByteBuffers) throw {@link IllegalArgumentException}
 * instead of reducing the bytes as UINT8. A ByteBuffer's {@code remaining()}
 * must be a multiple of the DataType's size, and for elements wider than one
 * byte its {@link ByteBuffer#order()} must be the native order (a new
 * ByteBuffer starts BIG_ENDIAN; the library reads raw memory), else
 * IllegalArgumentException; a typed view ({@code bb.asFloatBuffer()}) of a
 * buffer in the other order is converted instead.
 *
 * <p>Reductions default to {@link ReduceOp#AVERAGE} where the op is left out,
 * as in Horovod and the Python and Julia bindings.
 *
 * <p>Process sets: {@link #split(int, int)} and {@link #processSet(int...)}
 * make a context over some of this one's ranks (no new rendezvous; it shares
 * this context's connections and background thread). It is an HvdContext like
 * any other: every operation works on it, its ranks are {@code 0 .. n-1} in
 * the set's order, broadcast roots are ranks within the set, and its names
 * are its own. Ranks outside the new set get {@code null}.
 */
public final class HvdContext implements AutoCloseable {
  /**
   * The color for {@link #split(int, int)} that joins no set (the rank gets
   * null): {@code HVD_UNDEFINED_COLOR}, MPI_UNDEFINED's counterpart.
   */
  public static final int UNDEFINED_COLOR = -1;

  private final boolean isDefault;
  private final HvdContext parent;  // the context this process set was made from; else null
  private volatile long ptr;  // 0 for the default context (NULL in the C API)
  private volatile boolean closed;
  private volatile String closedWhy = "the context was closed";
  /** Process sets made from this context and not yet closed. */
  private final Set<HvdContext> children = ConcurrentHashMap.newKeySet();
  private final ReentrantReadWriteLock life = new ReentrantReadWriteLock();
  private final Set<HvdHandle<?>> pending = ConcurrentHashMap.newKeySet();
  private final ConcurrentHashMap<String, AtomicLong> unnamed = new ConcurrentHashMap<>();
  private volatile BooleanSupplier cancellation;

  private HvdContext(long ptr, boolean isDefault, HvdContext parent) {
    this.ptr = ptr;
    this.isDefault = isDefault;
    this.parent = parent;
  }

  /** Creates a context (collective: every rank of the job calls it). */
  public static HvdContext create(HvdConfig config) {
    NativeLibrary.load();
    if (config == null) config = HvdConfig.fromEnvironment();
    HvdConfig.OobAdapter oob =
        config.oobAllgather() == null ? null : new HvdConfig.OobAdapter(config.oobAllgather());
    HvdjParams params = config.toNative(oob);
    long[] out = new long[1];
    try {
      HvdNative.hvdj_context_create(params, out);
    } catch (HvdException e) {
      if (oob != null && oob.error != null) e.initCause(oob.error);
      throw e;
    } finally {
      params.delete();
    }
    return new HvdContext(out[0], false, null);
  }

  /** The default context's facade (made by {@link Hvd}). */
  static HvdContext forDefault() {
    return new HvdContext(0, true, null);
  }

  /**
   * A check run between wait slices: when it returns true, blocking calls and
   * {@link HvdHandle#await()} throw {@link HvdException#ABORTED}. The Spark
   * runner sets it to the task's kill flag, so a killed task leaves a
   * collective within about 0.1 s.
   */
  public void setCancellationCheck(BooleanSupplier check) {
    this.cancellation = check;
  }

  boolean isCancelled() {
    BooleanSupplier c = cancellation;
    try {
      return c != null && c.getAsBoolean();
    } catch (RuntimeException e) {
      return false;
    }
  }

  /** True for the context of {@link Hvd#init()}. */
  public boolean isDefault() {
    return isDefault;
  }

  public boolean isClosed() {
    return closed;
  }

  /**
   * Destroys an explicit context: pending operations complete with ABORTED and
   * the other ranks are told. Idempotent. For the default context use
   * {@link Hvd#shutdown()}; close() on it does nothing.
   *
   * <p>On a process set this is collective over the set's members (not the
   * parent's other ranks): it returns once every member has closed the set
   * (bounded by the stall inspector, as any operation), and the set's pending
   * operations complete with ABORTED. The set is freed whatever happens; a
   * failure still throws HvdException.
   *
   * <p>Closing a context that still has process sets stops them on every rank
   * (their pending operations complete with ABORTED: the parent's ranks
   * schedule the sets' operations together, so meet in a barrier on the
   * parent before closing it) and then closes this rank's sets too: a set's
   * native destroy only frees memory once its parent is gone, so no rank waits
   * there. Later calls on such a set throw {@link HvdException#NOT_INITIALIZED}.
   */
  @Override
  public void close() {
    if (isDefault) return;
    closeAs("the context was closed");
  }

  private void closeAs(String why) {
    life.writeLock().lock();
    try {
      if (closed) return;
      closedWhy = why;
      closed = true;
      long p = ptr;
      ptr = 0;
      try {
        HvdNative.hvd_context_destroy(p);
      } finally {
        abandonAll(why);
        if (parent != null) parent.children.remove(this);
      }
    } finally {
      life.writeLock().unlock();
      // After the native destroy: the sets' destroys are then local.
      closeChildren();
    }
  }

  /** Closes the process sets of a context that was just destroyed. */
  private void closeChildren() {
    RuntimeException first = null;
    for (HvdContext c : new ArrayList<>(children)) {
      try {
        c.closeAs("its parent context was closed");
      } catch (RuntimeException e) {
        if (first == null) first = e;
      }
    }
    children.clear();
    if (first != null) throw first;
  }

  /** The default context was destroyed by its last {@link Hvd#shutdown()}. */
  void markShutDown() {
    life.writeLock().lock();
    try {
      closedWhy = "hvd was shut down";
      closed = true;
      abandonAll("hvd was shut down");
    } finally {
      life.writeLock().unlock();
    }
    closeChildren();
  }

  private void abandonAll(String why) {
    for (HvdHandle<?> h : new ArrayList<>(pending)) h.abandon(why);
    pending.clear();
  }

  void forget(HvdHandle<?> h) {
    pending.remove(h);
  }

  // ---- topology -------------------------------------------------------------

  public int rank() {
    return intQuery(0);
  }

  public int size() {
    return intQuery(1);
  }

  public int localRank() {
    return intQuery(2);
  }

  public int localSize() {
    return intQuery(3);
  }

  public int crossRank() {
    return intQuery(4);
  }

  public int crossSize() {
    return intQuery(5);
  }

  /** The transport in use: "local", "gloo", "mpi", ... */
  public String transport() {
    String[] out = new String[1];
    life.readLock().lock();
    try {
      checkOpen();
      HvdNative.hvd_context_transport(ptr, out);
    } finally {
      life.readLock().unlock();
    }
    return out[0];
  }

  /**
   * This rank's metrics (docs/metrics.md): the library's JSON report
   * ({@code "version": 1}) of this context's job context and its live sets.
   */
  public String metrics() {
    return metricsText(0);
  }

  /** The same report in Prometheus' text format. */
  public String metricsPrometheus() {
    return metricsText(1);
  }

  private String metricsText(int format) {
    String[] out = new String[1];
    life.readLock().lock();
    try {
      checkOpen();
      HvdNative.hvdj_metrics(ptr, format, out);
    } finally {
      life.readLock().unlock();
    }
    return out[0];
  }

  // ---- elastic jobs (docs/elastic.md) ------------------------------------------

  /**
   * This context's place in an elastic job: {@link Membership#elastic()},
   * {@link Membership#epoch()}, and {@link Membership#hostsUpdated()} (one
   * round trip to the launcher's store). Outside an elastic job: not elastic,
   * epoch 0, no hosts updated. A process set answers for its parent's job.
   */
  public Membership membership() {
    long[] m;
    life.readLock().lock();
    try {
      checkOpen();
      m = HvdNative.hvdj_context_membership(ptr);
    } finally {
      life.readLock().unlock();
    }
    return new Membership(m[0] != 0, m[1] != 0, m[2]);
  }

  /**
   * Forms the job again after its membership changed ({@code hvd_context_reset}):
   * pending operations complete with {@link HvdMembershipChangedException},
   * the context leaves its epoch, waits (at most the elastic timeout) for the
   * launcher to form the next one, and takes the rank and size it is given
   * there. Collective over the new membership. No other thread may use the
   * context meanwhile (reset waits for calls in progress to return).
   *
   * <p>Process sets made from this context stop: they are closed here (later
   * calls on them throw {@link HvdException#NOT_INITIALIZED}); make them again.
   * Unnamed operations are numbered from 0 again, as on a new worker.
   *
   * <p>Throws {@link HvdMembershipChangedException} when forming the new epoch
   * failed (a peer lost again: reset again) or the launcher ended the job
   * ({@link HvdMembershipChangedException#launcherEnded()}), and
   * {@link HvdException#UNSUPPORTED} outside an elastic job and on a process set.
   */
  public void reset() {
    life.writeLock().lock();
    try {
      checkOpen();
      HvdNative.hvd_context_reset(ptr);
      unnamed.clear();
    } finally {
      life.writeLock().unlock();
    }
    // The sets stopped with the old epoch: destroying them is local now.
    RuntimeException first = null;
    for (HvdContext c : new ArrayList<>(children)) {
      try {
        c.closeAs("its parent context was reset (elastic membership change); make the set again");
      } catch (RuntimeException e) {
        if (first == null) first = e;
      }
    }
    if (first != null) throw first;
  }

  private int intQuery(int which) {
    int[] out = new int[1];
    life.readLock().lock();
    try {
      checkOpen();
      long p = ptr;
      switch (which) {
        case 0: HvdNative.hvd_context_rank(p, out); break;
        case 1: HvdNative.hvd_context_size(p, out); break;
        case 2: HvdNative.hvd_context_local_rank(p, out); break;
        case 3: HvdNative.hvd_context_local_size(p, out); break;
        case 4: HvdNative.hvd_context_cross_rank(p, out); break;
        default: HvdNative.hvd_context_cross_size(p, out); break;
      }
    } finally {
      life.readLock().unlock();
    }
    return out[0];
  }

  private void checkOpen() {
    if (closed) {
      throw new HvdException(HvdException.NOT_INITIALIZED, "HvdContext",
          isDefault ? "hvd is not initialized (Hvd.init)" : closedWhy);
    }
  }

  // ---- process sets -------------------------------------------------------------

  /**
   * MPI_Comm_split: the ranks passing the same {@code color >= 0} form one
   * process set, ordered by {@code (key, rank in this context)}; a rank passing
   * {@link #UNDEFINED_COLOR} joins none. Returns the set this rank joined, or
   * {@code null} (as MPI_COMM_NULL) for a rank that joined none.
   *
   * <p>Collective over this context: every rank calls it, in the same order as
   * its other process-set calls on this context (from one thread per rank, as
   * barriers). When ranks disagree (one splits while another calls
   * {@link #processSet}) every rank throws HvdException with
   * {@link HvdException#MISMATCH}; a color below -1 on any rank makes every
   * rank throw {@link HvdException#INVALID_ARGUMENT} naming that rank. Sets of
   * sets are not supported: on a process set this throws
   * {@link HvdException#UNSUPPORTED} (split the parent instead). A set of more
   * than one rank needs a transport with point-to-point (gloo, mpi).
   */
  public HvdContext split(int color, int key) {
    return makeSet(out -> HvdNative.hvd_context_split(ptr, color, key, out));
  }

  /**
   * The process set of the listed ranks of this context: sorted ascending, no
   * duplicates, the same list on every rank; the set's rank i is
   * {@code ranks[i]}. Returns it on the listed ranks and {@code null} on the
   * others.
   *
   * <p>Collective over this context, as {@link #split}. The list is checked by
   * the library on every rank together, so a bad list (empty or null, unsorted,
   * a duplicate, a rank out of range) on any rank makes every rank throw
   * HvdException with {@link HvdException#INVALID_ARGUMENT} naming that rank
   * and list, and different lists on different ranks make every rank throw
   * {@link HvdException#MISMATCH}; nothing is made then and this context goes
   * on working. On a process set: {@link HvdException#UNSUPPORTED}.
   */
  public HvdContext processSet(int... ranks) {
    int[] list = ranks == null ? new int[0] : ranks.clone();
    return makeSet(out -> HvdNative.hvd_process_set_create(ptr, list, out));
  }

  private HvdContext makeSet(Submit call) {  // call fills the child (0: none)
    long[] out = new long[1];
    life.readLock().lock();
    try {
      checkOpen();
      call.call(out);
      if (out[0] == 0) return null;
      HvdContext child = new HvdContext(out[0], false, this);
      children.add(child);
      return child;
    } finally {
      life.readLock().unlock();
    }
  }

  /**
   * The ranks in the parent context of this context's members, in this
   * context's rank order ({@code parentRanks()[rank()]} is this rank's rank
   * in the parent). For a context that is not a process set: {@code 0 .. size()-1}.
   */
  public int[] parentRanks() {
    int[] size = new int[1];
    life.readLock().lock();
    try {
      checkOpen();
      long p = ptr;
      HvdNative.hvd_context_size(p, size);
      int[] ranks = new int[size[0]];
      HvdNative.hvd_context_parent_ranks(p, ranks);
      return ranks;
    } finally {
      life.readLock().unlock();
    }
  }

  /** True for a context made by {@link #split} or {@link #processSet}. */
  public boolean isProcessSet() {
    return parent != null;
  }

  /** The context a process set was made from; null for one that is not a process set. */
  public HvdContext parent() {
    return parent;
  }

  // ---- allreduce --------------------------------------------------------------

  /** Element-wise reduction over ranks; returns a new array. */
  public float[] allreduce(float[] data, ReduceOp op) {
    return allreduceAsync(null, data, op).await();
  }

  public float[] allreduce(String name, float[] data, ReduceOp op) {
    return allreduceAsync(name, data, op).await();
  }

  public double[] allreduce(double[] data, ReduceOp op) {
    return allreduceAsync(null, data, op).await();
  }

  public double[] allreduce(String name, double[] data, ReduceOp op) {
    return allreduceAsync(name, data, op).await();
  }

  public int[] allreduce(int[] data, ReduceOp op) {
    return allreduceAsync(null, data, op).await();
  }

  public int[] allreduce(String name, int[] data, ReduceOp op) {
    return allreduceAsync(name, data, op).await();
  }

  public long[] allreduce(long[] data, ReduceOp op) {
    return allreduceAsync(null, data, op).await();
  }

  public long[] allreduce(String name, long[] data, ReduceOp op) {
    return allreduceAsync(name, data, op).await();
  }

  public HvdHandle<float[]> allreduceAsync(String name, float[] data, ReduceOp op) {
    return arrayAllreduce(name, data, DataType.FLOAT32, op);
  }

  public HvdHandle<double[]> allreduceAsync(String name, double[] data, ReduceOp op) {
    return arrayAllreduce(name, data, DataType.FLOAT64, op);
  }

  public HvdHandle<int[]> allreduceAsync(String name, int[] data, ReduceOp op) {
    return arrayAllreduce(name, data, DataType.INT32, op);
  }

  public HvdHandle<long[]> allreduceAsync(String name, long[] data, ReduceOp op) {
    return arrayAllreduce(name, data, DataType.INT64, op);
  }

  // Without an op: AVERAGE, as in Horovod, Python and Julia.

  /** {@link ReduceOp#AVERAGE} over ranks (integers round toward zero); returns a new array. */
  public float[] allreduce(float[] data) {
    return allreduce(data, ReduceOp.AVERAGE);
  }

  public float[] allreduce(String name, float[] data) {
    return allreduce(name, data, ReduceOp.AVERAGE);
  }

  public double[] allreduce(double[] data) {
    return allreduce(data, ReduceOp.AVERAGE);
  }

  public double[] allreduce(String name, double[] data) {
    return allreduce(name, data, ReduceOp.AVERAGE);
  }

  public int[] allreduce(int[] data) {
    return allreduce(data, ReduceOp.AVERAGE);
  }

  public int[] allreduce(String name, int[] data) {
    return allreduce(name, data, ReduceOp.AVERAGE);
  }

  public long[] allreduce(long[] data) {
    return allreduce(data, ReduceOp.AVERAGE);
  }

  public long[] allreduce(String name, long[] data) {
    return allreduce(name, data, ReduceOp.AVERAGE);
  }

  public HvdHandle<float[]> allreduceAsync(String name, float[] data) {
    return allreduceAsync(name, data, ReduceOp.AVERAGE);
  }

  public HvdHandle<double[]> allreduceAsync(String name, double[] data) {
    return allreduceAsync(name, data, ReduceOp.AVERAGE);
  }

  public HvdHandle<int[]> allreduceAsync(String name, int[] data) {
    return allreduceAsync(name, data, ReduceOp.AVERAGE);
  }

  public HvdHandle<long[]> allreduceAsync(String name, long[] data) {
    return allreduceAsync(name, data, ReduceOp.AVERAGE);
  }

  /**
   * Reduces in into out (same element count; in == out: in place); returns out.
   * For typed buffers (FloatBuffer, DoubleBuffer, IntBuffer, LongBuffer,
   * ShortBuffer), whose class gives the element type; a ByteBuffer throws
   * IllegalArgumentException: use
   * {@link #allreduce(String, ByteBuffer, ByteBuffer, DataType, ReduceOp)}.
   */
  public <B extends Buffer> B allreduce(String name, B in, B out, ReduceOp op) {
    return allreduceAsync(name, in, out, op).await();
  }

  /** {@link #allreduce(String, Buffer, Buffer, ReduceOp)} with {@link ReduceOp#AVERAGE}. */
  public <B extends Buffer> B allreduce(String name, B in, B out) {
    return allreduce(name, in, out, ReduceOp.AVERAGE);
  }

  public <B extends Buffer> HvdHandle<B> allreduceAsync(String name, B in, B out, ReduceOp op) {
    DataType dt = typedBufferType("allreduce", name, in, out,
        "allreduce(name, in, out, DataType.FLOAT32, op)");
    return bufferAllreduce(name, in, out, dt, null, op, 1.0, 1.0);
  }

  public <B extends Buffer> HvdHandle<B> allreduceAsync(String name, B in, B out) {
    return allreduceAsync(name, in, out, ReduceOp.AVERAGE);
  }

  /**
   * Reduces the raw elements of dtype in in into out (in == out: in place);
   * returns out. Both ByteBuffers hold whole elements in native byte order
   * ({@code order(ByteOrder.nativeOrder())}), from position() for remaining()
   * bytes; direct ones are used in place, others copied.
   */
  public ByteBuffer allreduce(String name, ByteBuffer in, ByteBuffer out, DataType dtype,
                              ReduceOp op) {
    return allreduceAsync(name, in, out, dtype, op).await();
  }

  /** The ByteBuffer form with {@link ReduceOp#AVERAGE}. */
  public ByteBuffer allreduce(String name, ByteBuffer in, ByteBuffer out, DataType dtype) {
    return allreduce(name, in, out, dtype, ReduceOp.AVERAGE);
  }

  public HvdHandle<ByteBuffer> allreduceAsync(String name, ByteBuffer in, ByteBuffer out,
                                              DataType dtype, ReduceOp op) {
    return allreduceAsync(name, in, out, dtype, null, op, 1.0, 1.0);
  }

  public HvdHandle<ByteBuffer> allreduceAsync(String name, ByteBuffer in, ByteBuffer out,
                                              DataType dtype) {
    return allreduceAsync(name, in, out, dtype, null, ReduceOp.AVERAGE, 1.0, 1.0);
  }

  /**
   * The full form: raw elements of dtype in native byte order, an optional shape
   * (null: one dimension), and scaling (result = postscale * reduce(prescale * in)).
   */
  public HvdHandle<ByteBuffer> allreduceAsync(String name, ByteBuffer in, ByteBuffer out,
                                              DataType dtype, long[] shape, ReduceOp op,
                                              double prescale, double postscale) {
    checkRaw("allreduce", name, dtype, in, out);
    return bufferAllreduce(name, in, out, dtype, shape, op, prescale, postscale);
  }

  /**
   * Several allreduces negotiated and fused as one unit (for example a model's
   * gradients); none starts until all are ready on every rank.
   */
  public float[][] groupedAllreduce(String[] names, float[][] data, ReduceOp op) {
    return groupedAllreduceAsync(names, data, op).await();
  }

  public double[][] groupedAllreduce(String[] names, double[][] data, ReduceOp op) {
    return groupedAllreduceAsync(names, data, op).await();
  }

  public HvdHandle<float[][]> groupedAllreduceAsync(String[] names, float[][] data, ReduceOp op) {
    return grouped(names, data, DataType.FLOAT32, op);
  }

  public HvdHandle<double[][]> groupedAllreduceAsync(String[] names, double[][] data, ReduceOp op) {
    return grouped(names, data, DataType.FLOAT64, op);
  }

  /** {@link ReduceOp#AVERAGE}. */
  public float[][] groupedAllreduce(String[] names, float[][] data) {
    return groupedAllreduce(names, data, ReduceOp.AVERAGE);
  }

  public double[][] groupedAllreduce(String[] names, double[][] data) {
    return groupedAllreduce(names, data, ReduceOp.AVERAGE);
  }

  // ---- allgather --------------------------------------------------------------

  /** Concatenates every rank's array in rank order (lengths may differ). */
  public float[] allgather(String name, float[] data) {
    return allgatherAsync(name, data).await();
  }

  public double[] allgather(String name, double[] data) {
    return allgatherAsync(name, data).await();
  }

  public int[] allgather(String name, int[] data) {
    return allgatherAsync(name, data).await();
  }

  public long[] allgather(String name, long[] data) {
    return allgatherAsync(name, data).await();
  }

  public HvdHandle<float[]> allgatherAsync(String name, float[] data) {
    return arrayAllgather(name, data, DataType.FLOAT32);
  }

  public HvdHandle<double[]> allgatherAsync(String name, double[] data) {
    return arrayAllgather(name, data, DataType.FLOAT64);
  }

  public HvdHandle<int[]> allgatherAsync(String name, int[] data) {
    return arrayAllgather(name, data, DataType.INT32);
  }

  public HvdHandle<long[]> allgatherAsync(String name, long[] data) {
    return arrayAllgather(name, data, DataType.INT64);
  }

  /**
   * Concatenates along the first dimension of shape (null: one dimension of
   * in.remaining() / dtype.size() elements); the other dimensions must agree.
   */
  public Gathered allgather(String name, ByteBuffer in, DataType dtype, long[] shape) {
    return allgatherAsync(name, in, dtype, shape).await();
  }

  public HvdHandle<Gathered> allgatherAsync(String name, ByteBuffer in, DataType dtype, long[] shape) {
    checkRaw("allgather", name, dtype, in, null);
    String n = name(name, "allgather");
    Staged s = stage(in, dtype, true, false);
    long[] shp = shapeOf(shape, s.count);
    return submit("allgather '" + n + "'", new Object[] {in}, s::free,
        h -> gatheredOf(h, dtype),
        out -> HvdNative.hvdj_allgather_async(ptr, n, s.view, dtype.code(), shp, out));
  }

  // ---- alltoall -----------------------------------------------------------------

  /**
   * Sends {@code splits[j]} elements of data, in order, to rank j and returns what
   * every rank sent to this one, concatenated in rank order. splits has one entry per
   * rank, each {@code >= 0}, summing to {@code data.length}; null splits data evenly
   * ({@code data.length} must then be divisible by {@link #size()}). How many elements
   * came from each rank: {@link #alltoallAsync(String, float[], long[])} then
   * {@link HvdHandle#receivedSplits()}, or the ByteBuffer overload's
   * {@link Gathered#receivedSplits()}.
   */
  public float[] alltoall(String name, float[] data, long[] splits) {
    return alltoallAsync(name, data, splits).await();
  }

  public double[] alltoall(String name, double[] data, long[] splits) {
    return alltoallAsync(name, data, splits).await();
  }

  public int[] alltoall(String name, int[] data, long[] splits) {
    return alltoallAsync(name, data, splits).await();
  }

  public long[] alltoall(String name, long[] data, long[] splits) {
    return alltoallAsync(name, data, splits).await();
  }

  public HvdHandle<float[]> alltoallAsync(String name, float[] data, long[] splits) {
    return arrayAlltoall(name, data, DataType.FLOAT32, splits);
  }

  public HvdHandle<double[]> alltoallAsync(String name, double[] data, long[] splits) {
    return arrayAlltoall(name, data, DataType.FLOAT64, splits);
  }

  public HvdHandle<int[]> alltoallAsync(String name, int[] data, long[] splits) {
    return arrayAlltoall(name, data, DataType.INT32, splits);
  }

  public HvdHandle<long[]> alltoallAsync(String name, long[] data, long[] splits) {
    return arrayAlltoall(name, data, DataType.INT64, splits);
  }

  /**
   * Alltoall along the first dimension of shape (null: one dimension of
   * in.remaining() / dtype.size() elements): {@code splits[j]} rows go to rank j
   * (null: an even split). The other dimensions must agree across ranks. The
   * result carries the rows received in rank order, its shape and
   * {@link Gathered#receivedSplits()}.
   */
  public Gathered alltoall(String name, ByteBuffer in, DataType dtype, long[] shape, long[] splits) {
    return alltoallAsync(name, in, dtype, shape, splits).await();
  }

  public HvdHandle<Gathered> alltoallAsync(String name, ByteBuffer in, DataType dtype, long[] shape,
                                           long[] splits) {
    checkRaw("alltoall", name, dtype, in, null);
    int size = size();
    Staged s = stage(in, dtype, true, false);
    long[] shp;
    long[] sp;
    try {
      shp = rowsShapeOf(shape, s.count, "alltoall");
      sp = checkSplits(splits, shp[0], size, "the first dimension");
    } catch (RuntimeException e) {
      s.free();
      throw e;
    }
    String n = name(name, "alltoall");
    long[] recv = new long[size];
    return submit("alltoall '" + n + "'", new Object[] {in}, s::free,
        h -> {
          HvdNative.hvd_handle_recv_splits(h, recv);
          return gatheredOf(h, dtype, recv.clone());
        },
        out -> HvdNative.hvdj_alltoall_async(ptr, n, s.view, dtype.code(), shp, sp, out), recv);
  }

  // ---- reducescatter ------------------------------------------------------------

  /**
   * Reduces over ranks and returns this rank's block of the result: the elements
   * are split as evenly as possible in rank order, the first
   * {@code data.length % size()} ranks getting one extra (a rank may get none).
   * Every rank passes the same length.
   */
  public float[] reducescatter(String name, float[] data, ReduceOp op) {
    return reducescatterAsync(name, data, op).await();
  }

  public double[] reducescatter(String name, double[] data, ReduceOp op) {
    return reducescatterAsync(name, data, op).await();
  }

  public int[] reducescatter(String name, int[] data, ReduceOp op) {
    return reducescatterAsync(name, data, op).await();
  }

  public long[] reducescatter(String name, long[] data, ReduceOp op) {
    return reducescatterAsync(name, data, op).await();
  }

  public HvdHandle<float[]> reducescatterAsync(String name, float[] data, ReduceOp op) {
    return arrayReducescatter(name, data, DataType.FLOAT32, op);
  }

  public HvdHandle<double[]> reducescatterAsync(String name, double[] data, ReduceOp op) {
    return arrayReducescatter(name, data, DataType.FLOAT64, op);
  }

  public HvdHandle<int[]> reducescatterAsync(String name, int[] data, ReduceOp op) {
    return arrayReducescatter(name, data, DataType.INT32, op);
  }

  public HvdHandle<long[]> reducescatterAsync(String name, long[] data, ReduceOp op) {
    return arrayReducescatter(name, data, DataType.INT64, op);
  }

  /**
   * Reducescatter along the first dimension of shape (null: one dimension of
   * in.remaining() / dtype.size() elements): the rows are split as evenly as
   * possible, the first {@code shape[0] % size()} ranks getting one extra row.
   * The result holds this rank's rows and their shape.
   */
  public Gathered reducescatter(String name, ByteBuffer in, DataType dtype, long[] shape, ReduceOp op) {
    return reducescatterAsync(name, in, dtype, shape, op).await();
  }

  // Without an op: AVERAGE, as in Horovod, Python and Julia.

  public float[] reducescatter(String name, float[] data) {
    return reducescatter(name, data, ReduceOp.AVERAGE);
  }

  public double[] reducescatter(String name, double[] data) {
    return reducescatter(name, data, ReduceOp.AVERAGE);
  }

  public int[] reducescatter(String name, int[] data) {
    return reducescatter(name, data, ReduceOp.AVERAGE);
  }

  public long[] reducescatter(String name, long[] data) {
    return reducescatter(name, data, ReduceOp.AVERAGE);
  }

  public Gathered reducescatter(String name, ByteBuffer in, DataType dtype, long[] shape) {
    return reducescatter(name, in, dtype, shape, ReduceOp.AVERAGE);
  }

  public HvdHandle<Gathered> reducescatterAsync(String name, ByteBuffer in, DataType dtype,
                                                long[] shape, ReduceOp op) {
    checkRaw("reducescatter", name, dtype, in, null);
    checkOp(op, "reducescatter");
    Staged s = stage(in, dtype, true, false);
    long[] shp;
    try {
      shp = rowsShapeOf(shape, s.count, "reducescatter");
    } catch (RuntimeException e) {
      s.free();
      throw e;
    }
    String n = name(name, "reducescatter");
    return submit("reducescatter '" + n + "'", new Object[] {in}, s::free,
        h -> gatheredOf(h, dtype),
        out -> HvdNative.hvdj_reducescatter_async(ptr, n, s.view, dtype.code(), shp, op.code(),
            1.0, 1.0, out));
  }

  // ---- broadcast ----------------------------------------------------------------

  /** Root's array to every rank (same length everywhere); returns a new array. */
  public float[] broadcast(String name, float[] data, int root) {
    return broadcastAsync(name, data, root).await();
  }

  public double[] broadcast(String name, double[] data, int root) {
    return broadcastAsync(name, data, root).await();
  }

  public int[] broadcast(String name, int[] data, int root) {
    return broadcastAsync(name, data, root).await();
  }

  public long[] broadcast(String name, long[] data, int root) {
    return broadcastAsync(name, data, root).await();
  }

  public HvdHandle<float[]> broadcastAsync(String name, float[] data, int root) {
    return arrayBroadcast(name, data, DataType.FLOAT32, root);
  }

  public HvdHandle<double[]> broadcastAsync(String name, double[] data, int root) {
    return arrayBroadcast(name, data, DataType.FLOAT64, root);
  }

  public HvdHandle<int[]> broadcastAsync(String name, int[] data, int root) {
    return arrayBroadcast(name, data, DataType.INT32, root);
  }

  public HvdHandle<long[]> broadcastAsync(String name, long[] data, int root) {
    return arrayBroadcast(name, data, DataType.INT64, root);
  }

  /**
   * Root's in to every rank's out (in == out: in place); returns out. For typed
   * buffers; a ByteBuffer throws IllegalArgumentException: use
   * {@link #broadcast(String, ByteBuffer, ByteBuffer, DataType, int)}.
   */
  public <B extends Buffer> B broadcast(String name, B in, B out, int root) {
    return broadcastAsync(name, in, out, root).await();
  }

  public <B extends Buffer> HvdHandle<B> broadcastAsync(String name, B in, B out, int root) {
    DataType dt = typedBufferType("broadcast", name, in, out,
        "broadcast(name, in, out, DataType.FLOAT32, root)");
    return bufferBroadcast(name, in, out, dt, root);
  }

  /** Root's raw elements of dtype (native byte order) to every rank's out; returns out. */
  public ByteBuffer broadcast(String name, ByteBuffer in, ByteBuffer out, DataType dtype, int root) {
    return broadcastAsync(name, in, out, dtype, root).await();
  }

  public HvdHandle<ByteBuffer> broadcastAsync(String name, ByteBuffer in, ByteBuffer out,
                                              DataType dtype, int root) {
    checkRaw("broadcast", name, dtype, in, out);
    return bufferBroadcast(name, in, out, dtype, root);
  }

  private <B extends Buffer> HvdHandle<B> bufferBroadcast(String name, B in, B out, DataType dt,
                                                          int root) {
    String n = name(name, "broadcast");
    Staged si = stage(in, dt, true, false);
    Staged so = in == out ? si : stage(out, dt, false, true);
    try {
      checkCount(si, so, "broadcast");
    } catch (RuntimeException e) {
      si.free();
      if (so != si) so.free();
      throw e;
    }
    long[] shp = shapeOf(null, si.count);
    return submit("broadcast '" + n + "'", new Object[] {in, out}, () -> {
          si.free();
          if (so != si) so.free();
        },
        h -> {
          so.copyBack(out);
          return out;
        },
        o -> HvdNative.hvdj_broadcast_async(ptr, n, si.view, so.view, dt.code(), shp, root, o));
  }

  // ---- barrier, join ------------------------------------------------------------

  /** Returns once every rank has called it. */
  public void barrier() {
    barrierAsync().await();
  }

  public HvdHandle<Void> barrierAsync() {
    return submit("barrier", null, null, null, out -> HvdNative.hvd_barrier_async(ptr, out));
  }

  /**
   * Marks this rank as out of data (uneven inputs): until every rank has joined,
   * it takes part in the others' allreduces with zeros. Returns once all have.
   */
  public void join() {
    submit("join", null, null, null, out -> HvdNative.hvd_join_async(ptr, out)).await();
  }

  // ---- internals: submission --------------------------------------------------

  private interface Submit {
    void call(long[] handleOut);
  }

  private <T> HvdHandle<T> submit(String description, Object keepAlive, Runnable cleanup,
                                  HvdHandle.Completion<T> completion, Submit call) {
    return submit(description, keepAlive, cleanup, completion, call, null);
  }

  /** recvSplits: for alltoall, the array its completion fills (HvdHandle.receivedSplits). */
  private <T> HvdHandle<T> submit(String description, Object keepAlive, Runnable cleanup,
                                  HvdHandle.Completion<T> completion, Submit call,
                                  long[] recvSplits) {
    reap();
    long[] out = new long[1];
    life.readLock().lock();
    try {
      checkOpen();
      call.call(out);
    } catch (RuntimeException e) {
      if (cleanup != null) cleanup.run();
      throw e;
    } finally {
      life.readLock().unlock();
    }
    HvdHandle<T> h =
        new HvdHandle<>(this, out[0], description, keepAlive, completion, cleanup, recvSplits);
    pending.add(h);
    return h;
  }

  /** Releases handles that completed without anyone awaiting them. */
  private void reap() {
    if (pending.size() < 64) return;
    for (HvdHandle<?> h : new ArrayList<>(pending)) h.reapIfDone();
  }

  private String name(String name, String op) {
    if (name != null) return name;
    return op + ".noname." + unnamed.computeIfAbsent(op, k -> new AtomicLong()).getAndIncrement();
  }

  private <T> HvdHandle<T> arrayAllreduce(String name, Object data, DataType dt, ReduceOp op) {
    String n = name(name, "allreduce");
    Staged s = Staged.ofArray(data, dt);
    long[] shp = shapeOf(null, s.count);
    @SuppressWarnings("unchecked")
    HvdHandle.Completion<T> done = h -> (T) s.toArray();
    return submit("allreduce '" + n + "'", null, s::free, done,
        out -> HvdNative.hvdj_allreduce_async(ptr, n, s.view, s.view, dt.code(), shp, op.code(),
            1.0, 1.0, out));
  }

  private <B extends Buffer> HvdHandle<B> bufferAllreduce(String name, B in, B out, DataType dt,
                                                          long[] shape, ReduceOp op,
                                                          double prescale, double postscale) {
    String n = name(name, "allreduce");
    Staged si = stage(in, dt, true, false);
    Staged so = in == out ? si : stage(out, dt, false, true);
    long[] shp;
    try {
      checkCount(si, so, "allreduce");
      shp = shapeOf(shape, si.count);
    } catch (RuntimeException e) {
      si.free();
      if (so != si) so.free();
      throw e;
    }
    return submit("allreduce '" + n + "'", new Object[] {in, out}, () -> {
          si.free();
          if (so != si) so.free();
        },
        h -> {
          so.copyBack(out);
          return out;
        },
        o -> HvdNative.hvdj_allreduce_async(ptr, n, si.view, so.view, dt.code(), shp, op.code(),
            prescale, postscale, o));
  }

  private <T> HvdHandle<T> grouped(String[] names, Object[] data, DataType dt, ReduceOp op) {
    if (names == null || data == null || names.length != data.length || names.length == 0) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, "groupedAllreduce",
          "names and data must be non-empty and of one length");
    }
    int k = data.length;
    Staged[] st = new Staged[k];
    Buffer[] views = new Buffer[k];
    long[] counts = new long[k];
    String[] ns = new String[k];
    for (int i = 0; i < k; ++i) {
      ns[i] = names[i] != null ? names[i] : name(null, "allreduce");
      st[i] = Staged.ofArray(data[i], dt);
      views[i] = st[i].view;
      counts[i] = st[i].count;
    }
    Runnable free = () -> {
      for (Staged s : st) s.free();
    };
    Object[] tensors = {ns, views, views, counts};
    @SuppressWarnings("unchecked")
    HvdHandle.Completion<T> done = h -> {
      Object[] res = dt == DataType.FLOAT32 ? new float[k][] : new double[k][];
      for (int i = 0; i < k; ++i) res[i] = st[i].toArray();
      return (T) res;
    };
    return submit("grouped allreduce '" + ns[0] + "' (+" + (k - 1) + ")", null, free, done,
        out -> HvdNative.hvdj_grouped_allreduce_async(ptr, tensors, dt.code(), op.code(), 1.0, 1.0,
            out));
  }

  private <T> HvdHandle<T> arrayAllgather(String name, Object data, DataType dt) {
    String n = name(name, "allgather");
    Staged s = Staged.ofArray(data, dt);
    long[] shp = shapeOf(null, s.count);
    @SuppressWarnings("unchecked")
    HvdHandle.Completion<T> done = h -> (T) arrayOfOutput(h, dt);
    return submit("allgather '" + n + "'", null, s::free, done,
        out -> HvdNative.hvdj_allgather_async(ptr, n, s.view, dt.code(), shp, out));
  }

  private <T> HvdHandle<T> arrayBroadcast(String name, Object data, DataType dt, int root) {
    String n = name(name, "broadcast");
    Staged s = Staged.ofArray(data, dt);
    long[] shp = shapeOf(null, s.count);
    @SuppressWarnings("unchecked")
    HvdHandle.Completion<T> done = h -> (T) s.toArray();
    return submit("broadcast '" + n + "'", null, s::free, done,
        out -> HvdNative.hvdj_broadcast_async(ptr, n, s.view, s.view, dt.code(), shp, root, out));
  }

  private <T> HvdHandle<T> arrayAlltoall(String name, Object data, DataType dt, long[] splits) {
    long len = arrayLength(data, dt, "alltoall");
    int size = size();
    long[] sp = checkSplits(splits, len, size, "data.length");
    String n = name(name, "alltoall");
    Staged s = Staged.ofArray(data, dt);
    long[] shp = shapeOf(null, s.count);
    long[] recv = new long[size];
    @SuppressWarnings("unchecked")
    HvdHandle.Completion<T> done = h -> {
      HvdNative.hvd_handle_recv_splits(h, recv);
      return (T) arrayOfOutput(h, dt);
    };
    return submit("alltoall '" + n + "'", null, s::free, done,
        out -> HvdNative.hvdj_alltoall_async(ptr, n, s.view, dt.code(), shp, sp, out), recv);
  }

  private <T> HvdHandle<T> arrayReducescatter(String name, Object data, DataType dt, ReduceOp op) {
    arrayLength(data, dt, "reducescatter");
    checkOp(op, "reducescatter");
    String n = name(name, "reducescatter");
    Staged s = Staged.ofArray(data, dt);
    long[] shp = shapeOf(null, s.count);
    @SuppressWarnings("unchecked")
    HvdHandle.Completion<T> done = h -> (T) arrayOfOutput(h, dt);
    return submit("reducescatter '" + n + "'", null, s::free, done,
        out -> HvdNative.hvdj_reducescatter_async(ptr, n, s.view, dt.code(), shp, op.code(), 1.0,
            1.0, out));
  }

  private static int arrayLength(Object data, DataType dt, String op) {
    if (data == null) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, op, "data is null");
    }
    switch (dt) {
      case FLOAT32: return ((float[]) data).length;
      case FLOAT64: return ((double[]) data).length;
      case INT32: return ((int[]) data).length;
      default: return ((long[]) data).length;
    }
  }

  private static void checkOp(ReduceOp op, String fn) {
    if (op == null) throw new HvdException(HvdException.INVALID_ARGUMENT, fn, "op is null");
  }

  private static String tensor(String call, String name) {
    return call + (name == null ? " (unnamed)" : " '" + name + "'");
  }

  /**
   * The element type of a typed buffer pair. A ByteBuffer has none (its bytes
   * would be reduced as bytes): refused, naming the form that takes a DataType.
   */
  private static DataType typedBufferType(String call, String name, Buffer in, Buffer out,
                                          String typedForm) {
    if (in instanceof ByteBuffer || out instanceof ByteBuffer) {
      throw new IllegalArgumentException(tensor(call, name)
          + ": a ByteBuffer carries no element type; pass a DataType: " + typedForm
          + " (or a typed view such as in.asFloatBuffer())");
    }
    if (in == null || out == null) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, call,
          tensor(call, name) + ": the " + (in == null ? "input" : "output") + " buffer is null");
    }
    DataType dt = typeOf(in);
    DataType dto = typeOf(out);
    if (dt != dto) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, call, tensor(call, name)
          + ": the input is a " + in.getClass().getSimpleName() + " (" + dt + "), the output a "
          + out.getClass().getSimpleName() + " (" + dto + ")");
    }
    return dt;
  }

  /**
   * A ByteBuffer operation's DataType and buffers: a dtype is required, the
   * bytes must hold whole elements, and elements wider than a byte must be in
   * native order (the library reads the memory as it is).
   */
  private static void checkRaw(String call, String name, DataType dtype, ByteBuffer in,
                               ByteBuffer out) {
    if (dtype == null) {
      throw new IllegalArgumentException(tensor(call, name)
          + ": dtype is null; a ByteBuffer carries no element type, pass a DataType (e.g. DataType.FLOAT32)");
    }
    checkRawBuffer(call, name, dtype, in, "input");
    if (out != null && out != in) checkRawBuffer(call, name, dtype, out, "output");
  }

  private static void checkRawBuffer(String call, String name, DataType dtype, ByteBuffer b,
                                     String role) {
    if (b == null) return;  // stage() reports it
    if (b.remaining() % dtype.size() != 0) {
      throw new IllegalArgumentException(tensor(call, name) + ": the " + role + " ByteBuffer has "
          + b.remaining() + " bytes remaining, not a multiple of " + dtype + "'s " + dtype.size()
          + " bytes: it does not hold whole " + dtype + " elements");
    }
    if (dtype.size() > 1 && b.order() != ByteOrder.nativeOrder()) {
      throw new IllegalArgumentException(tensor(call, name) + ": the " + role + " ByteBuffer is "
          + b.order() + " but " + dtype + " elements are read in native order ("
          + ByteOrder.nativeOrder() + "); fill it after order(ByteOrder.nativeOrder()) (a new"
          + " ByteBuffer starts BIG_ENDIAN), or pass a typed view such as asFloatBuffer(),"
          + " which is converted");
    }
  }

  /**
   * Alltoall splits checked against the rows to send; returns a copy (null: even
   * split, rows divisible by size). what names the rows in messages.
   */
  private static long[] checkSplits(long[] splits, long rows, int size, String what) {
    if (splits == null) {
      if (rows % size != 0) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "alltoall",
            "splits is null (an even split) but " + what + " = " + rows
                + " is not divisible by the context size " + size);
      }
      return null;
    }
    if (splits.length != size) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, "alltoall",
          "splits has " + splits.length + " entries, must have one per rank (the context size "
              + size + ")");
    }
    long[] sp = splits.clone();
    long sum = 0;
    for (int j = 0; j < sp.length; ++j) {
      if (sp[j] < 0) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "alltoall",
            "splits[" + j + "] is " + sp[j] + ", must be >= 0");
      }
      if (sp[j] > rows - sum) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "alltoall",
            "splits[0.." + j + "] already sum to more than " + what + " = " + rows);
      }
      sum += sp[j];
    }
    if (sum != rows) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, "alltoall",
          "splits sum to " + sum + ", must equal " + what + " = " + rows);
    }
    return sp;
  }

  /** shapeOf for operations along the first dimension: at least one dimension. */
  private static long[] rowsShapeOf(long[] shape, long count, String op) {
    if (shape != null && shape.length == 0) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, op,
          "shape is empty: " + op + " splits along the first dimension, so it needs at least one");
    }
    long[] shp = shapeOf(shape, count);
    for (long d : shp) {
      if (d < 0) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, op,
            "shape " + java.util.Arrays.toString(shp) + " has a negative dimension");
      }
    }
    return shp;
  }

  private static long[] shapeOf(long[] shape, long count) {
    if (shape == null) return new long[] {count};
    long n = 1;
    for (long d : shape) n *= d;
    if (n != count) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext",
          "shape holds " + n + " elements but the buffer holds " + count);
    }
    return shape.clone();
  }

  private static void checkCount(Staged in, Staged out, String op) {
    if (out.count < in.count) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, op,
          "the output holds " + out.count + " elements, the input " + in.count);
    }
  }

  private static Object arrayOfOutput(long h, DataType dt) {
    ByteBuffer v = (ByteBuffer) HvdNative.hvdj_handle_output_view(h);
    int n = v == null ? 0 : v.capacity() / dt.size();
    if (v != null) v.order(ByteOrder.nativeOrder());
    switch (dt) {
      case FLOAT32: { float[] a = new float[n]; if (n > 0) v.asFloatBuffer().get(a); return a; }
      case FLOAT64: { double[] a = new double[n]; if (n > 0) v.asDoubleBuffer().get(a); return a; }
      case INT32: { int[] a = new int[n]; if (n > 0) v.asIntBuffer().get(a); return a; }
      case INT64: { long[] a = new long[n]; if (n > 0) v.asLongBuffer().get(a); return a; }
      default: throw new IllegalArgumentException("no array type for " + dt);
    }
  }

  private static Gathered gatheredOf(long h, DataType dt) {
    return gatheredOf(h, dt, null);
  }

  private static Gathered gatheredOf(long h, DataType dt, long[] recvSplits) {
    ByteBuffer v = (ByteBuffer) HvdNative.hvdj_handle_output_view(h);
    long[] shape = HvdNative.hvdj_handle_output_shape(h);
    int bytes = v == null ? 0 : v.capacity();
    ByteBuffer copy = ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder());
    if (v != null) copy.put(v);
    copy.flip();
    return new Gathered(copy, dt, shape, recvSplits);
  }

  // ---- internals: staging of Java data for native code -----------------------

  /** The element type a typed buffer implies (a ByteBuffer implies none). */
  static DataType typeOf(Buffer b) {
    if (b instanceof FloatBuffer) return DataType.FLOAT32;
    if (b instanceof DoubleBuffer) return DataType.FLOAT64;
    if (b instanceof IntBuffer) return DataType.INT32;
    if (b instanceof LongBuffer) return DataType.INT64;
    if (b instanceof ShortBuffer) return DataType.INT16;
    throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext",
        "unsupported buffer type " + (b == null ? "null" : b.getClass().getName()));
  }

  private static ByteOrder orderOf(Buffer b) {
    if (b instanceof ByteBuffer) return ByteOrder.nativeOrder();  // raw bytes: the caller's order
    if (b instanceof FloatBuffer) return ((FloatBuffer) b).order();
    if (b instanceof DoubleBuffer) return ((DoubleBuffer) b).order();
    if (b instanceof IntBuffer) return ((IntBuffer) b).order();
    if (b instanceof LongBuffer) return ((LongBuffer) b).order();
    if (b instanceof ShortBuffer) return ((ShortBuffer) b).order();
    return null;
  }

  private static Staged stage(Buffer b, DataType dt, boolean input, boolean output) {
    if (b == null) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext", "buffer is null");
    }
    long count;
    if (b instanceof ByteBuffer) {
      if (b.remaining() % dt.size() != 0) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext",
            "a ByteBuffer of " + b.remaining() + " bytes does not hold whole " + dt + " elements");
      }
      count = b.remaining() / dt.size();
    } else {
      if (typeOf(b).size() != dt.size()) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext",
            b.getClass().getSimpleName() + " cannot hold " + dt);
      }
      count = b.remaining();
    }
    boolean zeroCopy = b.isDirect() && orderOf(b) == ByteOrder.nativeOrder()
        && !(output && b.isReadOnly());
    if (zeroCopy) return new Staged(b.slice(), null, count, dt);
    if (output && b.isReadOnly()) {
      throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext", "the output buffer is read-only");
    }
    ByteBuffer scratch = Staged.alloc(count * dt.size());
    Staged s = new Staged(scratch, scratch, count, dt);
    if (input) s.copyIn(b);
    return s;
  }

  /** Data as native code sees it: a direct view, and scratch memory to free. */
  static final class Staged {
    final Buffer view;
    final ByteBuffer scratch;  // non-null when this copy owns native memory
    final long count;
    final DataType dtype;
    private boolean freed;

    Staged(Buffer view, ByteBuffer scratch, long count, DataType dtype) {
      this.view = view;
      this.scratch = scratch;
      this.count = count;
      this.dtype = dtype;
    }

    static ByteBuffer alloc(long bytes) {
      if (bytes > Integer.MAX_VALUE) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext",
            "a copied tensor is limited to 2 GiB; use a direct ByteBuffer view per chunk");
      }
      ByteBuffer b = (ByteBuffer) HvdNative.hvdj_alloc(bytes);
      return b.order(ByteOrder.nativeOrder());
    }

    static Staged ofArray(Object data, DataType dt) {
      if (data == null) {
        throw new HvdException(HvdException.INVALID_ARGUMENT, "HvdContext", "array is null");
      }
      int n;
      switch (dt) {
        case FLOAT32: n = ((float[]) data).length; break;
        case FLOAT64: n = ((double[]) data).length; break;
        case INT32: n = ((int[]) data).length; break;
        case INT64: n = ((long[]) data).length; break;
        default: throw new IllegalArgumentException(dt.toString());
      }
      ByteBuffer s = alloc((long) n * dt.size());
      switch (dt) {
        case FLOAT32: s.asFloatBuffer().put((float[]) data); break;
        case FLOAT64: s.asDoubleBuffer().put((double[]) data); break;
        case INT32: s.asIntBuffer().put((int[]) data); break;
        default: s.asLongBuffer().put((long[]) data); break;
      }
      return new Staged(s, s, n, dt);
    }

    Object toArray() {
      int n = (int) count;
      ByteBuffer s = scratch.duplicate().order(ByteOrder.nativeOrder());
      switch (dtype) {
        case FLOAT32: { float[] a = new float[n]; s.asFloatBuffer().get(a); return a; }
        case FLOAT64: { double[] a = new double[n]; s.asDoubleBuffer().get(a); return a; }
        case INT32: { int[] a = new int[n]; s.asIntBuffer().get(a); return a; }
        default: { long[] a = new long[n]; s.asLongBuffer().get(a); return a; }
      }
    }

    void copyIn(Buffer src) {
      ByteBuffer s = scratch.duplicate().order(ByteOrder.nativeOrder());
      if (src instanceof ByteBuffer) s.put(((ByteBuffer) src).duplicate());
      else if (src instanceof FloatBuffer) s.asFloatBuffer().put(((FloatBuffer) src).duplicate());
      else if (src instanceof DoubleBuffer) s.asDoubleBuffer().put(((DoubleBuffer) src).duplicate());
      else if (src instanceof IntBuffer) s.asIntBuffer().put(((IntBuffer) src).duplicate());
      else if (src instanceof LongBuffer) s.asLongBuffer().put(((LongBuffer) src).duplicate());
      else ((ShortBuffer) s.asShortBuffer()).put(((ShortBuffer) src).duplicate());
    }

    /** Copies the result into dst when this is a copy (a zero-copy view needs nothing). */
    void copyBack(Buffer dst) {
      if (scratch == null) return;
      ByteBuffer s = scratch.duplicate().order(ByteOrder.nativeOrder());
      int n = (int) count;
      if (dst instanceof ByteBuffer) {
        ((ByteBuffer) dst).duplicate().put(s);
      } else if (dst instanceof FloatBuffer) {
        ((FloatBuffer) dst).duplicate().put(s.asFloatBuffer().limit(n));
      } else if (dst instanceof DoubleBuffer) {
        ((DoubleBuffer) dst).duplicate().put(s.asDoubleBuffer().limit(n));
      } else if (dst instanceof IntBuffer) {
        ((IntBuffer) dst).duplicate().put(s.asIntBuffer().limit(n));
      } else if (dst instanceof LongBuffer) {
        ((LongBuffer) dst).duplicate().put(s.asLongBuffer().limit(n));
      } else {
        ((ShortBuffer) dst).duplicate().put(s.asShortBuffer().limit(n));
      }
    }

    synchronized void free() {
      if (freed || scratch == null) return;
      freed = true;
      HvdNative.hvdj_free(scratch);
    }
  }

  /** For tests: operations this context still tracks. */
  int pendingCount() {
    return pending.size();
  }
}
