// The Gloo transport plugin, loaded the way the core loads it (dlopen +
// hvd_transport_plugin_v1), with N ranks as threads in this process sharing
// an in-memory rendezvous store written here.
#include <dlfcn.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/kernels.h"
#include "hvd_transport.h"
#include "mem_kv.h"
#include "scoped_env.h"

#ifndef HVD_PLUGIN_DIR
#error "HVD_PLUGIN_DIR must name the folder holding libhvd_transport_gloo.so"
#endif

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

using hvd::test::MemKv;

// ---------------------------------------------------------------------------
// The plugin, loaded once.
const hvd_transport_v1_t* Plugin() {
  static const hvd_transport_v1_t* table = [] {
    const std::string path = std::string(HVD_PLUGIN_DIR) + "/libhvd_transport_gloo.so";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      ADD_FAILURE() << "dlopen " << path << ": " << dlerror();
      return static_cast<const hvd_transport_v1_t*>(nullptr);
    }
    auto fn = reinterpret_cast<hvd_transport_plugin_v1_fn>(
        dlsym(lib, HVD_TRANSPORT_PLUGIN_V1_SYMBOL));
    if (fn == nullptr) {
      ADD_FAILURE() << "no symbol " << HVD_TRANSPORT_PLUGIN_V1_SYMBOL << " in " << path;
      return static_cast<const hvd_transport_v1_t*>(nullptr);
    }
    return fn();
  }();
  return table;
}

// The plugin's ABI v2 table (the same library, its second entry symbol).
const hvd_transport_v2_t* PluginV2() {
  static const hvd_transport_v2_t* table = [] {
    const std::string path = std::string(HVD_PLUGIN_DIR) + "/libhvd_transport_gloo.so";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return static_cast<const hvd_transport_v2_t*>(nullptr);
    auto fn = reinterpret_cast<hvd_transport_plugin_v2_fn>(
        dlsym(lib, HVD_TRANSPORT_PLUGIN_V2_SYMBOL));
    return fn != nullptr ? fn() : static_cast<const hvd_transport_v2_t*>(nullptr);
  }();
  return table;
}

struct WorldOptions {
  double timeout_s = 60.0;
  double start_timeout_s = 30.0;
  int absent_rank = -1;  // this rank never calls init
  std::function<void(const std::string& key, std::string* value)> kv_rewrite;
};

hvd_transport_env_v1_t MakeEnv(MemKv* kv, int rank, int size, const WorldOptions& opt) {
  hvd_transport_env_v1_t env;
  std::memset(&env, 0, sizeof(env));
  env.struct_size = sizeof(env);
  env.rank = rank;
  env.size = size;
  env.local_rank = rank;
  env.local_size = size;
  env.cross_rank = 0;
  env.cross_size = 1;
  env.kv = kv;
  env.kv_set = &MemKv::Set;
  env.kv_get = &MemKv::Get;
  env.kv_free = &MemKv::Free;
  env.logger = nullptr;
  env.log = nullptr;
  env.reduce = &hvd::hvd_reduce_kernel;
  env.timeout_s = opt.timeout_s;
  env.start_timeout_s = opt.start_timeout_s;
  env.network_interface = "";
  env.local_address = "";
  env.mpi_comm = nullptr;
  return env;
}

// Runs body(rank, comm) on `size` threads after a successful init, then
// finalizes unless body returned true (it finalized itself). A failed init is
// reported and that rank skips its body.
void RunWorldEx(int size, const std::function<bool(int, void*)>& body,
                const WorldOptions& opt = WorldOptions()) {
  const hvd_transport_v1_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  MemKv kv;
  kv.rewrite = opt.kv_rewrite;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      hvd_transport_env_v1_t env = MakeEnv(&kv, r, size, opt);
      void* comm = nullptr;
      char err[512] = {0};
      const int st = t->init(&env, &comm, err, sizeof(err));
      if (st != HVD_OK) {
        ADD_FAILURE() << "rank " << r << " init failed (" << st << "): " << err;
        return;
      }
      if (!body(r, comm)) t->finalize(comm);
    });
  }
  for (auto& th : threads) th.join();
}

void RunWorld(int size, const std::function<void(int, void*)>& body,
              const WorldOptions& opt = WorldOptions()) {
  RunWorldEx(
      size,
      [&](int r, void* comm) {
        body(r, comm);
        return false;
      },
      opt);
}

