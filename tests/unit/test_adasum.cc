// algorithms/adasum: the combination of P per-rank copies, against an
// independent reference written here in double precision (a recursive
// split: the first half is the largest power of two below P), for
// P = 1..8 and every supported dtype; exact special cases (orthogonal,
// identical, opposite, zero vectors, a hand-computed pair) and random
// vectors within a stated tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "algorithms/adasum.h"
#include "common/kernels.h"

namespace {

using Vec = std::vector<double>;

Vec RefPair(const Vec& a, const Vec& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  double ca = aa > 0 ? 1 - dot / (2 * aa) : 1;
  double cb = bb > 0 ? 1 - dot / (2 * bb) : 1;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Ranks [lo, lo + n): the largest power of two h < n splits them.
Vec Ref(const std::vector<Vec>& x, int lo, int n) {
  if (n == 1) return x[lo];
  int h = 1;
  while (h * 2 < n) h *= 2;
  return RefPair(Ref(x, lo, h), Ref(x, lo + h, n - h));
}

// Encoding and decoding of one dtype's elements through double.
struct Codec {
  hvd_dtype_t dtype;
  size_t esize;
  void Put(void* p, size_t i, double v) const {
    switch (dtype) {
      case HVD_FLOAT64: static_cast<double*>(p)[i] = v; break;
      case HVD_FLOAT32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case HVD_FLOAT16:
        static_cast<uint16_t*>(p)[i] = hvd::FloatToHalf(static_cast<float>(v));
        break;
      default:
        static_cast<uint16_t*>(p)[i] = hvd::FloatToBFloat16(static_cast<float>(v));
        break;
    }
  }
  double Get(const void* p, size_t i) const {
    switch (dtype) {
      case HVD_FLOAT64: return static_cast<const double*>(p)[i];
      case HVD_FLOAT32: return static_cast<const float*>(p)[i];
      case HVD_FLOAT16: return hvd::HalfToFloat(static_cast<const uint16_t*>(p)[i]);
      default: return hvd::BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    }
  }
};

const Codec kCodecs[] = {{HVD_FLOAT64, 8}, {HVD_FLOAT32, 4}, {HVD_FLOAT16, 2}, {HVD_BFLOAT16, 2}};

// Relative tolerance (of the largest input or result magnitude) for random
// inputs: float32 keeps intermediate levels in float32 (3 levels for P <= 8),
// float16/bfloat16 round the result to their own precision.
double Tol(hvd_dtype_t d) {
  switch (d) {
    case HVD_FLOAT64: return 1e-12;
    case HVD_FLOAT32: return 1e-5;
    case HVD_FLOAT16: return 2e-3;
    default: return 1.6e-2;
  }
}

// Encodes x (P vectors of n) as gathered blocks, combines, decodes the result.
// Also returns (through inputs) the values as stored in the dtype.
Vec Combine(const Codec& c, const std::vector<Vec>& x, std::vector<Vec>* stored = nullptr) {
  const int p = static_cast<int>(x.size());
  const size_t n = x[0].size();
  std::vector<uint8_t> blocks(p * n * c.esize + 1), out(n * c.esize + 1);
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < n; ++i) c.Put(blocks.data(), r * n + i, x[r][i]);
  }
  if (stored) {
    stored->assign(p, Vec(n));
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < n; ++i) (*stored)[r][i] = c.Get(blocks.data(), r * n + i);
    }
  }
  EXPECT_TRUE(hvd::AdasumCombine(blocks.data(), p, n, c.dtype, out.data()));
  Vec y(n);
  for (size_t i = 0; i < n; ++i) y[i] = c.Get(out.data(), i);
  return y;
}

TEST(Adasum, SupportedDtypes) {
  for (int d = HVD_UINT8; d <= HVD_BOOL; ++d) {
    const auto dt = static_cast<hvd_dtype_t>(d);
    const bool want = dt == HVD_FLOAT16 || dt == HVD_BFLOAT16 || dt == HVD_FLOAT32 ||
                      dt == HVD_FLOAT64;
    EXPECT_EQ(hvd::AdasumSupportsDtype(dt), want) << d;
    if (!want) {
      int32_t in[4] = {1, 2, 3, 4}, out[2] = {7, 7};
      EXPECT_FALSE(hvd::AdasumCombine(in, 2, 2, dt, out));
      EXPECT_EQ(out[0], 7);
    }
  }
  EXPECT_STREQ(hvd::ReduceOpName(HVD_ADASUM), "adasum");
}

TEST(Adasum, HandComputedPair) {
  // a = (1, 0), b = (1, 1): a.b = 1, |a|^2 = 1, |b|^2 = 2 -> 0.5 a + 0.75 b.
  for (const Codec& c : kCodecs) {
    Vec y = Combine(c, {{1, 0}, {1, 1}});
    EXPECT_EQ(y, (Vec{1.25, 0.75})) << hvd::DtypeName(c.dtype);
    // Not symmetric in the tree order for P = 3: adasum(adasum(x0, x1), x2).
    Vec z = Combine(c, {{1, 0}, {1, 1}, {0, 2}});
    Vec zw = RefPair({1.25, 0.75}, {0, 2});
    for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(z[i], zw[i], Tol(c.dtype) * 2) << i;
  }
}

