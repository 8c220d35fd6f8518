// The canonical reduction order (docs/reproducibility.md) as a property:
// random configurations (3 to 6 ranks, now and then 2, 7 or 8; 1 element to
// 4 MiB, odd sizes included; float16, bfloat16, float32, float64; SUM mostly,
// PRODUCT, MIN and MAX too; the direct and ring allreduce, the ring over a
// fused batch's spans cut at random places, the reducescatter with random
// blocks; random segment sizes) over the in-memory fabric (mem_fabric.h).
// Every element of every rank's result must equal, bit for bit, the left fold
// s0 op s1 op ... op s(P-1) computed here one element at a time, with the
// narrow types rounded after every operation. Data spans 7 decades with
// both signs, so any other order shows. HVD_TEST_SEED replays one seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "common/kernels.h"
#include "mem_fabric.h"

namespace hvd {
namespace {

using test::Fabric;
using test::OnRanks;

// One element as a double (narrow types widened exactly), and back, rounded
// to the dtype (to nearest even).
double Load(hvd_dtype_t d, const uint8_t* p) {
  uint16_t h;
  float f;
  double x;
  switch (d) {
    case HVD_FLOAT16: std::memcpy(&h, p, 2); return HalfToFloat(h);
    case HVD_BFLOAT16: std::memcpy(&h, p, 2); return BFloat16ToFloat(h);
    case HVD_FLOAT32: std::memcpy(&f, p, 4); return f;
    default: std::memcpy(&x, p, 8); return x;
  }
}
void Store(hvd_dtype_t d, uint8_t* p, double v) {
  uint16_t h;
  float f;
  switch (d) {
    case HVD_FLOAT16: h = FloatToHalf(static_cast<float>(v)); std::memcpy(p, &h, 2); break;
    case HVD_BFLOAT16: h = FloatToBFloat16(static_cast<float>(v)); std::memcpy(p, &h, 2); break;
    case HVD_FLOAT32: f = static_cast<float>(v); std::memcpy(p, &f, 4); break;
    default: std::memcpy(p, &v, 8); break;
  }
}

// a op b as one operation of the dtype: float64 in double, the others in
// float32 (exact for float16/bfloat16 operands), then rounded once to the
// dtype. MIN/MAX propagate NaN and keep a on ties (the kernels' rule).
double Op(hvd_dtype_t d, hvd_reduce_op_t op, double a, double b) {
  const bool wide = d == HVD_FLOAT64;
  switch (op) {
    case HVD_MIN: return (b < a || b != b) ? b : a;
    case HVD_MAX: return (b > a || b != b) ? b : a;
    case HVD_PRODUCT:
      return wide ? a * b : static_cast<double>(static_cast<float>(a) * static_cast<float>(b));
    default:
      return wide ? a + b : static_cast<double>(static_cast<float>(a) + static_cast<float>(b));
  }
}

// The reference: element i folded over the ranks' inputs in rank order.
std::vector<uint8_t> Canonical(hvd_dtype_t d, hvd_reduce_op_t op,
                               const std::vector<std::vector<uint8_t>>& in, size_t count) {
  const size_t es = DtypeSize(d);
  std::vector<uint8_t> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    uint8_t acc[8];
    std::memcpy(acc, in[0].data() + i * es, es);
    for (size_t r = 1; r < in.size(); ++r) {
      Store(d, acc, Op(d, op, Load(d, acc), Load(d, in[r].data() + i * es)));
    }
    std::memcpy(out.data() + i * es, acc, es);
  }
  return out;
}

struct Case {
  int ranks;
  hvd_dtype_t dtype;
  hvd_reduce_op_t op;
  size_t count;
  std::string algo;  // direct, ring, spans, reducescatter
  size_t segment;    // the fabric's segment bytes
  std::string Describe(uint64_t seed) const {
    return "seed " + std::to_string(seed) + ": " + algo + ", " + std::to_string(ranks) + " ranks, " +
           std::to_string(count) + " x " + DtypeName(dtype) + " " + ReduceOpName(op) +
           ", segment " + std::to_string(segment) + " B";
  }
};

Case Draw(std::mt19937_64& g) {
  Case c;
  const int ranks[] = {3, 4, 5, 6, 3, 4, 5, 6, 2, 7, 8};
  c.ranks = ranks[g() % 11];
  const hvd_dtype_t dtypes[] = {HVD_FLOAT16, HVD_BFLOAT16, HVD_FLOAT32, HVD_FLOAT64};
  c.dtype = dtypes[g() % 4];
  const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_SUM, HVD_SUM, HVD_SUM, HVD_SUM, HVD_PRODUCT, HVD_MIN, HVD_MAX};
  c.op = ops[g() % 8];
  // 1 element to 4 MiB, log-uniform (odd sizes included).
  const size_t max_count = (size_t{4} << 20) / DtypeSize(c.dtype);
  const double lg = std::uniform_real_distribution<double>(0, std::log2(double(max_count)))(g);
  c.count = std::max<size_t>(1, static_cast<size_t>(std::exp2(lg)));
  const char* algos[] = {"direct", "ring", "spans", "reducescatter"};
  c.algo = algos[g() % 4];
  if (c.algo == "direct") c.count = std::min<size_t>(c.count, size_t{64} << 10);
  const size_t segments[] = {size_t{1} << 20, size_t{1} << 20, 4096, 64 * 3 + 8, 1000};
  c.segment = segments[g() % 5];
  if (c.count * DtypeSize(c.dtype) / c.segment > 4096) c.segment = size_t{1} << 20;  // keep it quick
  return c;
}