// ---------------------------------------------------------------------------
// Typed element access through double (exact for every value used here).
double Load(hvd_dtype_t dt, const void* buf, size_t i) {
  switch (dt) {
    case HVD_UINT8: return static_cast<const uint8_t*>(buf)[i];
    case HVD_INT8: return static_cast<const int8_t*>(buf)[i];
    case HVD_UINT16: return static_cast<const uint16_t*>(buf)[i];
    case HVD_INT16: return static_cast<const int16_t*>(buf)[i];
    case HVD_INT32: return static_cast<const int32_t*>(buf)[i];
    case HVD_INT64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case HVD_FLOAT16: return hvd::HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case HVD_BFLOAT16: return hvd::BFloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case HVD_FLOAT32: return static_cast<const float*>(buf)[i];
    case HVD_FLOAT64: return static_cast<const double*>(buf)[i];
    case HVD_BOOL: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

void StoreV(hvd_dtype_t dt, void* buf, size_t i, double v) {
  switch (dt) {
    case HVD_UINT8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case HVD_INT8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case HVD_UINT16: static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v); break;
    case HVD_INT16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case HVD_INT32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case HVD_INT64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case HVD_FLOAT16:
      static_cast<uint16_t*>(buf)[i] = hvd::FloatToHalf(static_cast<float>(v));
      break;
    case HVD_BFLOAT16:
      static_cast<uint16_t*>(buf)[i] = hvd::FloatToBFloat16(static_cast<float>(v));
      break;
    case HVD_FLOAT32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case HVD_FLOAT64: static_cast<double*>(buf)[i] = v; break;
    case HVD_BOOL: static_cast<uint8_t*>(buf)[i] = v != 0 ? 1 : 0; break;
  }
}

const hvd_dtype_t kAllDtypes[] = {HVD_UINT8,   HVD_INT8,     HVD_UINT16,  HVD_INT16,
                                  HVD_INT32,   HVD_INT64,    HVD_FLOAT16, HVD_BFLOAT16,
                                  HVD_FLOAT32, HVD_FLOAT64,  HVD_BOOL};
const hvd_reduce_op_t kAllOps[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT};

bool IsUnsigned(hvd_dtype_t dt) { return dt == HVD_UINT8 || dt == HVD_UINT16; }

// Input value of element i on `rank`. The data are chosen so that every
// partial result of every reduction order is exactly representable in every
// dtype (small integers and quarters; products are +-powers of two with
// magnitude <= 8), so results are compared exactly: kFloatTolerance is 0 and
// the ring's reduction order cannot matter. Each pattern is periodic in i.
size_t Period(hvd_dtype_t dt, hvd_reduce_op_t op) {
  if (dt == HVD_BOOL) return 5;
  switch (op) {
    case HVD_SUM: return 17;
    case HVD_PRODUCT: return 4;
    default: return 23;
  }
}

double InputValue(hvd_dtype_t dt, hvd_reduce_op_t op, int rank, size_t i) {
  const bool fl = hvd::IsFloatingDtype(dt);
  if (dt == HVD_BOOL) {
    // Rank-dependent; every 5th element all ranks agree on 1 (so AND is 1 somewhere).
    if (i % 5 == 0) return 1;
    return ((i + static_cast<size_t>(rank)) % 3 == 0) ? 1 : 0;
  }
  switch (op) {
    case HVD_SUM: {
      const double m = static_cast<double>((i * 7 + static_cast<size_t>(rank) * 3) % 17);
      if (IsUnsigned(dt)) return m;          // 0..16, sum <= 128
      return fl ? (m - 8) * 0.25 : m - 8;    // -8..8 or -2..2 in quarters
    }
    case HVD_PRODUCT: {
      const size_t m = (i + static_cast<size_t>(rank)) % 4;  // one 2 (or 0.5) per 4 ranks
      if (IsUnsigned(dt)) return m == 2 ? 2 : 1;
      if (fl) {
        const double f[4] = {1, -1, 2, 0.5};
        return f[m];
      }
      const double v[4] = {1, -1, 2, 1};
      return v[m];
    }
    default: {
      const double m = static_cast<double>((i * 13 + static_cast<size_t>(rank) * 29) % 23);
      if (IsUnsigned(dt)) return m;
      return fl ? (m - 11) * 0.5 : m - 11;
    }
  }
}

double Combine(hvd_dtype_t dt, hvd_reduce_op_t op, double a, double b) {
  if (dt == HVD_BOOL) {
    const bool x = a != 0, y = b != 0;
    return (op == HVD_SUM || op == HVD_MAX) ? (x || y) : (x && y);
  }
  switch (op) {
    case HVD_SUM: return a + b;
    case HVD_MIN: return b < a ? b : a;
    case HVD_MAX: return b > a ? b : a;
    case HVD_PRODUCT: return a * b;
    default: return 0;
  }
}

// Writes `n` elements of the rank's input: one period, then doubling copies.
void FillInput(hvd_dtype_t dt, hvd_reduce_op_t op, int rank, void* buf, size_t n) {
  const size_t es = hvd::DtypeSize(dt);
  const size_t p = std::min(n, Period(dt, op));
  for (size_t i = 0; i < p; ++i) StoreV(dt, buf, i, InputValue(dt, op, rank, i));
  uint8_t* b = static_cast<uint8_t*>(buf);
  for (size_t have = p; have < n;) {
    const size_t k = std::min(have, n - have);
    std::memcpy(b + have * es, b, k * es);
    have += k;
  }
}

constexpr double kFloatTolerance = 0.0;  // see InputValue

// Checks buf[0, n) against the reduction over `size` ranks; reports the
// first mismatch only.
void CheckResult(hvd_dtype_t dt, hvd_reduce_op_t op, int size, int rank, const void* buf,
                 size_t n) {
  const size_t es = hvd::DtypeSize(dt);
  const size_t p = Period(dt, op);
  std::vector<double> want(p);
  std::vector<uint8_t> want_bytes(p * es);
  for (size_t i = 0; i < p; ++i) {
    double acc = InputValue(dt, op, 0, i);
    for (int r = 1; r < size; ++r) acc = Combine(dt, op, acc, InputValue(dt, op, r, i));
    want[i] = acc;
    StoreV(dt, want_bytes.data(), i, acc);
  }
  const uint8_t* b = static_cast<const uint8_t*>(buf);
  for (size_t base = 0; base < n; base += p) {
    const size_t m = std::min(p, n - base);
    if (std::memcmp(b + base * es, want_bytes.data(), m * es) == 0) continue;
    for (size_t j = 0; j < m; ++j) {
      const double got = Load(dt, buf, base + j);
      const bool ok = hvd::IsFloatingDtype(dt)
                          ? std::abs(got - want[j]) <= kFloatTolerance * std::abs(want[j])
                          : got == want[j];
      if (!ok) {
        ADD_FAILURE() << "allreduce " << hvd::DtypeName(dt) << " " << hvd::ReduceOpName(op)
                      << " n=" << n << " size=" << size << " rank=" << rank << ": element "
                      << base + j << " is " << got << ", want " << want[j];
        return;
      }
    }
  }
}

using hvd::test::ScopedEnv;

// Runs every GlooWorld test over both paths: shared memory (the default for
// ranks on one host) and TCP (HVD_GLOO_SHM=0).
class GlooWorld : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int Ranks() const { return std::get<0>(GetParam()); }
  bool Shm() const { return std::get<1>(GetParam()); }
  void SetUp() override { env_ = std::make_unique<ScopedEnv>("HVD_GLOO_SHM", Shm() ? "1" : "0"); }
  void TearDown() override { env_.reset(); }

 private:
  std::unique_ptr<ScopedEnv> env_;
};

