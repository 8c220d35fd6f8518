// The collective algorithms (src/algorithms/collectives.cc) over an
// in-memory point-to-point fabric, with ranks as threads: every algorithm x
// dtype x op on 2, 3, 4 and 8 ranks, uneven sizes (0, 1, primes, beyond one
// ring segment), against references computed here in plain integers, and
// bitwise identical results on every rank. The fabric: mem_fabric.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "algorithms/collectives.h"
#include "common/kernels.h"
#include "mem_fabric.h"

namespace hvd {
namespace {

using algo::Req;
using test::Fabric;
using test::OnRanks;

// ---- values ------------------------------------------------------------------

const hvd_dtype_t kDtypes[] = {HVD_UINT8, HVD_INT8,    HVD_UINT16,  HVD_INT16,   HVD_INT32,
                               HVD_INT64, HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64, HVD_BOOL};
const hvd_reduce_op_t kOps[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT};

bool Signed(hvd_dtype_t d) {
  return d != HVD_UINT8 && d != HVD_UINT16 && d != HVD_BOOL;
}

// Small integers every dtype holds exactly, whose sums and products stay exact.
int64_t Value(hvd_dtype_t d, hvd_reduce_op_t op, int rank, size_t i) {
  if (d == HVD_BOOL) return (rank + i) % 3 == 0 ? 1 : 0;
  if (op == HVD_PRODUCT) {
    if (Signed(d)) return (rank * 5 + i) % 3 == 0 ? -1 : 1;
    return (rank + i) % 5 == 0 ? 2 : 1;
  }
  const int64_t v = static_cast<int64_t>((rank * 7 + i * 13) % 11);
  return Signed(d) ? v - 5 : v;
}

void Put(hvd_dtype_t d, void* buf, size_t i, int64_t v) {
  switch (d) {
    case HVD_UINT8: case HVD_BOOL: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case HVD_INT8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case HVD_UINT16: static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v); break;
    case HVD_INT16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case HVD_INT32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case HVD_INT64: static_cast<int64_t*>(buf)[i] = v; break;
    case HVD_FLOAT16: static_cast<uint16_t*>(buf)[i] = FloatToHalf(static_cast<float>(v)); break;
    case HVD_BFLOAT16: static_cast<uint16_t*>(buf)[i] = FloatToBFloat16(static_cast<float>(v)); break;
    case HVD_FLOAT32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case HVD_FLOAT64: static_cast<double*>(buf)[i] = static_cast<double>(v); break;
  }
}

double Get(hvd_dtype_t d, const void* buf, size_t i) {
  switch (d) {
    case HVD_UINT8: case HVD_BOOL: return static_cast<const uint8_t*>(buf)[i];
    case HVD_INT8: return static_cast<const int8_t*>(buf)[i];
    case HVD_UINT16: return static_cast<const uint16_t*>(buf)[i];
    case HVD_INT16: return static_cast<const int16_t*>(buf)[i];
    case HVD_INT32: return static_cast<const int32_t*>(buf)[i];
    case HVD_INT64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case HVD_FLOAT16: return HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case HVD_BFLOAT16: return BFloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case HVD_FLOAT32: return static_cast<const float*>(buf)[i];
    case HVD_FLOAT64: return static_cast<const double*>(buf)[i];
  }
  return 0;
}

int64_t Reference(hvd_dtype_t d, hvd_reduce_op_t op, int n, size_t i) {
  int64_t acc = Value(d, op, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = Value(d, op, r, i);
    switch (op) {
      case HVD_SUM: acc += v; break;
      case HVD_MIN: acc = std::min(acc, v); break;
      case HVD_MAX: acc = std::max(acc, v); break;
      case HVD_PRODUCT: acc *= v; break;
      default: break;
    }
  }
  if (d == HVD_BOOL) acc = acc != 0 ? 1 : 0;  // sum = or, product = and
  return acc;
}

std::vector<uint8_t> Filled(hvd_dtype_t d, hvd_reduce_op_t op, int rank, size_t count) {
  std::vector<uint8_t> b(std::max<size_t>(1, count * DtypeSize(d)));
  for (size_t i = 0; i < count; ++i) Put(d, b.data(), i, Value(d, op, rank, i));
  return b;
}

// Sizes: empty, one, primes around the ring's part and segment edges.
std::vector<size_t> Counts(hvd_dtype_t d) {
  std::vector<size_t> c = {0, 1, 2, 7, 31, 1021};
  // Beyond one ring segment (1 MiB) per part on a few ranks, for the 1- and
  // 4-byte dtypes only (the rest gain nothing and cost time).
  if (d == HVD_INT8 || d == HVD_FLOAT32) c.push_back((size_t{3} << 20) / DtypeSize(d) + 3);
  return c;
}

using Allreduce = Status (*)(algo::Links&, algo::Scratch&, hvd_reduce_kernel_fn, void*, size_t,
                             hvd_dtype_t, hvd_reduce_op_t);

void CheckAllreduce(const char* name, Allreduce fn, int n, size_t segment = size_t{1} << 20) {
  for (hvd_dtype_t d : kDtypes) {
    for (hvd_reduce_op_t op : kOps) {
      for (size_t count : Counts(d)) {
        Fabric fab(n, segment);
        std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
        auto st = OnRanks(n, [&](algo::Links& l, int r) {
          out[r] = Filled(d, op, r, count);
          algo::Scratch s;
          return fn(l, s, hvd_reduce_kernel, out[r].data(), count, d, op);
        }, &fab);
        const std::string what = std::string(name) + " " + DtypeName(d) + " " + ReduceOpName(op) +
                                 " count " + std::to_string(count) + " on " + std::to_string(n);
        for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << what << ": " << st[r].message();
        EXPECT_EQ(fab.Leftover(), 0u) << what;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(Get(d, out[0].data(), i), static_cast<double>(Reference(d, op, n, i)))
              << what << " element " << i;
        }
        for (int r = 1; r < n; ++r) {
          ASSERT_EQ(0, std::memcmp(out[0].data(), out[r].data(), count * DtypeSize(d)))
              << what << ": rank " << r << " differs from rank 0";
        }
      }
    }
  }
}

