// A device-only transport beside a host transport (HVD_TRANSPORT=<device
// plugin>, HVD_CPU_TRANSPORT=gloo), on hosts without a GPU: the NCCL
// plugin's place is taken by fake_device_plugin.cc (CUDA memory only,
// native collectives among thread-ranks), the CUDA runtime by fake_cudart.c
// (streams are queues that run when synchronized) and the core's kernels by
// fake_cuda_kernels.cc (host functions queued on those streams). What runs
// is the core: the routing (CUDA allreduce and broadcast to the device
// transport, everything else over the host one), the device fusion buffer,
// the scaling on the device, the ordering on the callers' streams.
//
// Every device result is checked bit for bit against the same operation on
// host tensors in the same context (the host path over gloo), with values
// whose sums and products are exact in every dtype, so that the reduction
// order cannot matter.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/kernels.h"
#include "hvd.h"
#include "scoped_env.h"
#include "thread_ranks.h"

namespace {

using hvd::test::RunRanks;
using hvd::test::ScopedEnv;

struct DevStats {
  long allreduces, broadcasts, others, host_refused, last_count;
  int last_op, last_dtype;
  long elements;
};

template <typename F>
F Sym(void* dl, const char* name) {
  return dl != nullptr ? reinterpret_cast<F>(dlsym(dl, name)) : nullptr;
}

// The fakes' entry points, from the libraries the core loads (dlopen
// returns the copy already loaded).
struct Fakes {
  void* cudart = dlopen(FAKE_CUDART_LIB, RTLD_NOW | RTLD_LOCAL);
  void* kernels = dlopen(FAKE_KERNELS_LIB, RTLD_NOW | RTLD_LOCAL);
  void* dev = dlopen(FAKE_DEV_LIB, RTLD_NOW | RTLD_LOCAL);
  int (*malloc_)(void**, size_t) = Sym<int (*)(void**, size_t)>(cudart, "cudaMalloc");
  int (*free_)(void*) = Sym<int (*)(void*)>(cudart, "cudaFree");
  int (*set_device)(int) = Sym<int (*)(int)>(cudart, "cudaSetDevice");
  void (*fill_async)(void*, const void*, size_t, void*) =
      Sym<void (*)(void*, const void*, size_t, void*)>(cudart, "fake_cuda_fill_async");
  long (*launches)() = Sym<long (*)()>(kernels, "fake_cuda_kernels_launches");
  void (*kernels_reset)() = Sym<void (*)()>(kernels, "fake_cuda_kernels_reset");
  void (*dev_stats)(DevStats*) = Sym<void (*)(DevStats*)>(dev, "fake_dev_stats");
  void (*dev_reset)() = Sym<void (*)()>(dev, "fake_dev_reset");

  DevStats Stats() const {
    DevStats s{};
    dev_stats(&s);
    return s;
  }
  void* Alloc(int device, size_t n) const {
    EXPECT_EQ(set_device(device), 0);
    void* p = nullptr;
    EXPECT_EQ(malloc_(&p, n > 0 ? n : 1), 0);
    std::memset(p, 0xAB, n);
    return p;
  }
};

Fakes& F() {
  static Fakes* f = new Fakes();
  return *f;
}

std::string TransportPath() {
  const char* old = std::getenv("HVD_TRANSPORT_PATH");
  return std::string(FAKE_DEV_DIR) + (old != nullptr && old[0] ? std::string(":") + old : "");
}

class DeviceTransport : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(F().cudart, nullptr) << FAKE_CUDART_LIB;
    ASSERT_NE(F().kernels, nullptr) << FAKE_KERNELS_LIB;
    ASSERT_NE(F().dev, nullptr) << FAKE_DEV_LIB;
    ASSERT_NE(F().dev_stats, nullptr);
    ASSERT_NE(F().launches, nullptr);
    F().dev_reset();
    F().kernels_reset();
  }
  ScopedEnv path_{"HVD_TRANSPORT_PATH", TransportPath().c_str()};
  ScopedEnv runtime_{"HVD_CUDA_RUNTIME", FAKE_CUDART_LIB};
  ScopedEnv kernels_{"HVD_CUDA_KERNELS", FAKE_KERNELS_LIB};
  ScopedEnv devices_{"HVD_FAKE_CUDA_DEVICES", "2"};
  ScopedEnv cpu_{"HVD_CPU_TRANSPORT", "gloo"};
};