// ---------------------------------------------------------------------------

TEST(GlooPlugin, TableIsComplete) {
  const hvd_transport_v1_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->abi_version, static_cast<uint32_t>(HVD_TRANSPORT_ABI_V1));
  EXPECT_STREQ(t->name, "gloo");
  EXPECT_NE(t->init, nullptr);
  EXPECT_NE(t->finalize, nullptr);
  EXPECT_NE(t->allreduce, nullptr);
  EXPECT_NE(t->allgatherv, nullptr);
  EXPECT_NE(t->broadcast, nullptr);
  EXPECT_NE(t->alltoallv, nullptr);
  EXPECT_NE(t->barrier, nullptr);
  EXPECT_NE(t->last_error, nullptr);
}

TEST(GlooPlugin, WorldOfOne) {
  RunWorld(1, [](int, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    float v[3] = {1, 2, 3};
    EXPECT_EQ(t->allreduce(comm, v, 3, HVD_FLOAT32, HVD_SUM), HVD_OK);
    EXPECT_EQ(v[2], 3.0f);
    EXPECT_EQ(t->barrier(comm), HVD_OK);
    EXPECT_EQ(t->broadcast(comm, v, sizeof(v), 0), HVD_OK);
    const size_t n = sizeof(v);
    float g[3] = {0, 0, 0};
    EXPECT_EQ(t->allgatherv(comm, v, g, &n), HVD_OK);
    EXPECT_EQ(g[1], 2.0f);
  });
}

TEST(GlooPlugin, InitRejectsBadArguments) {
  const hvd_transport_v1_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  MemKv kv;
  hvd_transport_env_v1_t env = MakeEnv(&kv, 3, 2, WorldOptions());
  void* comm = reinterpret_cast<void*>(0x1);
  char err[256] = {0};
  EXPECT_EQ(t->init(&env, &comm, err, sizeof(err)), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(err).find("rank"), std::string::npos) << err;
  EXPECT_EQ(t->init(nullptr, &comm, err, sizeof(err)), HVD_ERR_INVALID_ARGUMENT);
}

TEST_P(GlooWorld, AllreduceEveryDtypeOpAndSize) {
  const int size = Ranks();
  const size_t kSizes[] = {0, 1, 7, 4097, size_t{4} << 20};
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    std::vector<uint8_t> buf((size_t{4} << 20) * 8 + 64);
    for (hvd_dtype_t dt : kAllDtypes) {
      for (hvd_reduce_op_t op : kAllOps) {
        for (size_t n : kSizes) {
          FillInput(dt, op, rank, buf.data(), n);
          const int st = t->allreduce(comm, n ? buf.data() : nullptr, n, dt, op);
          if (st != HVD_OK) {
            ADD_FAILURE() << "rank " << rank << " allreduce " << hvd::DtypeName(dt) << " "
                          << hvd::ReduceOpName(op) << " n=" << n << ": " << st << " "
                          << t->last_error(comm);
            return;
          }
          CheckResult(dt, op, size, rank, buf.data(), n);
        }
      }
    }
  });
}

TEST_P(GlooWorld, AllreduceSameBufferVaryingCounts) {
  const int size = Ranks();
  // Crosses the small-message/ring boundary both ways, with a sentinel tail
  // that must never be touched, then rotates over more buffers than the
  // plugin caches.
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    const size_t cap = size_t{1} << 20;
    std::vector<float> buf(cap + 16);
    const size_t counts[] = {cap,  5,     4097,  300000, 1,     cap - 3, 0,     4096,
                             4095, 2335,  2337,  5455,   5457,  16383,   16385, cap / 2};
    for (size_t n : counts) {
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = -7.0f;
      FillInput(HVD_FLOAT32, HVD_SUM, rank, buf.data(), n);
      ASSERT_EQ(t->allreduce(comm, buf.data(), n, HVD_FLOAT32, HVD_SUM), HVD_OK)
          << t->last_error(comm);
      CheckResult(HVD_FLOAT32, HVD_SUM, size, rank, buf.data(), n);
      for (size_t i = n; i < buf.size(); ++i) {
        if (buf[i] != -7.0f) {
          ADD_FAILURE() << "rank " << rank << " n=" << n << ": wrote past the count at " << i;
          break;
        }
      }
    }
    std::vector<std::vector<int32_t>> many(7, std::vector<int32_t>(50000));
    for (int round = 0; round < 3; ++round) {
      for (auto& b : many) {
        FillInput(HVD_INT32, HVD_MAX, rank, b.data(), b.size());
        ASSERT_EQ(t->allreduce(comm, b.data(), b.size(), HVD_INT32, HVD_MAX), HVD_OK)
            << t->last_error(comm);
        CheckResult(HVD_INT32, HVD_MAX, size, rank, b.data(), b.size());
      }
    }
  });
}

TEST_P(GlooWorld, AllreduceRejectsAverageAndStaysUsable) {
  const int size = Ranks();
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    float v[4] = {1, 1, 1, 1};
    EXPECT_EQ(t->allreduce(comm, v, 4, HVD_FLOAT32, HVD_AVERAGE), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(t->last_error(comm)), "");
    EXPECT_EQ(t->allreduce(comm, v, 4, static_cast<hvd_dtype_t>(99), HVD_SUM),
              HVD_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(t->allreduce(comm, v, 4, HVD_FLOAT32, HVD_SUM), HVD_OK) << t->last_error(comm);
    EXPECT_EQ(v[3], static_cast<float>(size));
  });
}

uint8_t GatherByte(int rank, size_t j) { return static_cast<uint8_t>(rank * 31 + j * 7 + 1); }

