// The whole engine (C API -> core -> Gloo) with ranks as threads: every
// dtype x op against independently computed values, shuffled submission
// order, fusion of many small tensors, every collective, mismatches.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/kernels.h"
#include "reference.h"
#include "thread_ranks.h"

namespace {

using hvd::test::RunRanks;
using namespace hvd::test;  // NOLINT: reference values

struct Case {
  hvd_dtype_t dtype;
  hvd_reduce_op_t op;
  bool in_place;
  size_t count;
  std::string name;
  std::vector<unsigned char> in, out;
  int64_t shape[1];
  hvd_handle_t handle = nullptr;
};

class EngineMatrix : public ::testing::TestWithParam<int> {};

TEST_P(EngineMatrix, EveryDtypeAndOpInShuffledOrder) {
  const int n = GetParam();
  std::atomic<int> failures{0};
  RunRanks(n, [&](hvd_context_t ctx, int rank) {
    std::vector<Case> cases;
    for (hvd_dtype_t d : kDtypes) {
      for (hvd_reduce_op_t op : kOps) {
        if (d == HVD_BOOL && op == HVD_AVERAGE) continue;
        for (bool in_place : {false, true}) {
          for (size_t count : {size_t{1}, size_t{33}, size_t{4099}}) {
            Case c;
            c.dtype = d;
            c.op = op;
            c.in_place = in_place;
            c.count = count;
            c.name = std::string(hvd::DtypeName(d)) + "/" + hvd::ReduceOpName(op) + "/" +
                     (in_place ? "in" : "out") + "/" + std::to_string(count);
            cases.push_back(std::move(c));
          }
        }
      }
    }
    // Every rank submits in its own order.
    std::mt19937 rng(1000 + rank);
    std::shuffle(cases.begin(), cases.end(), rng);
    for (Case& c : cases) {
      size_t es = hvd::DtypeSize(c.dtype);
      c.in.assign(c.count * es, 0);
      c.out.assign(c.count * es, 0xAB);
      for (size_t i = 0; i < c.count; ++i) Store(c.dtype, c.in.data(), i, Value(c.dtype, c.op, rank, i));
      c.shape[0] = static_cast<int64_t>(c.count);
      hvd_tensor_t t = HVD_TENSOR_INIT;
      t.data = c.in.data();
      t.dtype = c.dtype;
      t.ndim = 1;
      t.shape = c.shape;
      void* out = c.in_place ? c.in.data() : c.out.data();
      ASSERT_EQ(hvd_allreduce_async(ctx, c.name.c_str(), &t, out, c.op, 1.0, 1.0, &c.handle), HVD_OK)
          << hvd_last_error();
    }
    for (Case& c : cases) {
      ASSERT_EQ(hvd_handle_wait(c.handle, 60), HVD_OK) << c.name << ": " << hvd_last_error();
      hvd_handle_release(c.handle);
      const void* res = c.in_place ? c.in.data() : c.out.data();
      double tol = Tolerance(c.dtype, c.op);
      for (size_t i = 0; i < c.count; ++i) {
        double want = Expected(c.dtype, c.op, n, i);
        double got = Load(c.dtype, res, i);
        if (std::fabs(got - want) > tol * std::max(1.0, std::fabs(want))) {
          ADD_FAILURE() << "rank " << rank << " " << c.name << "[" << i << "]: got " << got
                        << " want " << want;
          ++failures;
          break;
        }
      }
      if (!c.in_place) {  // the input is left alone
        for (size_t i = 0; i < c.count; ++i) {
          if (Load(c.dtype, c.in.data(), i) != Value(c.dtype, c.op, rank, i) &&
              !(c.dtype == HVD_BOOL)) {
            ADD_FAILURE() << c.name << ": out-of-place allreduce changed its input";
            break;
          }
        }
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, EngineMatrix, ::testing::Values(2, 3, 4, 8));

TEST(Engine, PreAndPostScale) {
  RunRanks(3, [](hvd_context_t ctx, int rank) {
    std::vector<float> f(10);
    std::vector<double> d(10);
    std::vector<int32_t> k(10);
    for (int i = 0; i < 10; ++i) {
      f[i] = static_cast<float>(i + rank);
      d[i] = i + rank;
      k[i] = i + rank;
    }
    int64_t shape[1] = {10};
    hvd_tensor_t tf = {f.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_tensor_t td = {d.data(), HVD_FLOAT64, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_tensor_t tk = {k.data(), HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h1, h2, h3;
    ASSERT_EQ(hvd_allreduce_async(ctx, "f", &tf, f.data(), HVD_SUM, 0.5, 4.0, &h1), HVD_OK);
    ASSERT_EQ(hvd_allreduce_async(ctx, "d", &td, d.data(), HVD_AVERAGE, 2.0, 0.25, &h2), HVD_OK);
    ASSERT_EQ(hvd_allreduce_async(ctx, "k", &tk, k.data(), HVD_AVERAGE, 1.0, 3.0, &h3), HVD_OK);
    for (auto h : {h1, h2, h3}) {
      ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
      hvd_handle_release(h);
    }
    for (int i = 0; i < 10; ++i) {
      double sum = 3 * i + 3;  // ranks 0..2
      EXPECT_FLOAT_EQ(f[i], static_cast<float>(sum * 0.5 * 4.0));
      EXPECT_DOUBLE_EQ(d[i], sum * 2.0 / 3 * 0.25);
      EXPECT_EQ(k[i], static_cast<int32_t>((3 * i + 3) / 3 * 3));
    }
  });
}

TEST(Engine, ThousandSmallTensorsInOneStepAreFused) {
  const int n = 2;
  std::string timeline = ::testing::TempDir() + "hvd_fusion_timeline.json";
  RunRanks(
      n,
      [&](hvd_context_t ctx, int rank) {
        const int kTensors = 1000;
        std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(16));
        std::vector<hvd_handle_t> hs(kTensors);
        int64_t shape[1] = {16};
        std::vector<int> order(kTensors);
        for (int i = 0; i < kTensors; ++i) order[i] = i;
        std::mt19937 rng(rank);
        std::shuffle(order.begin(), order.end(), rng);
        for (int step = 0; step < 3; ++step) {
          for (int i : order) {
            for (int j = 0; j < 16; ++j) bufs[i][j] = static_cast<float>(i * 100 + j + rank + step);
            hvd_tensor_t t = {bufs[i].data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
            std::string name = "small." + std::to_string(i);
            ASSERT_EQ(hvd_allreduce_async(ctx, name.c_str(), &t, bufs[i].data(), HVD_SUM, 1, 1, &hs[i]),
                      HVD_OK);
          }
          for (int i = 0; i < kTensors; ++i) {
            ASSERT_EQ(hvd_handle_wait(hs[i], 60), HVD_OK) << hvd_last_error();
            hvd_handle_release(hs[i]);
            for (int j = 0; j < 16; ++j) {
              ASSERT_EQ(bufs[i][j], static_cast<float>(2 * (i * 100 + j + step) + 1));
            }
          }
        }
      },
      [&](hvd_params_t* p) {
        p->cycle_time_ms = 5;
        p->timeline_path = timeline.c_str();
        p->mask |= HVD_PARAM_CYCLE_TIME | HVD_PARAM_TIMELINE;
      });
  // The timeline shows fused allreduces holding many tensors at once.
  FILE* f = fopen(timeline.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, got);
  fclose(f);
  size_t max_fused = 0;
  for (size_t pos = 0; (pos = text.find("\"fused_tensors\":", pos)) != std::string::npos;) {
    pos += 16;
    max_fused = std::max<size_t>(max_fused, std::stoul(text.substr(pos, 10)));
  }
  EXPECT_GE(max_fused, 100u) << "small tensors were not fused";
  EXPECT_EQ(text.substr(0, 1), "[");
  EXPECT_NE(text.find("\n]"), std::string::npos) << "timeline JSON not closed";
}

TEST(Engine, TensorsAboveTheFusionThresholdRunUnfused) {
  RunRanks(
      2,
      [](hvd_context_t ctx, int rank) {
        std::vector<double> big(100000), small(10);
        for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i % 1000) + rank;
        for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<double>(i) * (rank + 1);
        int64_t sb[1] = {100000}, ss[1] = {10};
        hvd_tensor_t tb = {big.data(), HVD_FLOAT64, 1, sb, HVD_DEVICE_CPU, nullptr};
        hvd_tensor_t ts = {small.data(), HVD_FLOAT64, 1, ss, HVD_DEVICE_CPU, nullptr};
        hvd_handle_t h1, h2;
        ASSERT_EQ(hvd_allreduce_async(ctx, "big", &tb, big.data(), HVD_MAX, 1, 1, &h1), HVD_OK);
        ASSERT_EQ(hvd_allreduce_async(ctx, "small", &ts, small.data(), HVD_SUM, 1, 1, &h2), HVD_OK);
        ASSERT_EQ(hvd_handle_wait(h1, 30), HVD_OK) << hvd_last_error();
        ASSERT_EQ(hvd_handle_wait(h2, 30), HVD_OK) << hvd_last_error();
        hvd_handle_release(h1);
        hvd_handle_release(h2);
        for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(big[i], static_cast<double>(i % 1000) + 1);
        for (size_t i = 0; i < small.size(); ++i) ASSERT_EQ(small[i], 3.0 * i);
      },
      [](hvd_params_t* p) {
        p->fusion_threshold_bytes = 64 * 1024;
        p->mask |= HVD_PARAM_FUSION_THRESHOLD;
      });
}

TEST(Engine, AllgatherWithDifferentFirstDimensions) {
  for (int n : {2, 3, 4}) {
    RunRanks(n, [n](hvd_context_t ctx, int rank) {
      // rank r contributes r+1 rows of 3 int64 (rank 0 of a 3-rank job: 1 row)
      int64_t rows = rank + 1;
      std::vector<int64_t> in(static_cast<size_t>(rows) * 3);
      for (int64_t i = 0; i < rows; ++i)
        for (int j = 0; j < 3; ++j) in[i * 3 + j] = rank * 1000 + i * 10 + j;
      int64_t shape[2] = {rows, 3};
      hvd_tensor_t t = {in.data(), HVD_INT64, 2, shape, HVD_DEVICE_CPU, nullptr};
      hvd_handle_t h;
      ASSERT_EQ(hvd_allgather_async(ctx, "ag", &t, &h), HVD_OK) << hvd_last_error();
      ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
      int64_t oshape[4];
      int32_t ndim = 0;
      ASSERT_EQ(hvd_handle_output_shape(h, oshape, 4, &ndim), HVD_OK);
      ASSERT_EQ(ndim, 2);
      EXPECT_EQ(oshape[0], n * (n + 1) / 2);
      EXPECT_EQ(oshape[1], 3);
      const void* data;
      size_t bytes;
      ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
      ASSERT_EQ(bytes, static_cast<size_t>(oshape[0] * 3 * 8));
      const int64_t* out = static_cast<const int64_t*>(data);
      size_t k = 0;
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i <= r; ++i)
          for (int j = 0; j < 3; ++j) ASSERT_EQ(out[k++], r * 1000 + i * 10 + j);
      hvd_handle_release(h);
    });
  }
}

TEST(Engine, BroadcastFromEveryRoot) {
  const int n = 4;
  RunRanks(n, [n](hvd_context_t ctx, int rank) {
    for (int root = 0; root < n; ++root) {
      std::vector<float> buf(1000, static_cast<float>(rank));
      std::vector<float> out(1000, -1);
      int64_t shape[2] = {10, 100};
      hvd_tensor_t t = {buf.data(), HVD_FLOAT32, 2, shape, HVD_DEVICE_CPU, nullptr};
      std::string name = "bcast." + std::to_string(root);
      bool in_place = root % 2 == 0;
      hvd_handle_t h;
      ASSERT_EQ(hvd_broadcast_async(ctx, name.c_str(), &t, in_place ? buf.data() : out.data(), root, &h),
                HVD_OK);
      ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
      hvd_handle_release(h);
      const std::vector<float>& res = in_place ? buf : out;
      for (float v : res) ASSERT_EQ(v, static_cast<float>(root));
    }
  });
}

TEST(Engine, AlltoallWithUnevenSplits) {
  const int n = 3;
  RunRanks(n, [n](hvd_context_t ctx, int rank) {
    // rank r sends (r + j) % 3 + 1 rows of 2 int32 to rank j; each row holds
    // (sender, receiver, row index, 7).
    std::vector<int64_t> splits(n);
    std::vector<int32_t> in;
    for (int j = 0; j < n; ++j) {
      splits[j] = (rank + j) % 3 + 1;
      for (int64_t k = 0; k < splits[j]; ++k) {
        in.push_back(rank * 100 + j);
        in.push_back(static_cast<int32_t>(k));
      }
    }
    int64_t shape[2] = {static_cast<int64_t>(in.size() / 2), 2};
    hvd_tensor_t t = {in.data(), HVD_INT32, 2, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h;
    ASSERT_EQ(hvd_alltoall_async(ctx, "a2a", &t, splits.data(), &h), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
    std::vector<int64_t> recv(n);
    ASSERT_EQ(hvd_handle_recv_splits(h, recv.data(), n), HVD_OK);
    const void* data;
    size_t bytes;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
    const int32_t* out = static_cast<const int32_t*>(data);
    size_t k = 0;
    for (int src = 0; src < n; ++src) {
      EXPECT_EQ(recv[src], (src + rank) % 3 + 1);
      for (int64_t row = 0; row < recv[src]; ++row) {
        ASSERT_EQ(out[k++], src * 100 + rank);
        ASSERT_EQ(out[k++], row);
      }
    }
    EXPECT_EQ(bytes, k * sizeof(int32_t));
    hvd_handle_release(h);
  });
}

TEST(Engine, ReducescatterSplitsRowsAsEvenlyAsPossible) {
  const int n = 3;
  RunRanks(n, [n](hvd_context_t ctx, int rank) {
    // 7 rows of 2: ranks get 3, 2, 2 rows.
    std::vector<float> in(14);
    for (int i = 0; i < 14; ++i) in[i] = static_cast<float>(i * (rank + 1));
    int64_t shape[2] = {7, 2};
    hvd_tensor_t t = {in.data(), HVD_FLOAT32, 2, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h;
    ASSERT_EQ(hvd_reducescatter_async(ctx, "rs", &t, HVD_SUM, 1, 1, &h), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
    int64_t oshape[2];
    int32_t ndim;
    ASSERT_EQ(hvd_handle_output_shape(h, oshape, 2, &ndim), HVD_OK);
    int64_t my_rows = rank == 0 ? 3 : 2;
    int64_t first = rank == 0 ? 0 : (rank == 1 ? 3 : 5);
    EXPECT_EQ(oshape[0], my_rows);
    const void* data;
    size_t bytes;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
    const float* out = static_cast<const float*>(data);
    for (int64_t i = 0; i < my_rows * 2; ++i) {
      ASSERT_EQ(out[i], static_cast<float>((first * 2 + i) * (1 + 2 + 3)));
    }
    hvd_handle_release(h);
  });
}

TEST(Engine, BarrierAndGroupedAllreduce) {
  RunRanks(4, [](hvd_context_t ctx, int rank) {
    for (int i = 0; i < 5; ++i) ASSERT_EQ(hvd_barrier(ctx), HVD_OK) << hvd_last_error();
    std::vector<int32_t> a(5, rank), b(7, 2 * rank);
    int64_t sa[1] = {5}, sb[1] = {7};
    hvd_tensor_t ts[2] = {{a.data(), HVD_INT32, 1, sa, HVD_DEVICE_CPU, nullptr},
                          {b.data(), HVD_INT32, 1, sb, HVD_DEVICE_CPU, nullptr}};
    const char* names[2] = {"grp.a", "grp.b"};
    void* outs[2] = {a.data(), b.data()};
    hvd_handle_t h;
    ASSERT_EQ(hvd_grouped_allreduce_async(ctx, 2, names, ts, outs, HVD_SUM, 1, 1, &h), HVD_OK)
        << hvd_last_error();
    ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
    hvd_handle_release(h);
    for (int32_t v : a) EXPECT_EQ(v, 6);
    for (int32_t v : b) EXPECT_EQ(v, 12);
  });
}

TEST(Engine, MismatchesErrorOnEveryRankAndTheContextStaysUsable) {
  RunRanks(3, [](hvd_context_t ctx, int rank) {
    std::vector<float> buf(8, 1.0f);
    int64_t shape[1] = {rank == 1 ? 4 : 8};
    hvd_tensor_t t = {buf.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h;
    ASSERT_EQ(hvd_allreduce_async(ctx, "bad.shape", &t, buf.data(), HVD_SUM, 1, 1, &h), HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 30), HVD_ERR_MISMATCH);
    EXPECT_NE(std::string(hvd_last_error()).find("shape"), std::string::npos) << hvd_last_error();
    hvd_handle_release(h);

    int64_t s8[1] = {8};
    hvd_tensor_t t2 = {buf.data(), rank == 2 ? HVD_INT32 : HVD_FLOAT32, 1, s8, HVD_DEVICE_CPU, nullptr};
    ASSERT_EQ(hvd_allreduce_async(ctx, "bad.dtype", &t2, buf.data(), HVD_SUM, 1, 1, &h), HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 30), HVD_ERR_MISMATCH);
    EXPECT_NE(std::string(hvd_last_error()).find("dtype"), std::string::npos) << hvd_last_error();
    hvd_handle_release(h);

    ASSERT_EQ(hvd_broadcast_async(ctx, "bad.root", &t2, buf.data(), rank == 0 ? 1 : 0, &h), HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 30), HVD_ERR_MISMATCH);
    hvd_handle_release(h);

    ASSERT_EQ(hvd_allreduce_async(ctx, "bad.op", &t, buf.data(), rank == 0 ? HVD_MAX : HVD_SUM, 1, 1, &h),
              HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 30), HVD_ERR_MISMATCH);
    hvd_handle_release(h);

    // Still usable.
    std::vector<float> ok(8, static_cast<float>(rank));
    hvd_tensor_t t3 = {ok.data(), HVD_FLOAT32, 1, s8, HVD_DEVICE_CPU, nullptr};
    ASSERT_EQ(hvd_allreduce(ctx, "good", &t3, ok.data(), HVD_SUM), HVD_OK) << hvd_last_error();
    for (float v : ok) EXPECT_EQ(v, 3.0f);
  });
}

TEST(Engine, DuplicateNameInFlightIsRefused) {
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    std::vector<float> a(4, 1), b(4, 1);
    int64_t s[1] = {4};
    hvd_tensor_t ta = {a.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
    hvd_tensor_t tb = {b.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h1 = nullptr, h2 = nullptr;
    if (rank == 0) {
      ASSERT_EQ(hvd_allreduce_async(ctx, "dup", &ta, a.data(), HVD_SUM, 1, 1, &h1), HVD_OK);
      EXPECT_EQ(hvd_allreduce_async(ctx, "dup", &tb, b.data(), HVD_SUM, 1, 1, &h2),
                HVD_ERR_DUPLICATE_NAME);
      ASSERT_EQ(hvd_handle_wait(h1, 30), HVD_OK);
    } else {
      ASSERT_EQ(hvd_allreduce(ctx, "dup", &ta, a.data(), HVD_SUM), HVD_OK);
    }
    if (h1) hvd_handle_release(h1);
    // The name is free again once complete.
    ASSERT_EQ(hvd_allreduce(ctx, "dup", &tb, b.data(), HVD_SUM), HVD_OK) << hvd_last_error();
    EXPECT_EQ(b[0], 2.0f);
  });
}

TEST(Engine, MissingRankIsNamedByWaitTimeoutAndStallShutdown) {
  std::atomic<int> reported{0};
  RunRanks(
      3,
      [&](hvd_context_t ctx, int rank) {
        std::vector<float> a(4, 1);
        int64_t s[1] = {4};
        hvd_tensor_t t = {a.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
        if (rank != 2) {
          hvd_handle_t h;
          ASSERT_EQ(hvd_allreduce_async(ctx, "only01", &t, a.data(), HVD_SUM, 1, 1, &h), HVD_OK);
          auto start = std::chrono::steady_clock::now();
          hvd_status_t st = hvd_handle_wait(h, 20);
          double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          EXPECT_EQ(st, HVD_ERR_TIMEOUT);
          EXPECT_NE(std::string(hvd_last_error()).find("ranks [2]"), std::string::npos)
              << hvd_last_error();
          EXPECT_LT(took, 10.0);
          hvd_handle_release(h);
          ++reported;
        } else {
          // Rank 2 enters the final barrier only once the others saw their
          // error, so the barrier itself never stalls.
          while (reported.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        ASSERT_EQ(hvd_barrier(ctx), HVD_OK) << hvd_last_error();
      },
      [](hvd_params_t* p) {
        p->stall_warning_s = 0.3;
        p->stall_shutdown_s = 1.0;
        p->log_level = HVD_LOG_ERROR;
        p->mask |= HVD_PARAM_STALL_WARNING | HVD_PARAM_STALL_SHUTDOWN | HVD_PARAM_LOG_LEVEL;
      });
}

// A wait that runs out names the ranks that have not submitted the tensor,
// long before any stall warning (60 s here): for a name seen for the first
// time (the negotiation table knows who announced it) and for one served by
// the response cache (a stall round after 1 s finds out). The handles stay
// usable and complete once rank 2 submits.
TEST(Engine, WaitTimeoutNamesTheMissingRankBeforeAnyStallWarning) {
  std::atomic<int> timed_out{0};
  RunRanks(
      3,
      [&](hvd_context_t ctx, int rank) {
        std::vector<float> a(4, 1), b(4, 1), c(4, 1);
        int64_t s[1] = {4};
        hvd_tensor_t ta = {a.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
        hvd_tensor_t tb = {b.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
        hvd_tensor_t tc = {c.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
        ASSERT_EQ(hvd_allreduce(ctx, "cached", &tb, b.data(), HVD_SUM), HVD_OK) << hvd_last_error();
        hvd_handle_t h[2] = {nullptr, nullptr};
        if (rank != 2) {
          ASSERT_EQ(hvd_allreduce_async(ctx, "cached", &tb, b.data(), HVD_SUM, 1, 1, &h[0]), HVD_OK);
          ASSERT_EQ(hvd_allreduce_async(ctx, "fresh", &ta, a.data(), HVD_SUM, 1, 1, &h[1]), HVD_OK);
          const char* names[2] = {"cached", "fresh"};
          for (int i = 0; i < 2; ++i) {
            EXPECT_EQ(hvd_handle_wait(h[i], 2.5), HVD_ERR_TIMEOUT) << names[i];
            EXPECT_EQ(std::string(hvd_last_error()),
                      std::string("allreduce '") + names[i] +
                          "' did not complete within 2.5 s: ranks [2] have not submitted '" +
                          names[i] + "'")
                << "rank " << rank;
          }
          ++timed_out;
        } else {
          while (timed_out.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          ASSERT_EQ(hvd_allreduce(ctx, "cached", &tb, b.data(), HVD_SUM), HVD_OK);
          ASSERT_EQ(hvd_allreduce(ctx, "fresh", &ta, a.data(), HVD_SUM), HVD_OK);
        }
        for (hvd_handle_t hd : h) {
          if (hd == nullptr) continue;
          EXPECT_EQ(hvd_handle_wait(hd, 30), HVD_OK) << hvd_last_error();
          hvd_handle_release(hd);
        }
        EXPECT_EQ(a[0], 3.0f);
        EXPECT_EQ(b[0], 9.0f);
        ASSERT_EQ(hvd_allreduce(ctx, "after", &tc, c.data(), HVD_SUM), HVD_OK) << hvd_last_error();
      },
      [](hvd_params_t* p) {
        p->stall_warning_s = 60;
        p->stall_shutdown_s = 300;
        p->log_level = HVD_LOG_ERROR;
        p->mask |= HVD_PARAM_STALL_WARNING | HVD_PARAM_STALL_SHUTDOWN | HVD_PARAM_LOG_LEVEL;
      });
}

TEST(Engine, CacheDisabledStillCorrect) {
  RunRanks(
      2,
      [](hvd_context_t ctx, int rank) {
        for (int step = 0; step < 5; ++step) {
          std::vector<int64_t> v(3, rank + step);
          int64_t s[1] = {3};
          hvd_tensor_t t = {v.data(), HVD_INT64, 1, s, HVD_DEVICE_CPU, nullptr};
          ASSERT_EQ(hvd_allreduce(ctx, "nc", &t, v.data(), HVD_SUM), HVD_OK);
          EXPECT_EQ(v[0], 2 * step + 1);
        }
      },
      [](hvd_params_t* p) {
        p->cache_capacity = 0;
        p->mask |= HVD_PARAM_CACHE_CAPACITY;
      });
}

TEST(Engine, JoinLetsRanksWithLessDataFinishEarly) {
  RunRanks(3, [](hvd_context_t ctx, int rank) {
    // Rank r has 2 + 2r batches: rank 0 runs out first, rank 2 last.
    const int batches = 2 + 2 * rank;
    std::vector<float> g(6);
    int64_t s[1] = {6};
    hvd_tensor_t t = {g.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
    for (int b = 0; b < batches; ++b) {
      std::fill(g.begin(), g.end(), static_cast<float>(rank + 1));
      ASSERT_EQ(hvd_allreduce(ctx, "grad", &t, g.data(), HVD_SUM), HVD_OK) << hvd_last_error();
      // Ranks that still have data at step b: those with 2 + 2r > b.
      float want = 0;
      for (int q = 0; q < 3; ++q) want += (2 + 2 * q > b) ? static_cast<float>(q + 1) : 0.0f;
      ASSERT_EQ(g[0], want) << "rank " << rank << " step " << b;
    }
    hvd_handle_t h;
    ASSERT_EQ(hvd_join_async(ctx, &h), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_handle_wait(h, 30), HVD_OK) << hvd_last_error();
    // The join's result: the rank that joined last, on every rank. Rank 2
    // joins after its 6th allreduce, which needed ranks 0 and 1's joins.
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK) << hvd_last_error();
    ASSERT_EQ(bytes, sizeof(int32_t));
    int32_t last = -1;
    std::memcpy(&last, data, sizeof(last));
    EXPECT_EQ(last, 2) << "rank " << rank;
    int64_t shape[2] = {0, 0};
    int32_t ndim = 0;
    ASSERT_EQ(hvd_handle_output_shape(h, shape, 2, &ndim), HVD_OK) << hvd_last_error();
    EXPECT_EQ(ndim, 1);
    EXPECT_EQ(shape[0], 1);
    hvd_handle_release(h);
    // After everyone joined, the context works as before.
    std::fill(g.begin(), g.end(), 1.0f);
    ASSERT_EQ(hvd_allreduce(ctx, "after", &t, g.data(), HVD_SUM), HVD_OK) << hvd_last_error();
    EXPECT_EQ(g[0], 3.0f);
  });
}

TEST(Engine, WorldOfOneNeedsNoNetwork) {
  hvd_params_t p = HVD_PARAMS_INIT;
  p.rank = 0;
  p.size = 1;
  p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE;
  hvd_context_t ctx;
  ASSERT_EQ(hvd_context_create(&p, &ctx), HVD_OK) << hvd_last_error();
  const char* name = nullptr;
  ASSERT_EQ(hvd_context_transport(ctx, &name), HVD_OK);
  EXPECT_STREQ(name, "local");
  std::vector<float> v = {1, 2, 3};
  int64_t s[1] = {3};
  hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, s, HVD_DEVICE_CPU, nullptr};
  ASSERT_EQ(hvd_allreduce(ctx, "x", &t, v.data(), HVD_AVERAGE), HVD_OK);
  EXPECT_EQ(v[2], 3.0f);
  EXPECT_EQ(hvd_context_destroy(ctx), HVD_OK);
}

TEST(Engine, OpsAfterShutdownFailCleanly) {
  hvd_params_t p = HVD_PARAMS_INIT;
  p.rank = 0;
  p.size = 1;
  p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE;
  hvd_context_t ctx;
  ASSERT_EQ(hvd_context_create(&p, &ctx), HVD_OK);
  EXPECT_EQ(hvd_context_destroy(ctx), HVD_OK);
}

}  // namespace

// Autotuning switches fusion threshold and cycle time while tensors flow:
// every rank must switch in the same cycle (otherwise the ranks would build
// different fusion buckets and their allreduces would not match). Tensors of
// 600 KiB run one by one under a 1 MiB threshold and fused above it.
TEST(Engine, AutotuningSwitchesSettingsOnEveryRankTogether) {
  const std::string csv = ::testing::TempDir() + "hvd_engine_autotune.csv";
  std::remove(csv.c_str());
  setenv("HVD_AUTOTUNE", "1", 1);
  setenv("HVD_AUTOTUNE_LOG", csv.c_str(), 1);
  setenv("HVD_AUTOTUNE_WARMUP_SAMPLES", "0", 1);
  setenv("HVD_AUTOTUNE_STEPS_PER_SAMPLE", "2", 1);
  setenv("HVD_AUTOTUNE_SAMPLES", "1", 1);
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    const int kTensors = 4;
    const size_t kCount = 600 * 1024 / sizeof(float);
    std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(kCount));
    int64_t shape[1] = {static_cast<int64_t>(kCount)};
    for (int step = 0; step < 150; ++step) {
      std::vector<hvd_handle_t> hs(kTensors);
      for (int k = 0; k < kTensors; ++k) {
        const int i = rank == 0 ? k : kTensors - 1 - k;  // different orders
        for (size_t j = 0; j < kCount; j += 97) bufs[i][j] = static_cast<float>(i + j % 13 + rank + step);
        hvd_tensor_t t = {bufs[i].data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
        std::string name = "tune." + std::to_string(i);
        ASSERT_EQ(hvd_allreduce_async(ctx, name.c_str(), &t, bufs[i].data(), HVD_SUM, 1, 1, &hs[i]),
                  HVD_OK);
      }
      for (int i = 0; i < kTensors; ++i) {
        ASSERT_EQ(hvd_handle_wait(hs[i], 60), HVD_OK) << "step " << step << ": " << hvd_last_error();
        hvd_handle_release(hs[i]);
        for (size_t j = 0; j < kCount; j += 97) {
          ASSERT_EQ(bufs[i][j], static_cast<float>(2 * (i + j % 13 + step) + 1)) << "step " << step;
        }
      }
    }
  });
  for (const char* v : {"HVD_AUTOTUNE", "HVD_AUTOTUNE_LOG", "HVD_AUTOTUNE_WARMUP_SAMPLES",
                        "HVD_AUTOTUNE_STEPS_PER_SAMPLE", "HVD_AUTOTUNE_SAMPLES"}) {
    unsetenv(v);
  }
  FILE* f = fopen(csv.c_str(), "r");
  ASSERT_NE(f, nullptr) << "rank 0 writes the autotune log";
  char line[256];
  int samples = 0;
  std::set<std::string> thresholds;
  bool best = false;
  while (fgets(line, sizeof(line), f) != nullptr) {
    std::string l(line);
    if (l.rfind("sample,", 0) == 0) {
      ++samples;
      thresholds.insert(l.substr(7, l.find(',', 7) - 7));
    }
    if (l.rfind("best,", 0) == 0) best = true;
  }
  fclose(f);
  std::remove(csv.c_str());
  EXPECT_GE(thresholds.size(), 5u) << "every fusion threshold of the grid was tried";
  EXPECT_GE(samples, 10);
  EXPECT_TRUE(best) << "the search finished within 150 steps";
}
