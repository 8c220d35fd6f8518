// Adasum (adaptive summation, as in Horovod and the paper "Adasum: Adaptive
// summation of gradients"): the pure combination step of HVD_ADASUM.
//
// Two vectors a and b combine as
//   adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
// with a.b, |a|^2 and |b|^2 accumulated in double, element by element in
// index order, over the one tensor only. A side whose |x|^2 is exactly 0
// gets coefficient 1 (the division is skipped), so a zero vector leaves the
// other side unchanged. Properties: orthogonal vectors give a + b, identical
// vectors give a, opposite vectors give 0.
//
// P copies combine as a binary tree over ranks 0..P-1: at distance
// d = 1, 2, 4, ... the value held at index i (i a multiple of 2d) is
// replaced by adasum(value[i], value[i + d]) when i + d < P; otherwise it
// passes up unchanged. The result is value[0] after the last level. For
// P = 3: adasum(adasum(x0, x1), x2); for P = 5:
// adasum(adasum(adasum(x0, x1), adasum(x2, x3)), x4).
//
// Arithmetic: float64 tensors in double; float32, float16 and bfloat16 in
// float32 (each element a = float(ca * a + cb * b) evaluated in double, the
// intermediate levels kept in float32), the final result rounded to the
// dtype (nearest even). The function is deterministic: the same inputs give
// the same bits, so every rank that combines the same gathered copies holds
// the same result.
//
// Memory: the caller holds the P copies (P x the tensor's bytes, the
// allgather's output). float32 and float64 are combined in place in those
// copies; float16 and bfloat16 need another P x count x 4 bytes of float32.
#pragma once

#include <cstddef>

#include "hvd.h"

namespace hvd {

// True for the dtypes Adasum is defined on (float16, bfloat16, float32,
// float64).
bool AdasumSupportsDtype(hvd_dtype_t dtype);

// copies: P blocks of count elements of dtype, block r = rank r's tensor,
// laid out one after another (an allgatherv's output). They are used as
// scratch (overwritten) for float32 and float64. out: count elements, the
// combination (may not overlap copies). P >= 1. dtype must satisfy
// AdasumSupportsDtype (otherwise nothing is written and false is returned).
bool AdasumCombine(void* copies, int nranks, size_t count, hvd_dtype_t dtype, void* out);

}  // namespace hvd