// One allgatherv of counts[r] bytes per rank (offsets offs, total in all),
// out of place and then in place: every rank's bytes land where they belong
// and nothing is written past the end.
void CheckAllgatherv(void* comm, int rank, const std::vector<size_t>& counts,
                     const std::vector<size_t>& offs, size_t total) {
  const hvd_transport_v1_t* t = Plugin();
  const int size = static_cast<int>(counts.size());
  std::vector<uint8_t> send(counts[rank] + 1);
  for (size_t j = 0; j < counts[rank]; ++j) send[j] = GatherByte(rank, j);
  for (int in_place = 0; in_place < 2; ++in_place) {
    std::vector<uint8_t> recv(total + 1, 0xEE);
    const void* src = send.data();
    if (in_place) {
      std::memcpy(recv.data() + offs[rank], send.data(), counts[rank]);
      src = recv.data() + offs[rank];
    }
    ASSERT_EQ(t->allgatherv(comm, src, recv.data(), counts.data()), HVD_OK)
        << t->last_error(comm);
    for (int r = 0; r < size; ++r) {
      for (size_t j = 0; j < counts[r]; ++j) {
        if (recv[offs[r] + j] != GatherByte(r, j)) {
          ADD_FAILURE() << "rank " << rank << ": byte " << j << " from rank " << r;
          return;
        }
      }
    }
    EXPECT_EQ(recv[total], 0xEE) << "wrote past the end";
  }
}

TEST_P(GlooWorld, AllgathervUnevenIncludingZero) {
  const int size = Ranks();
  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) {
    // rank 0 and every third rank contribute nothing; rank 1 sends ~300 KB.
    counts[r] = (r % 3 == 0) ? 0 : (r == 1 ? 300007 : static_cast<size_t>(r) * 1000 + 13);
  }
  size_t total = 0;
  std::vector<size_t> offs(size);
  for (int r = 0; r < size; ++r) {
    offs[r] = total;
    total += counts[r];
  }
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    CheckAllgatherv(comm, rank, counts, offs, total);
    // Everyone contributes nothing.
    std::vector<size_t> zeros(size, 0);
    EXPECT_EQ(t->allgatherv(comm, nullptr, nullptr, zeros.data()), HVD_OK)
        << t->last_error(comm);
  });
}

TEST_P(GlooWorld, BroadcastFromEveryRoot) {
  const int size = Ranks();
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    const size_t n = 100003;
    std::vector<uint8_t> buf(n);
    for (int root = 0; root < size; ++root) {
      for (size_t j = 0; j < n; ++j) {
        buf[j] = rank == root ? GatherByte(root, j) : static_cast<uint8_t>(0x5A);
      }
      ASSERT_EQ(t->broadcast(comm, buf.data(), n, root), HVD_OK) << t->last_error(comm);
      for (size_t j = 0; j < n; ++j) {
        if (buf[j] != GatherByte(root, j)) {
          ADD_FAILURE() << "rank " << rank << " root " << root << ": byte " << j;
          break;
        }
      }
      EXPECT_EQ(t->broadcast(comm, nullptr, 0, root), HVD_OK) << t->last_error(comm);
    }
    EXPECT_EQ(t->broadcast(comm, buf.data(), 1, size), HVD_ERR_INVALID_ARGUMENT);
  });
}

size_t SplitBytes(int from, int to) {
  return static_cast<size_t>((from + 2 * to) % 3) * 1001 + (from == to ? 5 : 0);
}
uint8_t SplitByte(int from, int to, size_t k) {
  return static_cast<uint8_t>(from * 7 + to * 13 + k);
}

TEST_P(GlooWorld, AlltoallvUnevenSplits) {
  const int size = Ranks();
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    std::vector<size_t> sb(size), rb(size);
    size_t st = 0, rt = 0;
    for (int j = 0; j < size; ++j) {
      sb[j] = SplitBytes(rank, j);
      rb[j] = SplitBytes(j, rank);
      st += sb[j];
      rt += rb[j];
    }
    std::vector<uint8_t> send(st + 1), recv(rt + 1, 0xEE);
    size_t off = 0;
    for (int j = 0; j < size; ++j) {
      for (size_t k = 0; k < sb[j]; ++k) send[off + k] = SplitByte(rank, j, k);
      off += sb[j];
    }
    ASSERT_EQ(t->alltoallv(comm, send.data(), sb.data(), recv.data(), rb.data()), HVD_OK)
        << t->last_error(comm);
    off = 0;
    for (int j = 0; j < size; ++j) {
      for (size_t k = 0; k < rb[j]; ++k) {
        if (recv[off + k] != SplitByte(j, rank, k)) {
          ADD_FAILURE() << "rank " << rank << ": byte " << k << " from rank " << j;
          return;
        }
      }
      off += rb[j];
    }
    EXPECT_EQ(recv[rt], 0xEE);
  });
}

TEST_P(GlooWorld, BarrierWaitsForEveryone) {
  const int size = Ranks();
  constexpr int kRounds = 3;
  std::atomic<int> arrived[kRounds];
  for (auto& a : arrived) a = 0;
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    for (int round = 0; round < kRounds; ++round) {
      // The last rank arrives late; nobody may leave before it arrived.
      if (rank == size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      arrived[round].fetch_add(1);
      ASSERT_EQ(t->barrier(comm), HVD_OK) << t->last_error(comm);
      EXPECT_EQ(arrived[round].load(), size) << "rank " << rank << " left round " << round
                                             << " early";
    }
  });
}

TEST_P(GlooWorld, MissingRankFailsRendezvousNamingIt) {
  const int size = Ranks();
  const hvd_transport_v1_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  WorldOptions opt;
  opt.start_timeout_s = 1.5;
  const int absent = size - 1;
  MemKv kv;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    if (r == absent) continue;
    threads.emplace_back([&, r] {
      hvd_transport_env_v1_t env = MakeEnv(&kv, r, size, opt);
      void* comm = reinterpret_cast<void*>(0x1);
      char err[512] = {0};
      const auto t0 = Clock::now();
      const int st = t->init(&env, &comm, err, sizeof(err));
      const double took = SecondsSince(t0);
      EXPECT_EQ(st, HVD_ERR_RENDEZVOUS) << "rank " << r << ": " << err;
      EXPECT_EQ(comm, nullptr);
      const std::string want = "[" + std::to_string(absent) + "]";
      EXPECT_NE(std::string(err).find(want), std::string::npos)
          << "rank " << r << " message does not name rank " << absent << ": " << err;
      EXPECT_GE(took, opt.start_timeout_s * 0.9);
      EXPECT_LT(took, opt.start_timeout_s + 2.0) << "rank " << r;
      if (st == HVD_OK) t->finalize(comm);
    });
  }
  for (auto& th : threads) th.join();
}