// AllreduceRingSpans over buf cut into pieces of cycling sizes (1, 7, 1031
// elements and a third of the buffer, with an empty span among them), handed
// over in reverse memory order: segments fall inside one span (sent and
// received in place) and across several (staged), and no span follows the
// one before it in memory. The result is checked as AllreduceRing's.
Status RingSpansReversed(algo::Links& l, algo::Scratch& s, hvd_reduce_kernel_fn reduce, void* buf,
                         size_t count, hvd_dtype_t d, hvd_reduce_op_t op) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  const size_t es = DtypeSize(d);
  const size_t sizes[] = {1, 7, 1031, count / 3 + 1};
  std::vector<hvd_transport_span_t> spans;
  for (size_t off = 0, k = 0; off < count; ++k) {
    const size_t n = std::min(count - off, sizes[k % 4]);
    spans.push_back({p + off * es, n});
    off += n;
  }
  spans.insert(spans.begin() + static_cast<long>(spans.size() / 2), {p, 0});
  std::reverse(spans.begin(), spans.end());
  return algo::AllreduceRingSpans(l, s, reduce, spans.data(), spans.size(), d, op);
}

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, AllreduceDirect) { CheckAllreduce("direct", algo::AllreduceDirect, GetParam()); }
TEST_P(Ranks, AllreduceRing) { CheckAllreduce("ring", algo::AllreduceRing, GetParam()); }
// Segments of 4000 bytes (not a multiple of 8- or 16-byte rows): many
// pipeline stages and uneven last segments on every size above.
TEST_P(Ranks, AllreduceRingSpans) { CheckAllreduce("ring spans", RingSpansReversed, GetParam()); }
TEST_P(Ranks, AllreduceRingSpansSmallSegments) {
  CheckAllreduce("ring spans/4000", RingSpansReversed, GetParam(), 4000);
}
TEST_P(Ranks, AllreduceRingSmallSegments) {
  CheckAllreduce("ring/4000", algo::AllreduceRing, GetParam(), 4000);
}

TEST_P(Ranks, ReducescatterRing) {
  const int n = GetParam();
  for (hvd_dtype_t d : kDtypes) {
    for (hvd_reduce_op_t op : kOps) {
      for (size_t unit : Counts(d)) {
        // Uneven blocks: rank r's block is unit + r (and one empty block).
        std::vector<size_t> counts(static_cast<size_t>(n));
        size_t total = 0;
        for (int r = 0; r < n; ++r) total += counts[r] = (r == 1 ? 0 : unit + static_cast<size_t>(r));
        Fabric fab(n);
        std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
        auto st = OnRanks(n, [&](algo::Links& l, int r) {
          out[r] = Filled(d, op, r, total);
          algo::Scratch s;
          return algo::ReducescatterRing(l, s, hvd_reduce_kernel, out[r].data(), counts.data(), d, op);
        }, &fab);
        const std::string what = std::string("reducescatter ") + DtypeName(d) + " " +
                                 ReduceOpName(op) + " unit " + std::to_string(unit);
        EXPECT_EQ(fab.Leftover(), 0u) << what;
        size_t start = 0;
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(st[r].ok()) << what << ": " << st[r].message();
          for (size_t i = start; i < start + counts[r]; ++i) {
            ASSERT_EQ(Get(d, out[r].data(), i), static_cast<double>(Reference(d, op, n, i)))
                << what << " rank " << r << " element " << i;
          }
          start += counts[r];
        }
      }
    }
  }
}

