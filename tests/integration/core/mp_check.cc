// Multi-process check of every collective, run as one rank of a job started
// by a launcher (hvdrun, mpirun, or torchrun-style variables). Uses only the
// public C API of libhvd.so. Exits 0 when every check passed on this rank.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hvd.h"
#include "mp_checks.h"
#include "process_set_checks.h"
#include "reference.h"

using namespace hvd::test;  // NOLINT

namespace {

using hvd::test::g_checks;
using hvd::test::g_failures;
using hvd::test::g_rank;

void Matrix(int n) {
  struct Case {
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    size_t count;
    bool in_place;
    std::string name;
    std::vector<unsigned char> in, out;
    int64_t shape[1];
    hvd_handle_t h = nullptr;
  };
  std::vector<Case> cases;
  for (hvd_dtype_t d : kDtypes) {
    for (hvd_reduce_op_t op : kOps) {
      if (d == HVD_BOOL && op == HVD_AVERAGE) continue;
      for (size_t count : {size_t{1}, size_t{1000}, size_t{70000}}) {
        Case c;
        c.dtype = d;
        c.op = op;
        c.count = count;
        c.in_place = (count % 2) == 0;
        c.name = std::string("m/") + hvd::DtypeName(d) + "/" + hvd::ReduceOpName(op) + "/" +
                 std::to_string(count);
        cases.push_back(std::move(c));
      }
    }
  }
  std::mt19937 rng(77 + g_rank);
  std::shuffle(cases.begin(), cases.end(), rng);
  for (Case& c : cases) {
    size_t es = hvd::DtypeSize(c.dtype);
    c.in.assign(c.count * es, 0);
    c.out.assign(c.count * es, 0);
    for (size_t i = 0; i < c.count; ++i) Store(c.dtype, c.in.data(), i, Value(c.dtype, c.op, g_rank, i));
    c.shape[0] = static_cast<int64_t>(c.count);
    hvd_tensor_t t = {c.in.data(), c.dtype, 1, c.shape, HVD_DEVICE_CPU, nullptr};
    CHECK_OK(hvd_allreduce_async(nullptr, c.name.c_str(), &t, c.in_place ? c.in.data() : c.out.data(),
                                 c.op, 1.0, 1.0, &c.h));
  }
  for (Case& c : cases) {
    if (c.h == nullptr) continue;
    CHECK_OK(hvd_handle_wait(c.h, 120));
    hvd_handle_release(c.h);
    const void* res = c.in_place ? c.in.data() : c.out.data();
    double tol = Tolerance(c.dtype, c.op);
    for (size_t i = 0; i < c.count; ++i) {
      double want = Expected(c.dtype, c.op, n, i);
      double got = Load(c.dtype, res, i);
      if (std::fabs(got - want) > tol * std::max(1.0, std::fabs(want))) {
        CHECK_TRUE(false, "%s[%zu]: got %g want %g", c.name.c_str(), i, got, want);
        break;
      }
    }
  }
}

void OtherCollectives(int n) {
  // allgather: rank r has r+1 rows of 2 float64
  {
    int64_t rows = g_rank + 1;
    std::vector<double> in(static_cast<size_t>(rows) * 2);
    for (int64_t i = 0; i < rows * 2; ++i) in[i] = g_rank * 100.0 + i;
    int64_t shape[2] = {rows, 2};
    hvd_tensor_t t = {in.data(), HVD_FLOAT64, 2, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h;
    CHECK_OK(hvd_allgather_async(nullptr, "mp.allgather", &t, &h));
    CHECK_OK(hvd_handle_wait(h, 60));
    const void* data = nullptr;
    size_t bytes = 0;
    CHECK_OK(hvd_handle_output(h, &data, &bytes));
    CHECK_TRUE(bytes == static_cast<size_t>(n * (n + 1)) * sizeof(double), "allgather bytes %zu", bytes);
    const double* out = static_cast<const double*>(data);
    size_t k = 0;
    for (int r = 0; r < n && data; ++r)
      for (int64_t i = 0; i < (r + 1) * 2; ++i, ++k)
        CHECK_TRUE(out[k] == r * 100.0 + i, "allgather[%zu] = %g", k, out[k]);
    hvd_handle_release(h);
  }
  // broadcast from every root
  for (int root = 0; root < n; ++root) {
    std::vector<int32_t> buf(5000, g_rank);
    int64_t shape[1] = {5000};
    hvd_tensor_t t = {buf.data(), HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    std::string name = "mp.bcast." + std::to_string(root);
    CHECK_OK(hvd_broadcast(nullptr, name.c_str(), &t, buf.data(), root));
    CHECK_TRUE(std::all_of(buf.begin(), buf.end(), [&](int32_t v) { return v == root; }),
               "broadcast from %d", root);
  }
  // alltoall with uneven splits: rank r sends (r + j) % n + 1 rows to j
  {
    std::vector<int64_t> splits(n);
    std::vector<int64_t> in;
    for (int j = 0; j < n; ++j) {
      splits[j] = (g_rank + j) % n + 1;
      for (int64_t k = 0; k < splits[j]; ++k) in.push_back(g_rank * 1000 + j * 10 + k);
    }
    int64_t shape[1] = {static_cast<int64_t>(in.size())};
    hvd_tensor_t t = {in.data(), HVD_INT64, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h;
    CHECK_OK(hvd_alltoall_async(nullptr, "mp.alltoall", &t, splits.data(), &h));
    CHECK_OK(hvd_handle_wait(h, 60));
    const void* data = nullptr;
    size_t bytes = 0;
    CHECK_OK(hvd_handle_output(h, &data, &bytes));
    const int64_t* out = static_cast<const int64_t*>(data);
    size_t k = 0;
    for (int src = 0; src < n && data; ++src)
      for (int64_t row = 0; row < (src + g_rank) % n + 1; ++row, ++k)
        CHECK_TRUE(out[k] == src * 1000 + g_rank * 10 + row, "alltoall[%zu] = %lld", k,
                   static_cast<long long>(out[k]));
    CHECK_TRUE(bytes == k * sizeof(int64_t), "alltoall bytes %zu", bytes);
    hvd_handle_release(h);
  }
  // reducescatter of 2n+1 rows
  {
    int64_t rows = 2 * n + 1;
    std::vector<float> in(static_cast<size_t>(rows) * 3);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) + g_rank;
    int64_t shape[2] = {rows, 3};
    hvd_tensor_t t = {in.data(), HVD_FLOAT32, 2, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h;
    CHECK_OK(hvd_reducescatter_async(nullptr, "mp.reducescatter", &t, HVD_SUM, 1, 1, &h));
    CHECK_OK(hvd_handle_wait(h, 60));
    int64_t my_rows = 2 + (g_rank < 1 ? 1 : 0);
    int64_t first = g_rank * 2 + std::min(g_rank, 1);
    const void* data = nullptr;
    size_t bytes = 0;
    CHECK_OK(hvd_handle_output(h, &data, &bytes));
    CHECK_TRUE(bytes == static_cast<size_t>(my_rows * 3) * sizeof(float), "reducescatter bytes %zu", bytes);
    const float* out = static_cast<const float*>(data);
    double ranksum = n * (n - 1) / 2.0;
    for (int64_t i = 0; i < my_rows * 3 && data; ++i) {
      double want = n * static_cast<double>(first * 3 + i) + ranksum;
      CHECK_TRUE(out[i] == static_cast<float>(want), "reducescatter[%lld] = %g want %g",
                 static_cast<long long>(i), out[i], want);
    }
    hvd_handle_release(h);
  }
  // reducescatter over every block layout the transports distinguish: fewer
  // rows than ranks (empty blocks), uneven rows, and blocks large enough for
  // a ring with many segments; int32 and float64; SUM, MIN, MAX. Every
  // rank's input is a function of (rank, i), so each checks exactly.
  {
    auto value = [](int r, int64_t i) { return static_cast<int64_t>((i * 7 + r * 13) % 1009) - 300; };
    const int64_t cols = 3;
    const int64_t row_counts[] = {n - 1, 7 * n + 3, 100003};
    const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_MIN, HVD_MAX};
    int tag = 0;
    for (int64_t rows : row_counts) {
      for (hvd_dtype_t dt : {HVD_INT32, HVD_FLOAT64}) {
        for (hvd_reduce_op_t op : ops) {
          const size_t count = static_cast<size_t>(rows * cols);
          std::vector<int32_t> i32(count);
          std::vector<double> f64(count);
          for (size_t i = 0; i < count; ++i) {
            i32[i] = static_cast<int32_t>(value(g_rank, static_cast<int64_t>(i)));
            f64[i] = static_cast<double>(value(g_rank, static_cast<int64_t>(i)));
          }
          int64_t shape[2] = {rows, cols};
          hvd_tensor_t t = {dt == HVD_INT32 ? static_cast<void*>(i32.data()) : f64.data(), dt, 2,
                            shape, HVD_DEVICE_CPU, nullptr};
          std::string name = "mp.rs." + std::to_string(tag++);
          hvd_handle_t h;
          CHECK_OK(hvd_reducescatter_async(nullptr, name.c_str(), &t, op, 1, 1, &h));
          CHECK_OK(hvd_handle_wait(h, 120));
          const int64_t base = rows / n, extra = rows % n;
          const int64_t my_rows = base + (g_rank < extra ? 1 : 0);
          const int64_t first = g_rank * base + std::min<int64_t>(g_rank, extra);
          const void* data = nullptr;
          size_t bytes = 0;
          CHECK_OK(hvd_handle_output(h, &data, &bytes));
          const size_t es = dt == HVD_INT32 ? 4 : 8;
          CHECK_TRUE(bytes == static_cast<size_t>(my_rows * cols) * es, "%s bytes %zu", name.c_str(), bytes);
          int bad = 0;
          for (int64_t k = 0; k < my_rows * cols && data && bad < 3; ++k) {
            const int64_t i = first * cols + k;
            int64_t want = value(0, i);
            for (int r = 1; r < n; ++r) {
              const int64_t v = value(r, i);
              want = op == HVD_SUM ? want + v : op == HVD_MIN ? std::min(want, v) : std::max(want, v);
            }
            const double got = dt == HVD_INT32 ? static_cast<const int32_t*>(data)[k]
                                               : static_cast<const double*>(data)[k];
            if (got != static_cast<double>(want)) {
              ++bad;
              CHECK_TRUE(false, "%s (rows %lld, op %d) [%lld] = %g want %lld", name.c_str(),
                         static_cast<long long>(rows), static_cast<int>(op), static_cast<long long>(k),
                         got, static_cast<long long>(want));
            }
          }
          hvd_handle_release(h);
        }
      }
    }
  }
  CHECK_OK(hvd_barrier(nullptr));
  // 200 small tensors at once (fused)
  {
    std::vector<std::vector<float>> bufs(200, std::vector<float>(4096));
    std::vector<hvd_handle_t> hs(200);
    int64_t shape[1] = {4096};
    for (int i = 0; i < 200; ++i) {
      int k = (i * 37 + g_rank * 11) % 200;  // rank-specific order
      std::fill(bufs[k].begin(), bufs[k].end(), static_cast<float>(k + g_rank));
      hvd_tensor_t t = {bufs[k].data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
      std::string name = "mp.fused." + std::to_string(k);
      CHECK_OK(hvd_allreduce_async(nullptr, name.c_str(), &t, bufs[k].data(), HVD_SUM, 1, 1, &hs[k]));
    }
    for (int k = 0; k < 200; ++k) {
      CHECK_OK(hvd_handle_wait(hs[k], 60));
      hvd_handle_release(hs[k]);
      float want = static_cast<float>(n * k + n * (n - 1) / 2);
      CHECK_TRUE(bufs[k][0] == want && bufs[k][4095] == want, "fused %d: %g want %g", k, bufs[k][0], want);
    }
  }
  // mismatches: every rank gets the error, the job goes on
  {
    std::vector<float> buf(8, 1.0f);
    int64_t shape[1] = {g_rank == n - 1 ? 7 : 8};
    hvd_tensor_t t = {buf.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_status_t s = hvd_allreduce(nullptr, "mp.mismatch", &t, buf.data(), HVD_SUM);
    CHECK_TRUE(s == HVD_ERR_MISMATCH, "shape mismatch gave %s", hvd_status_string(s));
    CHECK_TRUE(std::strstr(hvd_last_error(), "shape") != nullptr, "message: %s", hvd_last_error());
    int64_t s8[1] = {8};
    hvd_tensor_t t2 = {buf.data(), g_rank == 0 ? HVD_FLOAT64 : HVD_FLOAT32, 1, s8, HVD_DEVICE_CPU, nullptr};
    std::vector<double> wide(8, 1.0);
    if (g_rank == 0) t2.data = wide.data();
    s = hvd_allreduce(nullptr, "mp.mismatch.dtype", &t2, t2.data, HVD_SUM);
    CHECK_TRUE(s == HVD_ERR_MISMATCH, "dtype mismatch gave %s", hvd_status_string(s));
    std::vector<float> ok(8, 1.0f);
    hvd_tensor_t t3 = {ok.data(), HVD_FLOAT32, 1, s8, HVD_DEVICE_CPU, nullptr};
    CHECK_OK(hvd_allreduce(nullptr, "mp.after", &t3, ok.data(), HVD_SUM));
    CHECK_TRUE(ok[0] == static_cast<float>(n), "after mismatch: %g", ok[0]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int expect_size = argc > 1 ? std::atoi(argv[1]) : -1;
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "hvd_init failed: %s\n", hvd_last_error());
    return 2;
  }
  int n = 0, local_rank = -1, local_size = -1;
  hvd_rank(&g_rank);
  hvd_size(&n);
  hvd_local_rank(&local_rank);
  hvd_local_size(&local_size);
  if (expect_size > 0) CHECK_TRUE(n == expect_size, "size %d, expected %d", n, expect_size);
  CHECK_TRUE(local_rank >= 0 && local_rank < local_size, "local rank %d of %d", local_rank, local_size);
  Matrix(n);
  OtherCollectives(n);
  // Steady state: the same step again hits the response cache.
  Matrix(n);
  // Process sets over the same connections (every collective and dtype).
  hvd::test::ProcessSetChecks(nullptr, g_rank, n, [](bool ok, const std::string& what) {
    CHECK_TRUE(ok, "%s", what.c_str());
  });
  CHECK_OK(hvd_shutdown());
  std::printf("mp_check rank %d of %d: %d checks, %d failed\n", g_rank, n, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
