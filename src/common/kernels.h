// Element-wise kernels shared by the core and the transport plugins (each
// links the static hvd_common library; no state is shared).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtypes.h"
#include "hvd.h"

namespace hvd {

// dst[i] = dst[i] (op) src[i]. op is HVD_SUM, HVD_MIN, HVD_MAX or HVD_PRODUCT
// (HVD_AVERAGE is treated as HVD_SUM; the caller divides afterwards). float16
// and bfloat16 are computed in float32 and rounded to nearest even. For
// HVD_BOOL, SUM and MAX are logical or, MIN and PRODUCT logical and.
// HVD_ADASUM is not element-wise: dst is left unchanged (the core combines
// whole tensors, algorithms/adasum.h).
void ReduceInto(void* dst, const void* src, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op);

// Same signature as hvd_reduce_kernel_fn, for the plugin env table.
extern "C" void hvd_reduce_kernel(void* dst, const void* src, size_t count, hvd_dtype_t dtype,
                                  hvd_reduce_op_t op);

// buf[i] = buf[i] * factor. float64: computed in double. float32, float16 and
// bfloat16: factor rounded to float32 and the product computed in float32
// (then rounded to the narrow type), bit for bit what Horovod's ScaleBuffer
// gives. Integers: computed in double, rounded toward zero (saturating). A
// factor of exactly 1.0 is a no-op. HVD_BOOL is left unchanged.
void ScaleInPlace(void* buf, size_t count, hvd_dtype_t dtype, double factor);

// dst[i] = src[i] * factor (copy + scale in one pass; factor 1.0 is a memcpy).
void ScaleCopy(void* dst, const void* src, size_t count, hvd_dtype_t dtype, double factor);

// Integer average: buf[i] = buf[i] / divisor, rounding toward zero. For
// floating types this is ScaleInPlace(1.0 / divisor).
void DivideInPlace(void* buf, size_t count, hvd_dtype_t dtype, int64_t divisor);

// Size in bytes of one element; 0 for an unknown dtype.
// Inline: the hot paths ask it several times a tensor.
inline size_t DtypeSize(int dtype) { return dtypes::Bytes(dtype); }
bool IsValidDtype(int dtype);
bool IsFloatingDtype(hvd_dtype_t dtype);
const char* DtypeName(int dtype);
const char* ReduceOpName(int op);

// IEEE binary16 and bfloat16 conversions (round to nearest even).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

}  // namespace hvd