TEST_P(Ranks, AllgathervRing) {
  const int n = GetParam();
  for (size_t unit : {size_t{0}, size_t{1}, size_t{13}, size_t{4099}, (size_t{1} << 20) + 7}) {
    for (bool in_place : {false, true}) {
      std::vector<size_t> bytes(static_cast<size_t>(n));
      size_t total = 0;
      for (int r = 0; r < n; ++r) total += bytes[r] = (r == n - 1 && n > 2) ? 0 : unit + 3 * r;
      Fabric fab(n);
      std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
      auto byte = [](int r, size_t i) { return static_cast<uint8_t>(r * 31 + i * 7 + 1); };
      auto st = OnRanks(n, [&](algo::Links& l, int r) {
        out[r].assign(std::max<size_t>(total, 1), 0xEE);
        size_t at = 0;
        for (int q = 0; q < r; ++q) at += bytes[q];
        std::vector<uint8_t> mine(bytes[r] + 1);
        for (size_t i = 0; i < bytes[r]; ++i) mine[i] = byte(r, i);
        if (in_place) std::memcpy(out[r].data() + at, mine.data(), bytes[r]);
        return algo::AllgathervRing(l, in_place ? out[r].data() + at : mine.data(), out[r].data(), bytes.data());
      }, &fab);
      EXPECT_EQ(fab.Leftover(), 0u);
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].message();
        size_t at = 0;
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < bytes[q]; ++i) {
            ASSERT_EQ(out[r][at + i], byte(q, i)) << "rank " << r << " block " << q << " byte " << i
                                                  << " unit " << unit;
          }
          at += bytes[q];
        }
      }
    }
  }
}

void CheckBroadcast(Status (*fn)(algo::Links&, void*, size_t, int), int n,
                    size_t segment = size_t{1} << 20) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4093}, (size_t{5} << 20) + 11}) {
    for (int root = 0; root < n; ++root) {
      Fabric fab(n, segment);
      std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
      auto st = OnRanks(n, [&](algo::Links& l, int r) {
        out[r].assign(std::max<size_t>(bytes, 1), static_cast<uint8_t>(0xA0 + r));
        if (r == root) {
          for (size_t i = 0; i < bytes; ++i) out[r][i] = static_cast<uint8_t>(i * 11 + root);
        }
        return fn(l, out[r].data(), bytes, root);
      }, &fab);
      EXPECT_EQ(fab.Leftover(), 0u);
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].message();
        for (size_t i = 0; i < bytes; ++i) {
          ASSERT_EQ(out[r][i], static_cast<uint8_t>(i * 11 + root))
              << "rank " << r << " root " << root << " byte " << i << " of " << bytes;
        }
      }
    }
  }
}

TEST_P(Ranks, BroadcastTree) { CheckBroadcast(algo::BroadcastTree, GetParam()); }
TEST_P(Ranks, BroadcastChain) { CheckBroadcast(algo::BroadcastChain, GetParam()); }
TEST_P(Ranks, BroadcastChainSmallSegments) {
  CheckBroadcast(algo::BroadcastChain, GetParam(), 65536 + 3);
}

TEST_P(Ranks, AlltoallvPairwise) {
  const int n = GetParam();
  for (size_t unit : {size_t{0}, size_t{1}, size_t{97}, size_t{70001}}) {
    // Rank s sends (unit + s + 2 d) % 5 == 0 ? 0 : unit + s + 2d bytes to d.
    auto len = [&](int s, int d) {
      const size_t b = unit + static_cast<size_t>(s + 2 * d);
      return unit == 0 || (s + d) % 4 == 3 ? 0 : b;
    };
    auto byte = [](int s, int d, size_t i) { return static_cast<uint8_t>(s * 17 + d * 5 + i); };
    Fabric fab(n);
    std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
    std::vector<std::vector<size_t>> rb(static_cast<size_t>(n));
    auto st = OnRanks(n, [&](algo::Links& l, int r) {
      std::vector<size_t> sb(static_cast<size_t>(n));
      rb[r].resize(static_cast<size_t>(n));
      std::vector<uint8_t> in;
      size_t got = 0;
      for (int d = 0; d < n; ++d) {
        sb[d] = len(r, d);
        for (size_t i = 0; i < sb[d]; ++i) in.push_back(byte(r, d, i));
        got += rb[r][d] = len(d, r);
      }
      in.push_back(0);
      out[r].assign(got + 1, 0xEE);
      return algo::AlltoallvPairwise(l, in.data(), sb.data(), out[r].data(), rb[r].data());
    }, &fab);
    EXPECT_EQ(fab.Leftover(), 0u);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].message();
      size_t at = 0;
      for (int s = 0; s < n; ++s) {
        for (size_t i = 0; i < rb[r][s]; ++i) ASSERT_EQ(out[r][at + i], byte(s, r, i)) << "rank " << r << " from " << s;
        at += rb[r][s];
      }
    }
  }
}