TEST_P(GlooWorld, PeerFinalizeMidJobFailsOthersWithinTimeout) {
  const int size = Ranks();
  WorldOptions opt;
  opt.timeout_s = 3.0;
  const int leaver = size - 1;
  std::atomic<int> after_first{0};
  RunWorldEx(
      size,
      [&](int rank, void* comm) {
        const hvd_transport_v1_t* t = Plugin();
        std::vector<float> buf(4097, 1.0f);
        const int first = t->allreduce(comm, buf.data(), buf.size(), HVD_FLOAT32, HVD_SUM);
        EXPECT_EQ(first, HVD_OK) << t->last_error(comm);
        after_first.fetch_add(1);
        if (rank == leaver) {
          // Finalize must return promptly although peers are still running.
          const auto t0 = Clock::now();
          t->finalize(comm);
          EXPECT_LT(SecondsSince(t0), 2.0);
          return true;
        }
        while (after_first.load() < size) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        const auto t0 = Clock::now();
        const int st = t->allreduce(comm, buf.data(), buf.size(), HVD_FLOAT32, HVD_SUM);
        const double took = SecondsSince(t0);
        EXPECT_NE(st, HVD_OK) << "rank " << rank;
        EXPECT_TRUE(st == HVD_ERR_TRANSPORT || st == HVD_ERR_TIMEOUT) << st;
        EXPECT_LT(took, opt.timeout_s + 2.0) << "rank " << rank;
        EXPECT_NE(std::string(t->last_error(comm)), "");
        // The communicator stays failed, quickly.
        const auto t1 = Clock::now();
        EXPECT_NE(t->barrier(comm), HVD_OK);
        EXPECT_LT(SecondsSince(t1), 1.0);
        return false;
      },
      opt);
}

TEST(GlooPlugin, PeerResetMidTransferDoesNotKillTheProcessWithSigpipe) {
  // Rank 1 gives up (tiny timeout) in the middle of receiving a large
  // broadcast and drops its connections while rank 0 is still writing.
  // Writing to a closed socket raises SIGPIPE, whose default action would end
  // this whole test process; the plugin must keep it from being delivered.
  // The race is timing dependent, hence several trials of varying sizes
  // (without the plugin's guard, about one run in three dies here).
  const hvd_transport_v1_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  ScopedEnv tcp("HVD_GLOO_SHM", "0");  // sockets only: the shm path writes none
  for (int trial = 0; trial < 8; ++trial) {
    MemKv kv;
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    const size_t bytes = (size_t{16} << 20) << (trial % 5);  // 16 MiB .. 256 MiB
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        WorldOptions opt;
        opt.timeout_s = r == 0 ? 1.0 : 0.005 * (1 + trial % 3);
        hvd_transport_env_v1_t env = MakeEnv(&kv, r, 2, opt);
        void* comm = nullptr;
        char err[512] = {0};
        ASSERT_EQ(t->init(&env, &comm, err, sizeof(err)), HVD_OK) << err;
        std::vector<uint8_t> buf(bytes, static_cast<uint8_t>(r));
        ready.fetch_add(1);
        while (ready.load() < 2) std::this_thread::yield();
        for (int i = 0; i < 3; ++i) {
          if (t->broadcast(comm, buf.data(), buf.size(), 0) != HVD_OK) break;
        }
        t->finalize(comm);
      });
    }
    for (auto& th : threads) th.join();
  }
}

TEST_P(GlooWorld, QueryShmTellsWhichPathRuns) {
  const int size = Ranks();
  const bool shm = Shm();
  RunWorld(size, [&](int, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    int64_t v = -1;
    ASSERT_EQ(t->query(comm, "shm", &v), HVD_OK);
    EXPECT_EQ(v, shm ? 1 : 0);
    EXPECT_EQ(t->query(comm, "no such key", &v), HVD_ERR_UNSUPPORTED);
  });
}

// ---------------------------------------------------------------------------
// The shared-memory path specifically (HVD_GLOO_SHM unset: on by default).

// Records the segment names a world publishes (rank 0 sends its segment's
// name through the store under "shm/name"), so a test can check exactly its
// own segments: other jobs on this host may create theirs meanwhile.
struct SegmentNames {
  std::mutex mu;
  std::vector<std::string> names;
  void Record(const std::string& key, const std::string& value) {
    if (key != "shm/name" || value.empty() || value[0] != '/') return;
    std::lock_guard<std::mutex> lock(mu);
    names.push_back(value);
  }
  // Those still present in /dev/shm.
  std::vector<std::string> Left() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::string> left;
    for (const auto& n : names) {
      if (access(("/dev/shm" + n).c_str(), F_OK) == 0) left.push_back(n);
    }
    return left;
  }
};

// FNV-1a, to compare results across worlds without keeping them.
uint64_t Fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct ShmSizes {
  size_t slot = 0, small = 0;
};

ShmSizes QueryShmSizes(void* comm) {
  const hvd_transport_v1_t* t = Plugin();
  int64_t on = 0, slot = 0, small = 0;
  EXPECT_EQ(t->query(comm, "shm", &on), HVD_OK);
  EXPECT_EQ(on, 1) << "the shared-memory path is not active";
  EXPECT_EQ(t->query(comm, "shm_slot_bytes", &slot), HVD_OK);
  EXPECT_EQ(t->query(comm, "shm_small_bytes", &small), HVD_OK);
  EXPECT_GT(slot, 0);
  EXPECT_GT(small, 0);
  return ShmSizes{static_cast<size_t>(slot), static_cast<size_t>(small)};
}