void RunDev(int n, const std::function<void(hvd_context_t, int)>& fn) {
  RunRanks(n, fn, nullptr, "fakedev");
}

void* StreamOf(int rank, int k = 0) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(0x2000 + 16 * rank + k));
}

// Element i of rank r's input of case `seed`, as a double that every dtype
// holds exactly: small integers (bool: 0 or 1), or multiples of 1/8 for
// floating types, so sums and products of 3 ranks stay exact.
double Value(hvd_dtype_t dt, int r, int seed, size_t i) {
  const long k = static_cast<long>((r * 7 + seed * 3 + static_cast<long>(i) * 5) % 9) - 2;  // -2..6
  if (dt == HVD_BOOL) return static_cast<double>((r + seed + static_cast<long>(i)) % 3 != 0);
  if (dt == HVD_UINT8 || dt == HVD_UINT16) return static_cast<double>(k + 2);
  if (hvd::IsFloatingDtype(dt)) return static_cast<double>(k) / 8.0 + 0.25;
  return static_cast<double>(k);
}

std::vector<unsigned char> Bytes(hvd_dtype_t dt, int r, int seed, size_t count) {
  const size_t es = hvd::DtypeSize(dt);
  std::vector<unsigned char> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    const double v = Value(dt, r, seed, i);
    unsigned char* p = out.data() + i * es;
    switch (dt) {
      case HVD_UINT8: *p = static_cast<uint8_t>(v); break;
      case HVD_INT8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
      case HVD_BOOL: *p = static_cast<uint8_t>(v); break;
      case HVD_UINT16: { uint16_t x = static_cast<uint16_t>(v); std::memcpy(p, &x, 2); break; }
      case HVD_INT16: { int16_t x = static_cast<int16_t>(v); std::memcpy(p, &x, 2); break; }
      case HVD_INT32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
      case HVD_INT64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
      case HVD_FLOAT16: { uint16_t x = hvd::FloatToHalf(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      case HVD_BFLOAT16: { uint16_t x = hvd::FloatToBFloat16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
      case HVD_FLOAT32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
      case HVD_FLOAT64: std::memcpy(p, &v, 8); break;
    }
  }
  return out;
}

struct Tensor {
  std::vector<int64_t> shape;
  hvd_tensor_t t = HVD_TENSOR_INIT;
  void* dev = nullptr;                // device memory (nullptr: a host tensor)
  std::vector<unsigned char> host;    // a host tensor's memory
  Tensor(hvd_dtype_t dt, size_t count, const std::vector<unsigned char>& data, int device, void* stream)
      : shape{static_cast<int64_t>(count)} {
    t.dtype = dt;
    t.ndim = 1;
    t.shape = shape.data();
    if (device < 0) {
      host = data;
      t.data = host.data();
      t.device = HVD_DEVICE_CPU;
    } else {
      dev = F().Alloc(device, data.size());
      // "A kernel" writes the data on the tensor's stream: it lands only when
      // that stream runs, so the core must order its work after it.
      F().fill_async(dev, data.data(), data.size(), stream);
      t.data = dev;
      t.device = device;
      t.stream = stream;
    }
  }
  ~Tensor() {
    if (dev != nullptr) F().free_(dev);
  }
  const unsigned char* bytes() const {
    return dev != nullptr ? static_cast<const unsigned char*>(dev) : host.data();
  }
  size_t nbytes() const { return static_cast<size_t>(shape[0]) * hvd::DtypeSize(t.dtype); }
};

void WaitOk(hvd_handle_t h, const std::string& what) {
  ASSERT_NE(h, nullptr) << what;
  EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << what << ": " << hvd_last_error();
  hvd_handle_release(h);
}

// A grouped (fused) allreduce of `sizes` tensors, in place, on host tensors
// and then on device tensors (tensor k on stream k); returns the results.
std::vector<std::vector<unsigned char>> GroupedAllreduce(hvd_context_t ctx, int rank, bool device,
                                                         hvd_dtype_t dt, hvd_reduce_op_t op,
                                                         double pre, double post,
                                                         const std::vector<size_t>& sizes,
                                                         const std::string& tag) {
  std::vector<std::unique_ptr<Tensor>> ts;
  std::vector<hvd_tensor_t> inputs;
  std::vector<void*> outputs;
  std::vector<std::string> names;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ts.push_back(std::make_unique<Tensor>(dt, sizes[k], Bytes(dt, rank, static_cast<int>(k), sizes[k]),
                                          device ? rank % 2 : -1, StreamOf(rank, static_cast<int>(k))));
    inputs.push_back(ts.back()->t);
    outputs.push_back(const_cast<void*>(ts.back()->t.data));
    names.push_back(tag + (device ? ".dev." : ".host.") + std::to_string(k));
  }
  std::vector<const char*> cnames;
  for (const std::string& s : names) cnames.push_back(s.c_str());
  hvd_handle_t h = nullptr;
  hvd_status_t s;
  if (sizes.size() == 1) {
    s = hvd_allreduce_async(ctx, cnames[0], &inputs[0], outputs[0], op, pre, post, &h);
  } else {
    s = hvd_grouped_allreduce_async(ctx, static_cast<int32_t>(sizes.size()), cnames.data(),
                                    inputs.data(), outputs.data(), op, pre, post, &h);
  }
  EXPECT_EQ(s, HVD_OK) << tag << ": " << hvd_last_error();
  WaitOk(h, tag);
  std::vector<std::vector<unsigned char>> out;
  for (const auto& t : ts) out.emplace_back(t->bytes(), t->bytes() + t->nbytes());
  return out;
}

const hvd_dtype_t kDtypes[] = {HVD_UINT8,   HVD_INT8,     HVD_UINT16,  HVD_INT16,
                               HVD_INT32,   HVD_INT64,    HVD_FLOAT16, HVD_BFLOAT16,
                               HVD_FLOAT32, HVD_FLOAT64,  HVD_BOOL};
const hvd_reduce_op_t kOps[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT, HVD_AVERAGE};

// Every dtype x op x scaling, unfused and fused (3 tensors of odd sizes),
// on the device path against the host path.
void EveryCase(int n) {
  RunDev(n, [](hvd_context_t ctx, int rank) {
    for (hvd_dtype_t dt : kDtypes) {
      for (hvd_reduce_op_t op : kOps) {
        if (dt == HVD_BOOL && op == HVD_AVERAGE) continue;  // refused by the API
        for (int scaled = 0; scaled < 2; ++scaled) {
          // Scale factors are powers of two (exact), except AVERAGE's 1/size.
          const double pre = scaled ? 0.5 : 1.0, post = scaled ? 4.0 : 1.0;
          for (const std::vector<size_t>& sizes :
               {std::vector<size_t>{7}, std::vector<size_t>{3, 1, 5}}) {
            const std::string tag = "d" + std::to_string(dt) + "o" + std::to_string(op) + "s" +
                                    std::to_string(scaled) + "n" + std::to_string(sizes.size());
            auto want = GroupedAllreduce(ctx, rank, false, dt, op, pre, post, sizes, tag);
            auto got = GroupedAllreduce(ctx, rank, true, dt, op, pre, post, sizes, tag);
            ASSERT_EQ(want.size(), got.size());
            for (size_t k = 0; k < want.size(); ++k) {
              EXPECT_EQ(want[k], got[k]) << tag << " tensor " << k << " on rank " << rank;
            }
          }
        }
      }
    }
  });
  const DevStats s = F().Stats();
  EXPECT_GT(s.allreduces, 0);
  EXPECT_EQ(s.host_refused, 0) << "host memory reached the device transport";
  EXPECT_EQ(s.others, 0);
}

TEST_F(DeviceTransport, EveryDtypeOpAndScalingTwoRanks) { EveryCase(2); }
TEST_F(DeviceTransport, EveryDtypeOpAndScalingThreeRanks) { EveryCase(3); }

TEST_F(DeviceTransport, EveryCaseWithNativeAverage) {
  ScopedEnv avg("FAKE_DEV_AVERAGE", "1");
  EveryCase(2);
}

// One grouped allreduce of 3 device tensors is one allreduce of their
// total on the device transport, with one launch in and one out.
TEST_F(DeviceTransport, FusedIsOneDeviceAllreduce) {
  RunDev(2, [](hvd_context_t ctx, int rank) {
    auto r = GroupedAllreduce(ctx, rank, true, HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0, {4, 9, 2}, "fused");
    ASSERT_EQ(r.size(), 3u);
  });
  const DevStats s = F().Stats();
  EXPECT_EQ(s.allreduces, 2);  // once per rank
  EXPECT_EQ(s.last_count, 15);
  EXPECT_EQ(s.last_op, HVD_SUM);  // the division is in the copy out
  EXPECT_EQ(F().launches(), 4);   // per rank: in and out
}

TEST_F(DeviceTransport, UnfusedAverageGoesNativeWhereOffered) {
  {
    ScopedEnv avg("FAKE_DEV_AVERAGE", "1");
    RunDev(2, [](hvd_context_t ctx, int rank) {
      GroupedAllreduce(ctx, rank, true, HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0, {6}, "native");
    });
    EXPECT_EQ(F().Stats().last_op, HVD_AVERAGE);
    EXPECT_EQ(F().launches(), 0);
  }
  F().dev_reset();
  F().kernels_reset();
  RunDev(2, [](hvd_context_t ctx, int rank) {
    GroupedAllreduce(ctx, rank, true, HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0, {6}, "core");
  });
  EXPECT_EQ(F().Stats().last_op, HVD_SUM);
  EXPECT_EQ(F().launches(), 2);  // the division, per rank
}

// Broadcast on the device transport; allgather, alltoall and reducescatter
// of CUDA tensors staged over the host transport; host tensors over it too.
TEST_F(DeviceTransport, OtherCollectivesAndHostTensors) {
  RunDev(3, [](hvd_context_t ctx, int rank) {
    const int n = 3;
    {
      Tensor x(HVD_INT32, 4, Bytes(HVD_INT32, rank, 1, 4), rank % 2, StreamOf(rank));
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_broadcast_async(ctx, "bc", &x.t, x.dev, 2, &h), HVD_OK) << hvd_last_error();
      WaitOk(h, "broadcast");
      const auto want = Bytes(HVD_INT32, 2, 1, 4);
      EXPECT_EQ(std::memcmp(x.bytes(), want.data(), want.size()), 0);
    }
    {
      Tensor x(HVD_FLOAT64, 2, Bytes(HVD_FLOAT64, rank, 2, 2), rank % 2, StreamOf(rank));
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_allgather_async(ctx, "ag", &x.t, &h), HVD_OK) << hvd_last_error();
      ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
      const void* data = nullptr;
      size_t bytes = 0;
      ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
      ASSERT_EQ(bytes, n * 2 * sizeof(double));
      for (int r = 0; r < n; ++r) {
        const auto want = Bytes(HVD_FLOAT64, r, 2, 2);
        EXPECT_EQ(std::memcmp(static_cast<const char*>(data) + r * 16, want.data(), 16), 0) << r;
      }
      hvd_handle_release(h);
    }
    {
      std::vector<unsigned char> in(n * 4);
      for (int j = 0; j < n; ++j) {
        const int32_t v = rank * 10 + j;
        std::memcpy(in.data() + j * 4, &v, 4);
      }
      Tensor x(HVD_INT32, n, in, rank % 2, StreamOf(rank));
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_alltoall_async(ctx, "a2a", &x.t, nullptr, &h), HVD_OK) << hvd_last_error();
      ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
      const void* data = nullptr;
      size_t bytes = 0;
      ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
      ASSERT_EQ(bytes, n * 4u);
      for (int r = 0; r < n; ++r) EXPECT_EQ(static_cast<const int32_t*>(data)[r], r * 10 + rank);
      hvd_handle_release(h);
    }
    {
      Tensor x(HVD_INT64, 6, Bytes(HVD_INT64, rank, 3, 6), rank % 2, StreamOf(rank));
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_reducescatter_async(ctx, "rs", &x.t, HVD_SUM, 1.0, 1.0, &h), HVD_OK)
          << hvd_last_error();
      ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
      const void* data = nullptr;
      size_t bytes = 0;
      ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
      ASSERT_EQ(bytes, 2 * sizeof(int64_t));
      for (int i = 0; i < 2; ++i) {
        int64_t want = 0;
        for (int r = 0; r < n; ++r) want += static_cast<int64_t>(Value(HVD_INT64, r, 3, rank * 2 + i));
        EXPECT_EQ(static_cast<const int64_t*>(data)[i], want);
      }
      hvd_handle_release(h);
    }
    // A host tensor in the same context: over gloo.
    auto host = GroupedAllreduce(ctx, rank, false, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, {5}, "host");
    ASSERT_EQ(host.size(), 1u);
  });
  const DevStats s = F().Stats();
  EXPECT_EQ(s.broadcasts, 3);
  EXPECT_EQ(s.allreduces, 0);  // the host tensor's allreduce did not come here
  EXPECT_EQ(s.others, 0);
  EXPECT_EQ(s.host_refused, 0);
}

