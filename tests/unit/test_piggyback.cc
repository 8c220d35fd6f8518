// A small allreduce or broadcast riding in the negotiation (HVD_PIGGYBACK):
// once a small host allreduce (or broadcast) has been served alone, later
// negotiations carry it, and a step whose every rank has it ready needs no
// second collective. These
// tests check that it happens (the context counts such allreduces, exactly:
// every step after the first), that results stay exact for every dtype and
// op it takes and for those it does not, with scale factors, joined ranks,
// shuffled submission next to a big tensor, and that one rank with the
// switch off, or a process set, turns it off for everyone; that a broadcast
// gives the root's bits from every root, an allgather every rank's bits in
// rank order, and that neither displaces an allreduce plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/kernels.h"
#include "core/context.h"
#include "core/loop/request.h"
#include "reference.h"
#include "context_ranks.h"

namespace hvd {
namespace {

using test::RankEnv;
using test::RunContexts;

// One host tensor of `count` elements of d, from in to out.
OpRequest OneTensor(OpType type, const std::string& name, hvd_dtype_t d, const void* in, void* out,
                    size_t count) {
  OpRequest req;
  req.type = type;
  TensorSpec t;
  t.name = name;
  t.dtype = d;
  t.shape = {static_cast<int64_t>(count)};
  t.input = const_cast<void*>(in);
  t.output = out;
  req.tensors.push_back(std::move(t));
  req.handle = MakeHandle(OpTypeName(type), name);
  return req;
}

Result<HandleRef> Allreduce(Context& ctx, const std::string& name, hvd_dtype_t d,
                                          const void* in, void* out, size_t count,
                                          hvd_reduce_op_t op, double pre = 1, double post = 1) {
  OpRequest req = OneTensor(OpType::kAllreduce, name, d, in, out, count);
  req.reduce_op = op;
  req.prescale = pre;
  req.postscale = post;
  return ctx.Enqueue(std::move(req));
}

Result<HandleRef> Broadcast(Context& ctx, const std::string& name, hvd_dtype_t d,
                                          const void* in, void* out, size_t count, int root) {
  OpRequest req = OneTensor(OpType::kBroadcast, name, d, in, out, count);
  req.root = root;
  return ctx.Enqueue(std::move(req));
}

Result<HandleRef> Join(Context& ctx) {
  OpRequest req;
  req.type = OpType::kJoin;
  TensorSpec t;
  t.dtype = HVD_UINT8;
  t.shape = {0};
  req.tensors.push_back(std::move(t));
  req.handle = MakeHandle("join");
  return ctx.Enqueue(std::move(req));
}

int64_t Piggybacked(Context& ctx) {
  auto n = ctx.Query("piggybacked");
  EXPECT_TRUE(n.ok()) << n.status().message();
  return n.ok() ? *n : -1;
}

// Whether the negotiation can carry an allreduce of d under op among n
// ranks: the dtype must hold 0..255 exactly, and the size for SUM.
bool Rides(hvd_dtype_t d, hvd_reduce_op_t op, int n) {
  double exact = 0;
  switch (d) {
    case HVD_UINT8: exact = 255; break;
    case HVD_UINT16: exact = 65535; break;
    case HVD_INT16: exact = 32767; break;
    case HVD_FLOAT16: exact = 2048; break;
    case HVD_BFLOAT16: exact = 256; break;
    case HVD_INT32: case HVD_INT64: case HVD_FLOAT32: case HVD_FLOAT64: exact = 1e9; break;
    default: exact = 0;  // int8, bool
  }
  return exact >= 255 && ((op != HVD_SUM && op != HVD_AVERAGE) || exact >= n);
}

// One step: allreduce of `count` elements of d under op, out of place into
// a poisoned buffer; every element checked against the reference.
void Step(Context& ctx, int rank, int n, hvd_dtype_t d, hvd_reduce_op_t op, size_t count,
          const std::string& name, std::atomic<int>* failures) {
  const size_t es = DtypeSize(d);
  std::vector<unsigned char> in(count * es), out(count * es, 0xAB);
  for (size_t i = 0; i < count; ++i) test::Store(d, in.data(), i, test::Value(d, op, rank, i));
  auto h = Allreduce(ctx, name, d, in.data(), out.data(), count, op);
  ASSERT_TRUE(h.ok()) << h.status().message();
  Status s = (*h)->Wait(60);
  ASSERT_TRUE(s.ok()) << name << ": " << s.message();
  const double tol = test::Tolerance(d, op);
  for (size_t i = 0; i < count; ++i) {
    const double want = test::Expected(d, op, n, i);
    const double got = test::Load(d, out.data(), i);
    if (std::fabs(got - want) > tol * std::max(1.0, std::fabs(want))) {
      ADD_FAILURE() << "rank " << rank << " " << name << "[" << i << "]: got " << got
                    << " want " << want;
      ++*failures;
      return;
    }
  }
}

class PiggybackMatrix : public ::testing::TestWithParam<int> {};

// Every dtype x op, a few steps each: exact results, and every step after
// the first served by the negotiation where the dtype and op allow it
// (none where they do not: int8, bool).
TEST_P(PiggybackMatrix, EveryDtypeAndOpExactAndServedAfterTheFirstStep) {
  const int n = GetParam();
  constexpr int kSteps = 5;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    for (hvd_dtype_t d : test::kDtypes) {
      for (hvd_reduce_op_t op : test::kOps) {
        if (d == HVD_BOOL && op == HVD_AVERAGE) continue;
        const std::string name = std::string(DtypeName(d)) + "/" + ReduceOpName(op);
        const int64_t before = Piggybacked(ctx);
        for (int s = 0; s < kSteps; ++s) Step(ctx, rank, n, d, op, 3, name, &failures);
        EXPECT_EQ(Piggybacked(ctx) - before, Rides(d, op, n) ? kSteps - 1 : 0)
            << "rank " << rank << " " << name;
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PiggybackMatrix, ::testing::Values(2, 3, 4));

// Scale factors apply as for an unfused allreduce: sum(x * pre) * post,
// AVERAGE's division included; and a tensor over the size limit (1 KiB)
// never rides.
TEST(Piggyback, ScaleFactorsAndTheSizeLimit) {
  constexpr int n = 3;
  constexpr int kSteps = 4;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    for (hvd_reduce_op_t op : {HVD_SUM, HVD_AVERAGE}) {
      for (size_t count : {size_t{1}, size_t{256}, size_t{257}}) {  // 257 floats > 1 KiB
        const std::string name = std::string("scaled/") + ReduceOpName(op) + "/" +
                                 std::to_string(count);
        const int64_t before = Piggybacked(ctx);
        for (int s = 0; s < kSteps; ++s) {
          std::vector<float> in(count), out(count, -1);
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank + 1 + i % 5 + s);
          auto h = Allreduce(ctx, name, HVD_FLOAT32, in.data(), out.data(), count, op, 0.5, 4);
          ASSERT_TRUE(h.ok()) << h.status().message();
          ASSERT_TRUE((*h)->Wait(60).ok()) << (*h)->status().message();
          for (size_t i = 0; i < count; ++i) {
            double sum = 0;
            for (int r = 0; r < n; ++r) sum += (r + 1 + i % 5 + s) * 0.5;
            const double want = sum * 4 / (op == HVD_AVERAGE ? n : 1);
            if (std::fabs(out[i] - want) > 1e-5 * std::max(1.0, want)) {
              ADD_FAILURE() << name << "[" << i << "] step " << s << ": got " << out[i]
                            << " want " << want;
              ++failures;
              break;
            }
          }
        }
        EXPECT_EQ(Piggybacked(ctx) - before, count <= 256 ? kSteps - 1 : 0) << name;
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

// HVD_PIGGYBACK=0 on one rank: nobody's negotiation carries a tensor (the
// layout must agree), and results are exact.
TEST(Piggyback, OneRankWithItOffTurnsItOffForAll) {
  constexpr int n = 3;
  std::atomic<int> failures{0};
  RunContexts(
      n,
      [&](Context& ctx, int rank) {
        for (int s = 0; s < 6; ++s) Step(ctx, rank, n, HVD_FLOAT32, HVD_SUM, 4, "x", &failures);
        EXPECT_EQ(Piggybacked(ctx), 0) << "rank " << rank;
      },
      "gloo",
      [](int r) {
        RankEnv e;
        if (r == 1) e["HVD_PIGGYBACK"] = "0";
        return e;
      });
  EXPECT_EQ(failures.load(), 0);
}

// A rank that joined contributes zeros to the planned tensor, as to any
// allreduce after a join: the others' steps are served by the negotiation
// and sum only their own values.
TEST(Piggyback, AJoinedRankContributesZeros) {
  constexpr int n = 3;
  constexpr int kSteps = 5, kBeforeJoin = 2;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    const int steps = rank == 2 ? kBeforeJoin : kSteps;
    const int64_t before = Piggybacked(ctx);
    for (int s = 0; s < steps; ++s) {
      int64_t v[2] = {rank + 1, 10 * (rank + 1) + s}, out[2] = {-1, -1};
      auto h = Allreduce(ctx, "x", HVD_INT64, v, out, 2, HVD_SUM);
      ASSERT_TRUE(h.ok()) << h.status().message();
      ASSERT_TRUE((*h)->Wait(60).ok()) << (*h)->status().message();
      const int ranks = s < kBeforeJoin ? 3 : 2;  // ranks 0 and 1 go on alone
      int64_t want0 = 0, want1 = 0;
      for (int r = 0; r < ranks; ++r) {
        want0 += r + 1;
        want1 += 10 * (r + 1) + s;
      }
      if (out[0] != want0 || out[1] != want1) {
        ADD_FAILURE() << "rank " << rank << " step " << s << ": got " << out[0] << ", "
                      << out[1] << " want " << want0 << ", " << want1;
        ++failures;
      }
    }
    auto j = Join(ctx);
    ASSERT_TRUE(j.ok()) << j.status().message();
    ASSERT_TRUE((*j)->Wait(60).ok()) << (*j)->status().message();
    EXPECT_EQ(Piggybacked(ctx) - before, steps - 1) << "rank " << rank;
  });
  EXPECT_EQ(failures.load(), 0);
}

// The planned tensor beside a big one, submitted in a different order on
// every rank with random delays: whatever cycles serve them, the results
// are exact; a step that waits for the small tensor alone is served.
TEST(Piggyback, BesideABigTensorInShuffledOrder) {
  constexpr int n = 3;
  constexpr int kSteps = 12;
  constexpr size_t kBig = 1 << 18;  // 1 MiB of float32
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    std::mt19937 rng(77 + rank);
    std::vector<float> big(kBig), big_out(kBig);
    for (int s = 0; s < kSteps; ++s) {
      float loss = static_cast<float>(rank + s), loss_out = -1;
      for (size_t i = 0; i < kBig; i += 4096) big[i] = static_cast<float>(rank * (i % 7) + s);
      HandleRef hl, hb;
      auto submit_loss = [&] {
        auto h = Allreduce(ctx, "loss", HVD_FLOAT32, &loss, &loss_out, 1, HVD_SUM);
        ASSERT_TRUE(h.ok()) << h.status().message();
        hl = *h;
      };
      auto submit_big = [&] {
        auto h = Allreduce(ctx, "grad", HVD_FLOAT32, big.data(), big_out.data(), kBig, HVD_SUM);
        ASSERT_TRUE(h.ok()) << h.status().message();
        hb = *h;
      };
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      if ((rng() & 1) != 0) {
        submit_loss();
        submit_big();
      } else {
        submit_big();
        submit_loss();
      }
      ASSERT_TRUE(hl->Wait(60).ok()) << hl->status().message();
      ASSERT_TRUE(hb->Wait(60).ok()) << hb->status().message();
      float want = 0;
      for (int r = 0; r < n; ++r) want += static_cast<float>(r + s);
      if (loss_out != want) {
        ADD_FAILURE() << "rank " << rank << " step " << s << ": loss " << loss_out << " want "
                      << want;
        ++failures;
      }
      for (size_t i = 0; i < kBig; i += 4096) {
        float w = 0;
        for (int r = 0; r < n; ++r) w += static_cast<float>(r * (i % 7) + s);
        if (big_out[i] != w) {
          ADD_FAILURE() << "rank " << rank << " step " << s << ": grad[" << i << "] "
                        << big_out[i] << " want " << w;
          ++failures;
          break;
        }
      }
    }
    // Now the loss alone each step: planned by its first lone cycle (at the
    // latest), served by every later one.
    const int64_t before = Piggybacked(ctx);
    for (int s = 0; s < 4; ++s) Step(ctx, rank, n, HVD_FLOAT32, HVD_MAX, 1, "loss2", &failures);
    EXPECT_EQ(Piggybacked(ctx) - before, 3) << "rank " << rank;
  });
  EXPECT_EQ(failures.load(), 0);
}

// A name submitted again as something else is cached anew; a plan made
// from the old entry ends. Here "x" becomes the first member (and so the
// key) of a grouped allreduce, which is never planned (two tensors): the
// group's steps must not take the old plan, then "x" alone again rides.
TEST(Piggyback, ANameCachedAnewEndsThePlan) {
  constexpr int n = 3;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    for (int s = 0; s < 3; ++s) Step(ctx, rank, n, HVD_FLOAT32, HVD_SUM, 3, "x", &failures);
    for (int s = 0; s < 3; ++s) {
      float x[5], xo[5];
      int32_t w[2] = {rank, 1}, wo[2] = {-1, -1};
      for (int i = 0; i < 5; ++i) x[i] = static_cast<float>(rank * 10 + i + s);
      OpRequest req;
      req.type = OpType::kAllreduce;
      req.reduce_op = HVD_SUM;
      TensorSpec a, b;
      a.name = "x";
      a.dtype = HVD_FLOAT32;
      a.shape = {5};
      a.input = x;
      a.output = xo;
      b.name = "w";
      b.dtype = HVD_INT32;
      b.shape = {2};
      b.input = w;
      b.output = wo;
      req.tensors.push_back(std::move(a));
      req.tensors.push_back(std::move(b));
      req.handle = MakeHandle("grouped allreduce", "x");
      auto h = ctx.Enqueue(std::move(req));
      ASSERT_TRUE(h.ok()) << h.status().message();
      ASSERT_TRUE((*h)->Wait(60).ok()) << (*h)->status().message();
      for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(xo[i], 30.0f + 3 * (i + s)) << "rank " << rank << " step " << s;
      }
      EXPECT_EQ(wo[0], 3) << "rank " << rank << " step " << s;
      EXPECT_EQ(wo[1], 3) << "rank " << rank << " step " << s;
    }
    const int64_t before = Piggybacked(ctx);
    for (int s = 0; s < 3; ++s) Step(ctx, rank, n, HVD_FLOAT32, HVD_SUM, 5, "x", &failures);
    EXPECT_EQ(Piggybacked(ctx) - before, 2) << "rank " << rank;
  });
  EXPECT_EQ(failures.load(), 0);
}