TEST(Adasum, SingleRankIsIdentity) {
  for (const Codec& c : kCodecs) {
    Vec y = Combine(c, {{1.5, -2, 0, 3}});
    EXPECT_EQ(y, (Vec{1.5, -2, 0, 3}));
  }
}

TEST(Adasum, OrthogonalVectorsSum) {
  for (const Codec& c : kCodecs) {
    for (int p = 1; p <= 8; ++p) {
      std::vector<Vec> x(p, Vec(10, 0.0));
      Vec sum(10, 0.0);
      for (int r = 0; r < p; ++r) {
        x[r][r] = r + 1;              // disjoint supports
        if (r + 8 < 10) x[r][r + 8] = -0.5 * r;
        for (size_t i = 0; i < 10; ++i) sum[i] += x[r][i];
      }
      EXPECT_EQ(Combine(c, x), sum) << hvd::DtypeName(c.dtype) << " P=" << p;
    }
  }
}

TEST(Adasum, IdenticalVectorsGiveTheVector) {
  for (const Codec& c : kCodecs) {
    for (int p = 1; p <= 8; ++p) {
      Vec v = {0.25, -3, 7.5, 0, 1};
      EXPECT_EQ(Combine(c, std::vector<Vec>(p, v)), v) << hvd::DtypeName(c.dtype) << " P=" << p;
    }
  }
}

TEST(Adasum, OppositeVectorsCancel) {
  for (const Codec& c : kCodecs) {
    Vec v = {1, -2, 3};
    Vec m = {-1, 2, -3};
    EXPECT_EQ(Combine(c, {v, m}), Vec(3, 0.0)) << hvd::DtypeName(c.dtype);
    // Level 1 cancels both pairs; two zero vectors combine to zero.
    EXPECT_EQ(Combine(c, {v, m, v, m}), Vec(3, 0.0)) << hvd::DtypeName(c.dtype);
    // P = 3: (v, -v) -> 0, then adasum(0, v) = v.
    EXPECT_EQ(Combine(c, {v, m, v}), v) << hvd::DtypeName(c.dtype);
  }
}

TEST(Adasum, ZeroVectors) {
  for (const Codec& c : kCodecs) {
    Vec z(4, 0.0), a = {1, 2, -4, 0.5};
    EXPECT_EQ(Combine(c, {z, z}), z);
    EXPECT_EQ(Combine(c, {z, a}), a) << hvd::DtypeName(c.dtype);
    EXPECT_EQ(Combine(c, {a, z}), a) << hvd::DtypeName(c.dtype);
    for (int p = 1; p <= 8; ++p) EXPECT_EQ(Combine(c, std::vector<Vec>(p, z)), z);
  }
}

TEST(Adasum, EmptyTensor) {
  double out = 42;
  EXPECT_TRUE(hvd::AdasumCombine(nullptr, 3, 0, HVD_FLOAT64, &out));
  EXPECT_EQ(out, 42);
}

TEST(Adasum, RandomAgainstReference) {
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> g(0.0, 1.0);
  for (const Codec& c : kCodecs) {
    for (int p = 1; p <= 8; ++p) {
      for (size_t n : {1u, 3u, 17u, 1000u}) {
        std::vector<Vec> x(p, Vec(n));
        for (int r = 0; r < p; ++r) {
          // Correlated vectors (a shared direction plus noise), scales differing per rank.
          for (size_t i = 0; i < n; ++i) x[r][i] = (0.5 + r) * (std::sin(i + 1.0) + 0.7 * g(rng));
        }
        std::vector<Vec> stored;
        Vec y = Combine(c, x, &stored);
        Vec want = Ref(stored, 0, p);
        double scale = 0;
        for (const Vec& v : stored) for (double e : v) scale = std::max(scale, std::fabs(e));
        for (double e : want) scale = std::max(scale, std::fabs(e));
        for (size_t i = 0; i < n; ++i) {
          ASSERT_NEAR(y[i], want[i], Tol(c.dtype) * scale)
              << hvd::DtypeName(c.dtype) << " P=" << p << " n=" << n << " i=" << i;
        }
        // Deterministic: the same inputs give the same bits.
        Vec again = Combine(c, x);
        ASSERT_EQ(std::memcmp(again.data(), y.data(), n * sizeof(double)), 0);
      }
    }
  }
}

// The reference itself is the documented tree: P = 5 is
// adasum(adasum(adasum(x0, x1), adasum(x2, x3)), x4).
TEST(Adasum, TreeOrderForFiveRanks) {
  std::vector<Vec> x = {{1, 0.5}, {0.2, 1}, {-1, 0.3}, {0.7, 0.7}, {2, -1}};
  Vec want = RefPair(RefPair(RefPair(x[0], x[1]), RefPair(x[2], x[3])), x[4]);
  Vec y = Combine(kCodecs[0], x);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(y[i], want[i], 1e-15);
  // A different order gives a different answer here, so the test can tell.
  Vec other = RefPair(RefPair(x[0], x[1]), RefPair(RefPair(x[2], x[3]), x[4]));
  EXPECT_GT(std::fabs(other[0] - want[0]) + std::fabs(other[1] - want[1]), 1e-6);
}

}  // namespace