// Adasum of CUDA tensors is staged over the host transport (its tree runs
// on the host): the same bits as on host tensors.
TEST_F(DeviceTransport, AdasumIsStaged) {
  RunDev(2, [](hvd_context_t ctx, int rank) {
    auto want = GroupedAllreduce(ctx, rank, false, HVD_FLOAT64, HVD_ADASUM, 1.0, 1.0, {8}, "ada");
    auto got = GroupedAllreduce(ctx, rank, true, HVD_FLOAT64, HVD_ADASUM, 1.0, 1.0, {8}, "ada");
    EXPECT_EQ(want, got);
  });
  EXPECT_EQ(F().Stats().allreduces, 0);
}

// A process set's CUDA tensors are staged over the set's host connections.
TEST_F(DeviceTransport, ProcessSetsStage) {
  RunDev(3, [](hvd_context_t ctx, int rank) {
    const int32_t ranks[] = {0, 2};
    hvd_context_t set = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 2, ranks, &set), HVD_OK) << hvd_last_error();
    if (set != nullptr) {
      auto want = GroupedAllreduce(set, rank, false, HVD_INT32, HVD_SUM, 1.0, 1.0, {5}, "set");
      auto got = GroupedAllreduce(set, rank, true, HVD_INT32, HVD_SUM, 1.0, 1.0, {5}, "set");
      EXPECT_EQ(want, got);
      EXPECT_EQ(hvd_context_destroy(set), HVD_OK);
    }
    // The rank outside the set stays until the others are done with it.
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_barrier_async(ctx, &h), HVD_OK) << hvd_last_error();
    WaitOk(h, "barrier");
  });
  EXPECT_EQ(F().Stats().allreduces, 0);
}