// While a process set exists the negotiation packs the sets' bytes too and
// carries no tensor; once it is gone, the plan rides again.
TEST(Piggyback, OffWhileAProcessSetExists) {
  constexpr int n = 3;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    Step(ctx, rank, n, HVD_INT32, HVD_SUM, 2, "y", &failures);
    auto set = ctx.CreateProcessSet({0, 1});
    ASSERT_TRUE(set.ok()) << set.status().message();
    const int64_t before = Piggybacked(ctx);
    for (int s = 0; s < 4; ++s) Step(ctx, rank, n, HVD_INT32, HVD_SUM, 2, "y", &failures);
    EXPECT_EQ(Piggybacked(ctx) - before, 0) << "rank " << rank;
    if (*set) {
      EXPECT_TRUE((*set)->Shutdown().ok());
    }
    set->reset();
    // The set's slot frees once no member holds it; the plan survives.
    for (int s = 0; s < 4; ++s) Step(ctx, rank, n, HVD_INT32, HVD_SUM, 2, "y", &failures);
    EXPECT_GE(Piggybacked(ctx) - before, 1) << "rank " << rank;
  });
  EXPECT_EQ(failures.load(), 0);
}

// The root's bytes of step s: every byte value, 0xFF (MIN's identity) and
// 0x00 among them, and float bit patterns (-0, a NaN with a payload) that
// arithmetic would not keep.
std::vector<unsigned char> RootBytes(int root, int s, size_t n) {
  std::vector<unsigned char> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * 37 + s * 11 + root * 101);
  if (n >= 8) {
    b[0] = 0xFF;
    b[1] = 0x00;
    const uint32_t neg_zero = 0x80000000u;
    std::memcpy(b.data() + 4, &neg_zero, 4);
  }
  if (n >= 12) {
    const uint32_t nan_payload = 0x7FC0BEEFu;
    std::memcpy(b.data() + 8, &nan_payload, 4);
  }
  return b;
}

