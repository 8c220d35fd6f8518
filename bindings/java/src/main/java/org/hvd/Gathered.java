package org.hvd;

import java.nio.ByteBuffer;

/** An allgather result: every rank's rows in rank order, and the result's shape. */
public final class Gathered {
  private final ByteBuffer data;
  private final DataType dtype;
  private final long[] shape;

  Gathered(ByteBuffer data, DataType dtype, long[] shape) {
    this.data = data;
    this.dtype = dtype;
    this.shape = shape;
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
}