// Element counts around every threshold and chunk boundary of the shm
// allreduce, for elements of es bytes.
std::vector<size_t> ShmCounts(const ShmSizes& z, size_t es) {
  const size_t small = z.small / es, slot = z.slot / es;
  return {0,         1,        3,           small - 1, small,          small + 1,
          slot - 1,  slot,     slot + 1,    2 * slot + 7, 3 * slot - 1};
}

class GlooShm : public ::testing::TestWithParam<int> {
 protected:
  ScopedEnv shm_on_{"HVD_GLOO_SHM", nullptr};
};

// Random inputs, so every reduction order gives different bits: the result
// must equal the rank-ordered reduction with the core's kernel, on every rank.
TEST_P(GlooShm, AllreduceFloatsBitIdenticalToRankOrder) {
  const int size = GetParam();
  struct Case {
    hvd_dtype_t dt;
    hvd_reduce_op_t op;
  };
  const Case cases[] = {{HVD_FLOAT32, HVD_SUM},     {HVD_FLOAT32, HVD_PRODUCT},
                        {HVD_FLOAT32, HVD_MIN},     {HVD_FLOAT32, HVD_MAX},
                        {HVD_FLOAT64, HVD_SUM},     {HVD_FLOAT16, HVD_SUM},
                        {HVD_BFLOAT16, HVD_SUM},    {HVD_FLOAT16, HVD_MAX},
                        {HVD_FLOAT64, HVD_PRODUCT}, {HVD_BFLOAT16, HVD_MIN}};
  auto input = [](hvd_dtype_t dt, hvd_reduce_op_t op, int rank, void* buf, size_t n) {
    std::mt19937_64 rng(static_cast<uint64_t>(rank) * 7919 + static_cast<uint64_t>(dt) * 31 + op);
    std::uniform_real_distribution<double> sum(-3.0, 3.0), prod(0.6, 1.7);
    for (size_t i = 0; i < n; ++i) {
      double v = op == HVD_PRODUCT ? prod(rng) : sum(rng);
      if (i % 97 == 5) v = (i & 1) ? 0.0 : -0.0;  // signed zeros for MIN/MAX
      StoreV(dt, buf, i, v);
    }
  };
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    const ShmSizes z = QueryShmSizes(comm);
    for (const Case& c : cases) {
      const size_t es = hvd::DtypeSize(c.dt);
      for (size_t n : ShmCounts(z, es)) {
        std::vector<uint8_t> buf(n * es + 1), want(n * es + 1), other(n * es + 1);
        input(c.dt, c.op, 0, want.data(), n);
        for (int k = 1; k < size; ++k) {
          input(c.dt, c.op, k, other.data(), n);
          hvd::hvd_reduce_kernel(want.data(), other.data(), n, c.dt, c.op);
        }
        input(c.dt, c.op, rank, buf.data(), n);
        ASSERT_EQ(t->allreduce(comm, n ? buf.data() : nullptr, n, c.dt, c.op), HVD_OK)
            << t->last_error(comm);
        if (std::memcmp(buf.data(), want.data(), n * es) != 0) {
          ADD_FAILURE() << "rank " << rank << " " << hvd::DtypeName(c.dt) << " "
                        << hvd::ReduceOpName(c.op) << " n=" << n
                        << ": not the rank-ordered result";
        }
      }
    }
  });
}

// Exact data (see InputValue) over every dtype and op at the shm boundaries:
// the expected values, and the same bytes from the shm and the TCP path.
TEST_P(GlooShm, AllreduceEveryDtypeOpAtBoundariesMatchesTcp) {
  const int size = GetParam();
  std::map<std::string, uint64_t> hashes[2];  // [shm] case -> hash (rank 0)
  std::mutex mu;
  ShmSizes z;
  RunWorld(size, [&](int rank, void* comm) {
    const ShmSizes mine = QueryShmSizes(comm);
    if (rank == 0) z = mine;
  });
  ASSERT_GT(z.slot, 0u);
  for (int shm = 1; shm >= 0; --shm) {
    ScopedEnv env("HVD_GLOO_SHM", shm ? "1" : "0");
    RunWorld(size, [&](int rank, void* comm) {
      const hvd_transport_v1_t* t = Plugin();
      int64_t on = -1;
      ASSERT_EQ(t->query(comm, "shm", &on), HVD_OK);
      ASSERT_EQ(on, shm);
      std::vector<uint8_t> buf(3 * z.slot + 64);
      for (hvd_dtype_t dt : kAllDtypes) {
        const size_t es = hvd::DtypeSize(dt);
        for (hvd_reduce_op_t op : kAllOps) {
          for (size_t n : ShmCounts(z, es)) {
            FillInput(dt, op, rank, buf.data(), n);
            ASSERT_EQ(t->allreduce(comm, n ? buf.data() : nullptr, n, dt, op), HVD_OK)
                << t->last_error(comm);
            CheckResult(dt, op, size, rank, buf.data(), n);
            const std::string key = std::string(hvd::DtypeName(dt)) + "/" +
                                    hvd::ReduceOpName(op) + "/" + std::to_string(n);
            const uint64_t h = Fnv(buf.data(), n * es);
            std::lock_guard<std::mutex> lock(mu);
            auto it = hashes[shm].find(key);
            if (it == hashes[shm].end()) {
              hashes[shm][key] = h;
            } else if (it->second != h) {
              ADD_FAILURE() << key << ": rank " << rank << " differs from another rank";
            }
          }
        }
      }
    });
  }
  ASSERT_EQ(hashes[0].size(), hashes[1].size());
  for (const auto& kv : hashes[1]) {
    EXPECT_EQ(kv.second, hashes[0][kv.first]) << kv.first << ": shm and TCP results differ";
  }
}

