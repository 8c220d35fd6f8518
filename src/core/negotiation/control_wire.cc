#include "core/negotiation/control_wire.h"

#include <algorithm>
#include <cstring>

#include "common/kernels.h"

namespace hvd {

void EncodeSlotHeader(uint8_t* p, size_t extent, size_t step, size_t pending) {
  const size_t steps = std::min<size_t>((extent + step - 1) / step, 0xFFFE);
  p[0] = 0;
  p[1] = static_cast<uint8_t>(0xFF - std::min<size_t>(pending, kMaxPendingCount));
  p[2] = static_cast<uint8_t>(steps >> 8);
  p[3] = static_cast<uint8_t>(steps & 0xFF);
}

SlotHeader DecodeSlotHeader(const uint8_t* p, size_t step) {
  SlotHeader h;
  h.held = p[0] == 0;
  h.extent = (static_cast<size_t>(p[2]) << 8 | p[3]) * step;
  h.most_pending = 0xFF - p[1];
  return h;
}

// The largest integer up to which every integer is exact in dtype (0: not
// used: int8 cannot hold 255, bool's SUM is an or).
double ExactIntegers(hvd_dtype_t d) {
  switch (d) {
    case HVD_UINT8: return 255;
    case HVD_UINT16: return 65535;
    case HVD_INT16: return 32767;
    case HVD_INT32: return 2147483647.0;
    case HVD_INT64:
    case HVD_FLOAT64: return 9007199254740992.0;
    case HVD_FLOAT16: return 2048;
    case HVD_BFLOAT16: return 256;
    case HVD_FLOAT32: return 16777216.0;
    default: return 0;
  }
}

namespace {

void PutNumber(uint8_t* p, hvd_dtype_t d, double v) {
  switch (d) {
    case HVD_UINT8: *p = static_cast<uint8_t>(v); break;
    case HVD_UINT16: { uint16_t x = static_cast<uint16_t>(v); std::memcpy(p, &x, 2); break; }
    case HVD_INT16: { int16_t x = static_cast<int16_t>(v); std::memcpy(p, &x, 2); break; }
    case HVD_INT32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case HVD_INT64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case HVD_FLOAT16: { uint16_t x = FloatToHalf(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case HVD_BFLOAT16: { uint16_t x = FloatToBFloat16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case HVD_FLOAT32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    default: std::memcpy(p, &v, 8); break;  // HVD_FLOAT64
  }
}

double GetNumber(const uint8_t* p, hvd_dtype_t d) {
  switch (d) {
    case HVD_UINT8: return *p;
    case HVD_UINT16: { uint16_t x; std::memcpy(&x, p, 2); return x; }
    case HVD_INT16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case HVD_INT32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case HVD_INT64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case HVD_FLOAT16: { uint16_t x; std::memcpy(&x, p, 2); return HalfToFloat(x); }
    case HVD_BFLOAT16: { uint16_t x; std::memcpy(&x, p, 2); return BFloat16ToFloat(x); }
    case HVD_FLOAT32: { float x; std::memcpy(&x, p, 4); return x; }
    default: { double x; std::memcpy(&x, p, 8); return x; }
  }
}

// The number a flag byte becomes: set (1, or 0 under MAX) or clear.
double FlagNumber(bool set, hvd_reduce_op_t op) {
  return (op == HVD_MAX) != set ? 1 : 0;
}

// The reduced number of a flag every rank set: the size under SUM, 0 under
// MAX, 1 under MIN and PRODUCT.
double ReadyNumber(hvd_reduce_op_t op, int size) {
  return op == HVD_SUM ? size : op == HVD_MAX ? 0 : 1;
}

// The flags as element patterns of the dtype's width (the numbers involved
// are exact, so their bits are canonical and compare bitwise): one pass
// over the control bytes each way, run every negotiation.
template <typename S>
void EncodeFlags(uint8_t* out, const uint8_t* ctrl, size_t head, const uint8_t* set_bits,
                 const uint8_t* clear_bits) {
  S set, clear;
  std::memcpy(&set, set_bits, sizeof(S));
  std::memcpy(&clear, clear_bits, sizeof(S));
  for (size_t i = 0; i < head; ++i) {
    const S v = ctrl[i] != 0 ? set : clear;
    std::memcpy(out + i * sizeof(S), &v, sizeof(S));
  }
}

template <typename S>
void DecodeFlags(uint8_t* ctrl, const uint8_t* in, size_t head, const uint8_t* ready_bits) {
  S ready;
  std::memcpy(&ready, ready_bits, sizeof(S));
  for (size_t i = 0; i < head; ++i) {
    S v;
    std::memcpy(&v, in + i * sizeof(S), sizeof(S));
    ctrl[i] = v == ready ? 1 : 0;
  }
}

}  // namespace

// Encodes ctrl[0, head) into out (numbers of dtype d for transport op op).
void EncodeControl(uint8_t* out, const uint8_t* ctrl, size_t head, hvd_dtype_t d,
                   hvd_reduce_op_t op, bool rank0) {
  uint8_t set[8], clear[8];
  PutNumber(set, d, FlagNumber(true, op));
  PutNumber(clear, d, FlagNumber(false, op));
  switch (DtypeSize(d)) {
    case 1: EncodeFlags<uint8_t>(out, ctrl, head, set, clear); break;
    case 2: EncodeFlags<uint16_t>(out, ctrl, head, set, clear); break;
    case 4: EncodeFlags<uint32_t>(out, ctrl, head, set, clear); break;
    default: EncodeFlags<uint64_t>(out, ctrl, head, set, clear); break;
  }
  const double identity = op == HVD_MIN ? 255 : op == HVD_PRODUCT ? 1 : 0;
  PutNumber(out + kProposalByte * DtypeSize(d), d,
            rank0 ? ctrl[kProposalByte] : identity);
}

void EncodeOwned(uint8_t* out, const uint8_t* ctrl, size_t n, hvd_dtype_t d, hvd_reduce_op_t op,
                 size_t mine, size_t len) {
  const double identity = op == HVD_MIN ? 255 : op == HVD_PRODUCT ? 1 : 0;
  const size_t es = DtypeSize(d);
  for (size_t i = 0; i < n; ++i) {
    PutNumber(out + i * es, d, i >= mine && i < mine + len ? ctrl[i] : identity);
  }
}

void DecodeOwned(uint8_t* ctrl, const uint8_t* in, size_t n, hvd_dtype_t d) {
  const size_t es = DtypeSize(d);
  for (size_t i = 0; i < n; ++i) ctrl[i] = static_cast<uint8_t>(GetNumber(in + i * es, d));
}

// The bytes a MIN over the ranks' control bytes would have given.
void DecodeControl(uint8_t* ctrl, const uint8_t* in, size_t head, hvd_dtype_t d,
                   hvd_reduce_op_t op, int size) {
  uint8_t ready[8];
  PutNumber(ready, d, ReadyNumber(op, size));
  switch (DtypeSize(d)) {
    case 1: DecodeFlags<uint8_t>(ctrl, in, head, ready); break;
    case 2: DecodeFlags<uint16_t>(ctrl, in, head, ready); break;
    case 4: DecodeFlags<uint32_t>(ctrl, in, head, ready); break;
    default: DecodeFlags<uint64_t>(ctrl, in, head, ready); break;
  }
  ctrl[kProposalByte] = static_cast<uint8_t>(GetNumber(in + kProposalByte * DtypeSize(d), d));
}

}  // namespace hvd