// Without the kernels: tensor by tensor, and a clear refusal where the
// device would have to scale.
TEST_F(DeviceTransport, WithoutKernels) {
  ScopedEnv none("HVD_CUDA_KERNELS", "/nonexistent/libhvd_cuda_kernels.so");
  RunDev(2, [](hvd_context_t ctx, int rank) {
    auto want = GroupedAllreduce(ctx, rank, false, HVD_INT32, HVD_MAX, 1.0, 1.0, {3, 4, 2}, "nk");
    auto got = GroupedAllreduce(ctx, rank, true, HVD_INT32, HVD_MAX, 1.0, 1.0, {3, 4, 2}, "nk");
    EXPECT_EQ(want, got);
    Tensor x(HVD_INT32, 4, Bytes(HVD_INT32, rank, 0, 4), rank % 2, StreamOf(rank));
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allreduce_async(ctx, "avg", &x.t, x.dev, HVD_AVERAGE, 1.0, 1.0, &h), HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_ERR_UNSUPPORTED);
    const std::string err = hvd_last_error();
    EXPECT_NE(err.find("'avg'"), std::string::npos) << err;
    EXPECT_NE(err.find("CUDA kernels could not be loaded"), std::string::npos) << err;
    hvd_handle_release(h);
  });
  EXPECT_EQ(F().Stats().allreduces, 2 * 3);  // the group, tensor by tensor, per rank
  EXPECT_EQ(F().launches(), 0);
}