// Magnitudes over 7 decades, both signs (PRODUCT: near 1, so the products
// stay finite and still round differently in another order).
std::vector<uint8_t> Data(hvd_dtype_t d, hvd_reduce_op_t op, size_t count, std::mt19937_64& g) {
  const size_t es = DtypeSize(d);
  std::vector<uint8_t> v(count * es);
  std::uniform_real_distribution<double> dec(-3, 4), unit(0.5, 2.0);
  for (size_t i = 0; i < count; ++i) {
    const double sign = (g() & 1) ? 1.0 : -1.0;
    Store(d, v.data() + i * es, op == HVD_PRODUCT ? sign * unit(g) : sign * std::pow(10.0, dec(g)));
  }
  return v;
}

// Runs the case; returns an empty string or what differs.
std::string RunCase(const Case& c, uint64_t seed) {
  std::mt19937_64 g(seed * 7919 + 1);
  const size_t es = DtypeSize(c.dtype);
  const int P = c.ranks;
  std::vector<std::vector<uint8_t>> in(static_cast<size_t>(P));
  for (auto& v : in) v = Data(c.dtype, c.op, c.count, g);
  const std::vector<uint8_t> want = Canonical(c.dtype, c.op, in, c.count);
  // Reducescatter blocks (some empty), fused spans' cuts.
  std::vector<size_t> counts(static_cast<size_t>(P), 0), cuts;
  for (size_t i = 0; i < c.count; ++i) ++counts[g() % static_cast<uint64_t>(P)];
  const size_t nspans = 1 + g() % 6;
  for (size_t k = 1; k < nspans; ++k) cuts.push_back(g() % (c.count + 1));
  cuts.push_back(0);
  cuts.push_back(c.count);
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::vector<uint8_t>> out = in;
  Fabric fab(P, c.segment);
  auto st = OnRanks(P, [&](algo::Links& l, int r) -> Status {
    algo::Scratch s;
    uint8_t* buf = out[r].data();
    if (c.algo == "direct") return algo::AllreduceDirect(l, s, hvd_reduce_kernel, buf, c.count, c.dtype, c.op);
    if (c.algo == "ring") return algo::AllreduceRing(l, s, hvd_reduce_kernel, buf, c.count, c.dtype, c.op);
    if (c.algo == "reducescatter") {
      return algo::ReducescatterRing(l, s, hvd_reduce_kernel, buf, counts.data(), c.dtype, c.op);
    }
    // Spans: each piece in a buffer of its own, as a fused batch's tensors lie.
    std::vector<std::vector<uint8_t>> pieces;
    std::vector<hvd_transport_span_t> spans;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      pieces.emplace_back(buf + cuts[k] * es, buf + cuts[k + 1] * es);
    }
    for (size_t k = 0; k < pieces.size(); ++k) spans.push_back({pieces[k].data(), cuts[k + 1] - cuts[k]});
    HVD_CHECK(algo::AllreduceRingSpans(l, s, hvd_reduce_kernel, spans.data(), spans.size(), c.dtype, c.op));
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (!pieces[k].empty()) std::memcpy(buf + cuts[k] * es, pieces[k].data(), pieces[k].size());
    }
    return Status::Ok();
  }, &fab);
  for (int r = 0; r < P; ++r) {
    if (!st[r].ok()) return "rank " + std::to_string(r) + ": " + st[r].message();
  }
  if (fab.Leftover() != 0) return std::to_string(fab.Leftover()) + " messages never received";
  for (int r = 0; r < P; ++r) {
    size_t from = 0, to = c.count;
    if (c.algo == "reducescatter") {
      from = 0;
      for (int q = 0; q < r; ++q) from += counts[q];
      to = from + counts[r];
    }
    for (size_t i = from; i < to; ++i) {
      if (std::memcmp(out[r].data() + i * es, want.data() + i * es, es) != 0) {
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": " +
               std::to_string(Load(c.dtype, out[r].data() + i * es)) + ", the rank-ordered fold " +
               std::to_string(Load(c.dtype, want.data() + i * es));
      }
    }
  }
  return "";
}

TEST(Reproducible, RandomConfigurationsGiveTheRankOrderedFold) {
  const char* env = std::getenv("HVD_TEST_SEED");
  const uint64_t first = env != nullptr ? std::strtoull(env, nullptr, 10) : 20261206;
  const int cases = env != nullptr ? 1 : 48;
  for (int k = 0; k < cases; ++k) {
    const uint64_t seed = first + static_cast<uint64_t>(k);
    std::mt19937_64 g(seed);
    const Case c = Draw(g);
    const std::string err = RunCase(c, seed);
    EXPECT_TRUE(err.empty()) << c.Describe(seed) << ": " << err;
  }
}

// The reference itself: a three-rank float32 sum that the two groupings
// round differently, so the fold is what the test compares against.
TEST(Reproducible, ReferenceFoldsLeftToRight) {
  std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(4));
  const float v[3] = {1e8f, 3.0f, 3.0f};  // (1e8 + 3) + 3 == 1e8 (ulp 8); 1e8 + 6 rounds up
  for (int r = 0; r < 3; ++r) std::memcpy(in[r].data(), &v[r], 4);
  float got;
  std::memcpy(&got, Canonical(HVD_FLOAT32, HVD_SUM, in, 1).data(), 4);
  EXPECT_EQ(got, (v[0] + v[1]) + v[2]);
  EXPECT_NE(got, v[0] + (v[1] + v[2]));
}

}  // namespace
}  // namespace hvd