// Spans of every kind (empty, one element, odd lengths, longer than a slot)
// laid over the shm boundaries: allreduce_spans gives, bit for bit, what an
// allreduce of the same data packed gives, and writes nothing outside the
// spans.
TEST_P(GlooShm, AllreduceSpansMatchesPackedAllreduce) {
  const int size = GetParam();
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    const hvd_transport_v2_t* t2 = PluginV2();
    ASSERT_NE(t2, nullptr);
    ASSERT_EQ(t2->v1, t);
    ASSERT_NE(t2->allreduce_spans, nullptr);
    int64_t on = -1;
    ASSERT_EQ(t->query(comm, "allreduce_spans", &on), HVD_OK);
    ASSERT_EQ(on, 1);
    const ShmSizes z = QueryShmSizes(comm);
    const struct {
      hvd_dtype_t dt;
      hvd_reduce_op_t op;
    } cases[] = {{HVD_FLOAT32, HVD_SUM}, {HVD_FLOAT32, HVD_MIN},    {HVD_FLOAT64, HVD_PRODUCT},
                 {HVD_FLOAT16, HVD_SUM}, {HVD_BFLOAT16, HVD_MAX},   {HVD_INT32, HVD_SUM},
                 {HVD_UINT8, HVD_MAX},   {HVD_INT64, HVD_PRODUCT}};
    for (const auto& c : cases) {
      const size_t es = hvd::DtypeSize(c.dt);
      const size_t small = z.small / es, slot = z.slot / es;
      const std::vector<std::vector<size_t>> layouts = {
          {1},
          {0, 3, 0, 1, 7},
          {small - 1, 1, 1},
          {small, 1},
          {slot - 1, 2, slot + 5, 0, 1},
          {1, 1, 2 * slot + 3, 17, slot / 3},
      };
      for (const auto& layout : layouts) {
        size_t total = 0;
        for (size_t n : layout) total += n;
        std::vector<uint8_t> packed(total * es);
        std::mt19937_64 rng(static_cast<uint64_t>(rank) * 1000003 + total * 31 + c.dt * 7 + c.op);
        std::uniform_real_distribution<double> val(c.op == HVD_PRODUCT ? 0.7 : -50.0,
                                                   c.op == HVD_PRODUCT ? 1.4 : 50.0);
        for (size_t i = 0; i < total; ++i) {
          double v = val(rng);
          if (!hvd::IsFloatingDtype(c.dt)) {
            v = c.op == HVD_PRODUCT ? 1 + (i + rank) % 2 : std::fabs(std::round(v));
          }
          StoreV(c.dt, packed.data(), i, v);
        }
        // Each span in its own allocation, with guard bytes after it.
        std::vector<std::vector<uint8_t>> bufs;
        std::vector<hvd_transport_span_t> spans;
        size_t off = 0;
        for (size_t n : layout) {
          bufs.emplace_back(n * es + 16, 0xA5);
          std::memcpy(bufs.back().data(), packed.data() + off * es, n * es);
          off += n;
        }
        for (size_t i = 0; i < layout.size(); ++i) spans.push_back({bufs[i].data(), layout[i]});
        ASSERT_EQ(t2->allreduce_spans(comm, spans.data(), spans.size(), c.dt, c.op), HVD_OK)
            << t->last_error(comm);
        ASSERT_EQ(t->allreduce(comm, total ? packed.data() : nullptr, total, c.dt, c.op), HVD_OK)
            << t->last_error(comm);
        off = 0;
        for (size_t i = 0; i < layout.size(); ++i) {
          const size_t nb = layout[i] * es;
          EXPECT_EQ(std::memcmp(bufs[i].data(), packed.data() + off * es, nb), 0)
              << "rank " << rank << " " << hvd::DtypeName(c.dt) << " " << hvd::ReduceOpName(c.op)
              << " span " << i << " of a layout of " << layout.size() << " (" << total << " elements)";
          for (size_t g = nb; g < nb + 16; ++g) {
            if (bufs[i][g] != 0xA5) {
              ADD_FAILURE() << "span " << i << ": byte " << g - nb << " past its end was written";
              break;
            }
          }
          off += layout[i];
        }
      }
    }
    // Bad spans are refused with a reason, and the communicator stays usable.
    const hvd_transport_span_t null_buf[] = {{nullptr, 4}};
    EXPECT_EQ(t2->allreduce_spans(comm, null_buf, 1, HVD_FLOAT32, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(t->last_error(comm)).find("NULL buffer"), std::string::npos);
    EXPECT_EQ(t2->allreduce_spans(comm, nullptr, 2, HVD_FLOAT32, HVD_SUM), HVD_ERR_INVALID_ARGUMENT);
    float one = 1.0f;
    const hvd_transport_span_t ok[] = {{&one, 1}};
    EXPECT_EQ(t2->allreduce_spans(comm, ok, 1, HVD_FLOAT32, HVD_SUM), HVD_OK);
    EXPECT_EQ(one, static_cast<float>(size));
  });
}

// Without shared memory the plugin says so, serves a single span, and refuses
// several (the core packs them instead).
TEST_P(GlooShm, AllreduceSpansWithoutShmServesOneSpanOnly) {
  const int size = GetParam();
  ScopedEnv env("HVD_GLOO_SHM", "0");
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    const hvd_transport_v2_t* t2 = PluginV2();
    ASSERT_NE(t2, nullptr);
    int64_t on = -1;
    ASSERT_EQ(t->query(comm, "allreduce_spans", &on), HVD_OK);
    EXPECT_EQ(on, 0);
    int32_t a[3] = {rank, 1, 2}, b[2] = {3, 4};
    const hvd_transport_span_t one[] = {{nullptr, 0}, {a, 3}, {b, 0}};
    ASSERT_EQ(t2->allreduce_spans(comm, one, 3, HVD_INT32, HVD_SUM), HVD_OK) << t->last_error(comm);
    EXPECT_EQ(a[0], size * (size - 1) / 2);
    EXPECT_EQ(a[2], 2 * size);
    const hvd_transport_span_t two[] = {{a, 3}, {b, 2}};
    EXPECT_EQ(t2->allreduce_spans(comm, two, 2, HVD_INT32, HVD_SUM), HVD_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(t->last_error(comm)).find("shared-memory"), std::string::npos);
    EXPECT_EQ(b[0], 3);
  });
}