// A rank that has joined takes part with zeros on its own device (local
// rank % devices), through the same device calls as the others: single and
// fused, SUM and AVERAGE (still divided by the size).
TEST_F(DeviceTransport, JoinedRankTakesPartOnTheDevice) {
  RunDev(2, [](hvd_context_t ctx, int rank) {
    hvd_handle_t join = nullptr;
    if (rank == 1) {
      ASSERT_EQ(hvd_join_async(ctx, &join), HVD_OK) << hvd_last_error();
    } else {
      for (const std::vector<size_t>& sizes : {std::vector<size_t>{6}, std::vector<size_t>{2, 5, 3}}) {
        for (hvd_reduce_op_t op : {HVD_SUM, HVD_AVERAGE}) {
          const std::string tag = "j" + std::to_string(op) + "n" + std::to_string(sizes.size());
          auto got = GroupedAllreduce(ctx, rank, true, HVD_FLOAT32, op, 1.0, 1.0, sizes, tag);
          for (size_t k = 0; k < sizes.size(); ++k) {
            auto in = Bytes(HVD_FLOAT32, rank, static_cast<int>(k), sizes[k]);
            std::vector<float> want(sizes[k]);
            std::memcpy(want.data(), in.data(), in.size());
            if (op == HVD_AVERAGE) {
              for (float& v : want) v *= 0.5f;
            }
            ASSERT_EQ(got[k].size(), want.size() * 4);
            EXPECT_EQ(std::memcmp(got[k].data(), want.data(), got[k].size()), 0) << tag << " " << k;
          }
        }
      }
      ASSERT_EQ(hvd_join_async(ctx, &join), HVD_OK) << hvd_last_error();
    }
    WaitOk(join, "join");
  });
  const DevStats s = F().Stats();
  EXPECT_EQ(s.host_refused, 0);
  EXPECT_EQ(s.allreduces, 2 * 4);  // every allreduce on both ranks
}