// Every step after the first served by the negotiation where `bytes` fit
// in its limit (1 KiB), none where they do not.
void ExpectServed(int64_t served, size_t bytes, int steps, int rank, const std::string& name) {
  if (bytes <= 1024) {
    EXPECT_EQ(served, steps - 1) << "rank " << rank << " " << name;
  } else {
    EXPECT_EQ(served, 0) << "rank " << rank << " " << name;
  }
}

// A step of a small allreduce, waited for, then `other` (another small
// operation, waited for): the allreduce keeps riding (the other does not
// take its plan), so every step after the first is served once.
void KeepsTheAllreduceRiding(
    const std::function<void(Context&, int rank, int step, std::atomic<int>*)>& other) {
  constexpr int n = 3;
  constexpr int kSteps = 6;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    const int64_t before = Piggybacked(ctx);
    for (int s = 0; s < kSteps; ++s) {
      Step(ctx, rank, n, HVD_INT32, HVD_SUM, 2, "loss", &failures);
      other(ctx, rank, s, &failures);
    }
    EXPECT_EQ(Piggybacked(ctx) - before, kSteps - 1) << "rank " << rank;
  });
  EXPECT_EQ(failures.load(), 0);
}

// A small broadcast from every root, in place on the others and out of
// place on the root into a poisoned buffer: every rank gets the root's bits
// exactly, and every step after each root's first is served by the
// negotiation; one over the size limit (1 KiB) never rides.
TEST(Piggyback, ASmallBroadcastRidesFromEveryRootBitForBit) {
  constexpr int n = 3;
  constexpr int kSteps = 5;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    for (size_t floats : {size_t{1}, size_t{64}, size_t{512}}) {
      const size_t bytes = floats * sizeof(float);
      for (int root = 0; root < n; ++root) {
        const std::string name = "b." + std::to_string(floats) + "." + std::to_string(root);
        const int64_t before = Piggybacked(ctx);
        for (int s = 0; s < kSteps; ++s) {
          const std::vector<unsigned char> want = RootBytes(root, s, bytes);
          std::vector<unsigned char> in =
              rank == root ? want : std::vector<unsigned char>(bytes, 0x5A);
          std::vector<unsigned char> out(bytes, 0xAB);
          void* dst = rank == root ? out.data() : in.data();
          auto h = Broadcast(ctx, name, HVD_FLOAT32, in.data(), dst, floats, root);
          ASSERT_TRUE(h.ok()) << h.status().message();
          ASSERT_TRUE((*h)->Wait(60).ok()) << (*h)->status().message();
          if (std::memcmp(dst, want.data(), bytes) != 0) {
            ADD_FAILURE() << "rank " << rank << " " << name << " step " << s
                          << ": not the root's bytes";
            ++failures;
          }
        }
        ExpectServed(Piggybacked(ctx) - before, bytes, kSteps, rank, name);
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

// A step with a small allreduce and then a small broadcast, each waited
// for: the allreduce keeps riding (a broadcast does not take its plan), so
// every step after the first is served once, and both results are exact.
TEST(Piggyback, ABroadcastLeavesAnAllreducePlanRiding) {
  KeepsTheAllreduceRiding([](Context& ctx, int rank, int s, std::atomic<int>* failures) {
    int32_t flag = rank == 0 ? 1000 + s : -1;
    auto h = Broadcast(ctx, "stop", HVD_INT32, &flag, &flag, 1, 0);
    ASSERT_TRUE(h.ok()) << h.status().message();
    ASSERT_TRUE((*h)->Wait(60).ok()) << (*h)->status().message();
    if (flag != 1000 + s) {
      ADD_FAILURE() << "rank " << rank << " step " << s << ": flag " << flag;
      ++*failures;
    }
  });
}

// An allgather of `rows` rows of `cols` float32s (rows may differ by rank).
Result<HandleRef> Allgather(Context& ctx, const std::string& name, const void* in,
                                          int64_t rows, int64_t cols) {
  OpRequest req = OneTensor(OpType::kAllgather, name, HVD_FLOAT32, in, nullptr,
                            static_cast<size_t>(rows * cols));
  req.tensors.front().shape = {rows, cols};
  return ctx.Enqueue(std::move(req));
}

// A small allgather every step (each rank's loss, its sample count) rides
// too: every rank's bits in rank order (0xFF, -0, a NaN payload among
// them), with the ranks' first dimensions different, the result's shape
// the sum of them; every step after the first served by the negotiation
// where all parts together fit in 1 KiB, none where they do not.
TEST(Piggyback, ASmallAllgatherRidesWithEveryRanksBitsInOrder) {
  constexpr int n = 3;
  constexpr int kSteps = 5;
  std::atomic<int> failures{0};
  RunContexts(n, [&](Context& ctx, int rank) {
    // cols float32s a row; rank q has q + 1 rows (6 rows in all).
    for (int64_t cols : {int64_t{1}, int64_t{10}, int64_t{43}, int64_t{44}}) {
      const size_t row = static_cast<size_t>(cols) * sizeof(float);
      const size_t total = 6 * row;
      const std::string name = "g." + std::to_string(cols);
      const int64_t before = Piggybacked(ctx);
      for (int s = 0; s < kSteps; ++s) {
        std::vector<unsigned char> want;
        for (int q = 0; q < n; ++q) {
          const std::vector<unsigned char> part = RootBytes(q, s, (q + 1) * row);
          want.insert(want.end(), part.begin(), part.end());
        }
        const std::vector<unsigned char> mine = RootBytes(rank, s, (rank + 1) * row);
        auto h = Allgather(ctx, name, mine.data(), rank + 1, cols);
        ASSERT_TRUE(h.ok()) << h.status().message();
        ASSERT_TRUE((*h)->Wait(60).ok()) << (*h)->status().message();
        auto out = (*h)->HostOutput();
        ASSERT_TRUE(out.ok()) << out.status().message();
        const std::vector<int64_t> shape = (*h)->output_shape;
        if (shape != std::vector<int64_t>{6, cols} || (*out)->size() != total ||
            std::memcmp((*out)->data(), want.data(), total) != 0) {
          ADD_FAILURE() << "rank " << rank << " " << name << " step " << s
                        << ": not every rank's bytes in order";
          ++failures;
        }
      }
      ExpectServed(Piggybacked(ctx) - before, total, kSteps, rank, name);
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

// A step with a small allreduce and then a small allgather, each waited
// for: the allreduce keeps riding (an allgather does not take its plan), so
// every step after the first is served once, and both results are exact.
TEST(Piggyback, AnAllgatherLeavesAnAllreducePlanRiding) {
  KeepsTheAllreduceRiding([](Context& ctx, int rank, int s, std::atomic<int>* failures) {
    const float mine[2] = {static_cast<float>(rank), static_cast<float>(s)};
    auto h = Allgather(ctx, "seen", mine, 1, 2);
    ASSERT_TRUE(h.ok()) << h.status().message();
    ASSERT_TRUE((*h)->Wait(60).ok()) << (*h)->status().message();
    auto out = (*h)->HostOutput();
    ASSERT_TRUE(out.ok());
    const float* got = reinterpret_cast<const float*>((*out)->data());
    for (int q = 0; q < 3; ++q) {
      if (got[2 * q] != static_cast<float>(q) || got[2 * q + 1] != static_cast<float>(s)) {
        ADD_FAILURE() << "rank " << rank << " step " << s << ": rank " << q << "'s part";
        ++*failures;
      }
    }
  });
}

}  // namespace
}  // namespace hvd