TEST_P(GlooShm, BroadcastAndAllgathervAcrossRounds) {
  const int size = GetParam();
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_v1_t* t = Plugin();
    const ShmSizes z = QueryShmSizes(comm);
    // Broadcast stages a whole slot set (size slots) per round.
    const size_t set = z.slot * static_cast<size_t>(size);
    for (size_t n : {size_t{1}, set - 1, set, set + 1, 2 * set + 13}) {
      std::vector<uint8_t> buf(n + 1);
      for (int root = 0; root < size; ++root) {
        for (size_t j = 0; j < n; ++j) buf[j] = rank == root ? GatherByte(root, j) : 0x5A;
        buf[n] = 0xEE;
        ASSERT_EQ(t->broadcast(comm, buf.data(), n, root), HVD_OK) << t->last_error(comm);
        for (size_t j = 0; j < n; ++j) {
          if (buf[j] != GatherByte(root, j)) {
            ADD_FAILURE() << "rank " << rank << " root " << root << " n=" << n << ": byte " << j;
            break;
          }
        }
        EXPECT_EQ(buf[n], 0xEE);
      }
    }
    // Allgatherv: a slot per rank per round; zero, tiny and multi-round parts.
    std::vector<size_t> counts(size), offs(size);
    size_t total = 0;
    for (int r = 0; r < size; ++r) {
      counts[r] = r % 3 == 0 ? 0 : (r == 1 ? 2 * z.slot + 5 : z.slot * (r % 2) + r);
      offs[r] = total;
      total += counts[r];
    }
    CheckAllgatherv(comm, rank, counts, offs, total);
  });
}

TEST_P(GlooShm, MissingRankTimesOutNamingIt) {
  const int size = GetParam();
  WorldOptions opt;
  opt.timeout_s = 1.0;
  const int absent = size - 1;
  std::atomic<int> done{0};
  RunWorld(
      size,
      [&](int rank, void* comm) {
        const hvd_transport_v1_t* t = Plugin();
        QueryShmSizes(comm);
        if (rank == absent) {  // never calls; finalizes after the others gave up
          while (done.load() < size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return;
        }
        std::vector<float> buf(1000, 1.0f);
        const auto t0 = Clock::now();
        const int st = t->allreduce(comm, buf.data(), buf.size(), HVD_FLOAT32, HVD_SUM);
        const double took = SecondsSince(t0);
        const std::string err = t->last_error(comm);
        done.fetch_add(1);
        EXPECT_EQ(st, HVD_ERR_TIMEOUT) << "rank " << rank << ": " << err;
        EXPECT_NE(err.find("[" + std::to_string(absent) + "]"), std::string::npos)
            << "rank " << rank << " does not name rank " << absent << ": " << err;
        EXPECT_GE(took, opt.timeout_s * 0.9) << "rank " << rank << ": " << err;
        EXPECT_LT(took, opt.timeout_s + 1.5) << "rank " << rank;
        // Broken from now on, at once.
        const auto t1 = Clock::now();
        EXPECT_NE(t->barrier(comm), HVD_OK);
        EXPECT_LT(SecondsSince(t1), 0.5);
      },
      opt);
}

TEST_P(GlooShm, NothingLeftInDevShm) {
  const int size = GetParam();
  SegmentNames seg;
  WorldOptions opt;
  opt.kv_rewrite = [&](const std::string& key, std::string* value) { seg.Record(key, *value); };
  std::atomic<int> checked{0};
  RunWorld(
      size,
      [&](int rank, void* comm) {
        const hvd_transport_v1_t* t = Plugin();
        QueryShmSizes(comm);
        ASSERT_EQ(t->barrier(comm), HVD_OK) << t->last_error(comm);
        // Every rank has mapped the segment: its name is gone already.
        if (rank == 0) {
          EXPECT_EQ(seg.names.size(), 1u);
          EXPECT_TRUE(seg.Left().empty());
        }
        checked.fetch_add(1);
      },
      opt);
  EXPECT_EQ(checked.load(), size);
  EXPECT_TRUE(seg.Left().empty());
}

// A peer that reports another host, or cannot open the segment: every rank
// agrees on TCP, results stay right, and no segment is left behind.
TEST_P(GlooShm, AllRanksFallBackTogether) {
  const int size = GetParam();
  const std::string other = std::to_string(size - 1);
  for (int variant = 0; variant < 2; ++variant) {
    SegmentNames seg;
    WorldOptions opt;
    opt.kv_rewrite = [&](const std::string& key, std::string* value) {
      seg.Record(key, *value);
      if (variant == 0 && key == "shm/host/" + other) *value = "boot=elsewhere";
      if (variant == 1 && key == "shm/name") *value = "/hvd-gloo-no-such-segment";
    };
    RunWorld(
        size,
        [&](int rank, void* comm) {
          const hvd_transport_v1_t* t = Plugin();
          int64_t on = -1;
          ASSERT_EQ(t->query(comm, "shm", &on), HVD_OK);
          EXPECT_EQ(on, 0) << "variant " << variant << " rank " << rank;
          std::vector<int32_t> v(70001);
          FillInput(HVD_INT32, HVD_SUM, rank, v.data(), v.size());
          ASSERT_EQ(t->allreduce(comm, v.data(), v.size(), HVD_INT32, HVD_SUM), HVD_OK)
              << t->last_error(comm);
          CheckResult(HVD_INT32, HVD_SUM, size, rank, v.data(), v.size());
        },
        opt);
    EXPECT_EQ(seg.names.size(), variant == 1 ? 1u : 0u);
    EXPECT_TRUE(seg.Left().empty()) << "variant " << variant;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooShm, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

INSTANTIATE_TEST_SUITE_P(Ranks, GlooWorld,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) ? "shm" : "tcp");
                         });

}  // namespace