TEST_P(Ranks, BarrierDissemination) {
  const int n = GetParam();
  // No rank leaves round k before every rank has entered it.
  std::atomic<int> entered{0};
  std::atomic<bool> early{false};
  Fabric fab(n);
  auto st = OnRanks(n, [&](algo::Links& l, int r) {
    for (int k = 0; k < 5; ++k) {
      if (r == k % n) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      entered.fetch_add(1);
      HVD_CHECK(algo::BarrierDissemination(l));
      if (entered.load() < (k + 1) * n) early = true;
    }
    return Status::Ok();
  }, &fab);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].message();
  EXPECT_FALSE(early.load());
  EXPECT_EQ(fab.Leftover(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Ranks, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// Subsets of one fabric as communicators of their own: two disjoint subsets
// run ring allreduces at the same time over the same connections (tags in
// bands of their own), then an overlapping one; results exact per subset.
TEST(Subsets, ConcurrentDisjointAndOverlapping) {
  constexpr int n = 8;
  const std::vector<std::vector<int>> sets = {{0, 2, 4, 6}, {7, 5, 3, 1}, {1, 2, 3}};
  const size_t count = (size_t{1} << 20) / 4 + 13;  // beyond a segment per part at 4 ranks
  Fabric fab(n);
  std::vector<std::vector<int32_t>> out(n);
  auto st = OnRanks(n, [&](algo::Links& l, int r) {
    for (size_t s = 0; s < sets.size(); ++s) {
      const auto& m = sets[s];
      if (std::find(m.begin(), m.end(), r) == m.end()) continue;
      algo::SubsetLinks sub(&l, m, static_cast<uint32_t>(s + 1) * algo::SubsetLinks::kTagBand);
      std::vector<int32_t> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(i % 97) * (r + 1);
      algo::Scratch scratch;
      HVD_CHECK(algo::AllreduceRing(sub, scratch, hvd_reduce_kernel, v.data(), count, HVD_INT32, HVD_SUM));
      int32_t factor = 0;
      for (int q : m) factor += q + 1;
      for (size_t i = 0; i < count; ++i) {
        if (v[i] != static_cast<int32_t>(i % 97) * factor) {
          return Error(HVD_ERR_INTERNAL, "set " + std::to_string(s) + " rank " + std::to_string(r) +
                                             " element " + std::to_string(i));
        }
      }
      HVD_CHECK(algo::BarrierDissemination(sub));
    }
    return Status::Ok();
  }, &fab);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].ok()) << st[r].message();
  EXPECT_EQ(fab.Leftover(), 0u);
}

TEST(Selection, NamesAndDefaults) {
  EXPECT_EQ(algo::ParseAlgorithm(HVD_TRANSPORT_ALLREDUCE, "X", "ring").value(), algo::Algorithm::kRing);
  EXPECT_EQ(algo::ParseAlgorithm(HVD_TRANSPORT_ALLREDUCE, "X", "").value(), algo::Algorithm::kAuto);
  EXPECT_EQ(algo::ParseAlgorithm(HVD_TRANSPORT_BROADCAST, "X", "Chain").value(), algo::Algorithm::kChain);
  auto bad = algo::ParseAlgorithm(HVD_TRANSPORT_ALLTOALLV, "HVD_ALGORITHM_ALLTOALL", "ring");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("HVD_ALGORITHM_ALLTOALL='ring'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("pairwise"), std::string::npos);
  EXPECT_FALSE(algo::ParseAlgorithm(HVD_TRANSPORT_ALLTOALLV, "X", "shm").ok());  // shm has no alltoall
  EXPECT_EQ(algo::ChooseAllreduce(2, 4), algo::Algorithm::kDirect);
  EXPECT_EQ(algo::ChooseAllreduce(2, size_t{1} << 20), algo::Algorithm::kRing);
  EXPECT_EQ(algo::ChooseBroadcast(4, size_t{8} << 20, size_t{1} << 20), algo::Algorithm::kChain);
  EXPECT_EQ(algo::ChooseBroadcast(4, size_t{2} << 20, size_t{4} << 20), algo::Algorithm::kTree);
}

}  // namespace
}  // namespace hvd