// A world of one: the local host transport and the device transport.
TEST_F(DeviceTransport, WorldOfOne) {
  RunDev(1, [](hvd_context_t ctx, int rank) {
    auto want = GroupedAllreduce(ctx, rank, false, HVD_FLOAT16, HVD_AVERAGE, 0.5, 2.0, {3, 3}, "one");
    auto got = GroupedAllreduce(ctx, rank, true, HVD_FLOAT16, HVD_AVERAGE, 0.5, 2.0, {3, 3}, "one");
    EXPECT_EQ(want, got);
  });
  EXPECT_EQ(F().Stats().allreduces, 1);
}

TEST_F(DeviceTransport, DeviceOnlyHostTransportIsRefused) {
  ScopedEnv cpu("HVD_CPU_TRANSPORT", "fakedev");
  hvd_params_t p = HVD_PARAMS_INIT;
  p.transport = "fakedev";
  p.mask = HVD_PARAM_TRANSPORT;
  hvd_context_t ctx = nullptr;
  EXPECT_EQ(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT);
  const std::string err = hvd_last_error();
  EXPECT_NE(err.find("HVD_CPU_TRANSPORT=fakedev"), std::string::npos) << err;
  EXPECT_NE(err.find("device memory only"), std::string::npos) << err;
  EXPECT_EQ(ctx, nullptr);
}

}  // namespace
