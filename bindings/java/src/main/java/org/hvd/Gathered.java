package org.hvd;

import java.nio.ByteBuffer;

/**
 * A result the library allocated: for allgather every rank's rows in rank
 * order, for alltoall the rows received from every rank in rank order (with
 * {@link #receivedSplits()}), for reducescatter this rank's block of rows; and
 * the result's shape.
 */
public final class Gathered {
  private final ByteBuffer data;
  private final DataType dtype;
  private final long[] shape;
  private final long[] receivedSplits;  // alltoall only

  Gathered(ByteBuffer data, DataType dtype, long[] shape) {
    this(data, dtype, shape, null);
  }

  Gathered(ByteBuffer data, DataType dtype, long[] shape, long[] receivedSplits) {
    this.data = data;
    this.dtype = dtype;
    this.shape = shape;
    this.receivedSplits = receivedSplits;
  }

  /** A direct buffer in native byte order, position 0, limit = bytes. */
  public ByteBuffer data() {
    return data;
  }

  public DataType dtype() {
    return dtype;
  }

  public long[] shape() {
    return shape.clone();
  }

  /**
   * Alltoall: how many rows came from each rank, in rank order (they sum to
   * {@code shape()[0]}); null for allgather and reducescatter results.
   */
  public long[] receivedSplits() {
    return receivedSplits == null ? null : receivedSplits.clone();
  }

  public float[] toFloatArray() {
    float[] a = new float[data.remaining() / 4];
    data.duplicate().order(data.order()).asFloatBuffer().get(a);
    return a;
  }

  public double[] toDoubleArray() {
    double[] a = new double[data.remaining() / 8];
    data.duplicate().order(data.order()).asDoubleBuffer().get(a);
    return a;
  }

  public int[] toIntArray() {
    int[] a = new int[data.remaining() / 4];
    data.duplicate().order(data.order()).asIntBuffer().get(a);
    return a;
  }

  public long[] toLongArray() {
    long[] a = new long[data.remaining() / 8];
    data.duplicate().order(data.order()).asLongBuffer().get(a);
    return a;
  }
}
