package org.hvd;

import org.hvd.swig.HvdNativeConstants;

/** Reduction operations (hvd_reduce_op_t). */
public enum ReduceOp {
  SUM(HvdNativeConstants.HVD_SUM),
  /** Sum divided by the number of ranks; integers round toward zero. */
  AVERAGE(HvdNativeConstants.HVD_AVERAGE),
  MIN(HvdNativeConstants.HVD_MIN),
  MAX(HvdNativeConstants.HVD_MAX),
  PRODUCT(HvdNativeConstants.HVD_PRODUCT),
  /**
   * Adaptive summation (Horovod's Adasum), per tensor: float16, bfloat16, float32 and float64
   * only, allreduce and grouped allreduce only (see HVD_ADASUM in hvd.h).
   */
  ADASUM(HvdNativeConstants.HVD_ADASUM);

  private final int code;

  ReduceOp(int code) {
    this.code = code;
  }

  /** The hvd_reduce_op_t value. */
  public int code() {
    return code;
  }
}
