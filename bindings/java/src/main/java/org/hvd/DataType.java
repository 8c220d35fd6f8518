package org.hvd;

import org.hvd.swig.HvdNativeConstants;

/** Element types (hvd_dtype_t) and their sizes in bytes. */
public enum DataType {
  UINT8(HvdNativeConstants.HVD_UINT8, 1),
  INT8(HvdNativeConstants.HVD_INT8, 1),
  UINT16(HvdNativeConstants.HVD_UINT16, 2),
  INT16(HvdNativeConstants.HVD_INT16, 2),
  INT32(HvdNativeConstants.HVD_INT32, 4),
  INT64(HvdNativeConstants.HVD_INT64, 8),
  /** IEEE 754 binary16, in a ByteBuffer or ShortBuffer of raw bits. */
  FLOAT16(HvdNativeConstants.HVD_FLOAT16, 2),
  /** bfloat16, in a ByteBuffer or ShortBuffer of raw bits. */
  BFLOAT16(HvdNativeConstants.HVD_BFLOAT16, 2),
  FLOAT32(HvdNativeConstants.HVD_FLOAT32, 4),
  FLOAT64(HvdNativeConstants.HVD_FLOAT64, 8),
  /** One byte, 0 or 1; MIN is logical and, MAX is or. */
  BOOL(HvdNativeConstants.HVD_BOOL, 1);

  private final int code;
  private final int size;

  DataType(int code, int size) {
    this.code = code;
    this.size = size;
  }

  /** The hvd_dtype_t value. */
  public int code() {
    return code;
  }

  /** Bytes per element. */
  public int size() {
    return size;
  }
}
