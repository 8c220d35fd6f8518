// The negotiation's wire format alone: process-set slot headers under the
// MIN, and the piggyback encoding (control bytes encoded as numbers of a
// dtype, reduced under the transport's op, decode to what a MIN over the
// bytes would have given, and to rank 0's autotuning proposal).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/negotiation/control_wire.h"

namespace hvd {
namespace {

template <typename T>
T Reduce(T a, T b, hvd_reduce_op_t op) {
  switch (op) {
    case HVD_SUM: return a + b;
    case HVD_PRODUCT: return a * b;
    case HVD_MIN: return std::min(a, b);
    default: return std::max(a, b);
  }
}

// Encodes each rank's bytes, reduces them as T under op, and decodes.
template <typename T>
std::vector<uint8_t> RoundTrip(const std::vector<std::vector<uint8_t>>& ranks, hvd_dtype_t d,
                               hvd_reduce_op_t op) {
  const size_t head = ranks[0].size();
  std::vector<T> sum(head);
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::vector<T> mine(head);
    EncodeControl(reinterpret_cast<uint8_t*>(mine.data()), ranks[r].data(), head, d, op, r == 0);
    for (size_t i = 0; i < head; ++i) sum[i] = r == 0 ? mine[i] : Reduce(sum[i], mine[i], op);
  }
  std::vector<uint8_t> out(head);
  DecodeControl(out.data(), reinterpret_cast<const uint8_t*>(sum.data()), head, d, op,
                static_cast<int>(ranks.size()));
  return out;
}

TEST(ControlWire, FlagsDecodeToTheirMinAndTheProposalIsRankZeros) {
  // Byte kProposalByte is the proposal; the others are flags.
  const std::vector<std::vector<uint8_t>> ranks{{1, 1, 0, 7, 1, 0},
                                                {1, 0, 1, 9, 1, 0},
                                                {1, 1, 1, 3, 1, 1}};
  const std::vector<uint8_t> want{1, 0, 0, 7, 1, 0};
  for (hvd_reduce_op_t op : {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT}) {
    EXPECT_EQ(RoundTrip<float>(ranks, HVD_FLOAT32, op), want) << "float32, op " << op;
    EXPECT_EQ(RoundTrip<int32_t>(ranks, HVD_INT32, op), want) << "int32, op " << op;
    EXPECT_EQ(RoundTrip<double>(ranks, HVD_FLOAT64, op), want) << "float64, op " << op;
  }
}

TEST(ControlWire, ExactIntegersBoundWhichDtypesCarryIt) {
  EXPECT_EQ(ExactIntegers(HVD_INT8), 0) << "int8 cannot hold 255";
  EXPECT_EQ(ExactIntegers(HVD_UINT8), 255);
  EXPECT_EQ(ExactIntegers(HVD_FLOAT32), 16777216.0);
  EXPECT_GE(ExactIntegers(HVD_FLOAT16), 255);
}

TEST(ControlWire, SlotHeadersReduceToTheSetsState) {
  // Two members (extent 70 of step 32: 3 steps; 2 and 300 pending) and a
  // rank outside the set (0xFF everywhere): MIN over the bytes.
  uint8_t a[kSlotHeader], b[kSlotHeader], outside[kSlotHeader];
  EncodeSlotHeader(a, 70, 32, 2);
  EncodeSlotHeader(b, 70, 32, 300);
  std::memset(outside, 0xFF, sizeof(outside));
  uint8_t min[kSlotHeader];
  for (size_t i = 0; i < kSlotHeader; ++i) min[i] = std::min({a[i], b[i], outside[i]});
  const SlotHeader h = DecodeSlotHeader(min, 32);
  EXPECT_TRUE(h.held);
  EXPECT_EQ(h.extent, 96u);
  EXPECT_EQ(h.most_pending, kMaxPendingCount) << "counts stop at kMaxPendingCount";
  EXPECT_FALSE(DecodeSlotHeader(outside, 32).held) << "a slot no member holds is free";
}

}  // namespace
}  // namespace hvd
