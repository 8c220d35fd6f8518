// A device-only transport beside a host transport (HVD_TRANSPORT=<device
// plugin>, HVD_CPU_TRANSPORT=gloo), on hosts without a GPU: the NCCL
// plugin's place is taken by fake_device_plugin.cc (CUDA memory only,
// native collectives among thread-ranks), the CUDA runtime by fake_cudart.c
// (streams are queues that run when synchronized) and the core's kernels by
// fake_cuda_kernels.cc (host functions queued on those streams). What runs
// is the core: the routing (every collective of CUDA tensors to the device
// transport, host tensors and Adasum over the host one), the device fusion
// buffer, the scaling on the device, the ordering on the callers' streams,
// and the results the handles own left in device memory (a pool).
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
  long allgathers, alltoalls, reducescatters;
  int last_rs_op;
  long dtype_refused;
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
  long (*mallocs)() = Sym<long (*)()>(cudart, "fake_cuda_mallocs");
  long (*live)() = Sym<long (*)()>(cudart, "fake_cuda_live_allocations");
  struct Attr {
    int type, device;
    void *dev_ptr, *host_ptr;
    long reserved[8];
  };
  int (*attributes)(Attr*, const void*) = Sym<int (*)(Attr*, const void*)>(cudart, "cudaPointerGetAttributes");
  // The device whose (fake) memory p is; -1 for host memory.
  int DeviceOf(const void* p) const {
    Attr a{};
    if (attributes(&a, p) != 0 || a.type != 2) return -1;
    return a.device;
  }

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
  // cols > 1: a matrix of count / cols rows.
  Tensor(hvd_dtype_t dt, size_t count, const std::vector<unsigned char>& data, int device, void* stream,
         int64_t cols = 1)
      : shape{static_cast<int64_t>(count) / cols} {
    if (cols > 1) shape.push_back(cols);
    t.dtype = dt;
    t.ndim = static_cast<int32_t>(shape.size());
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
  size_t nbytes() const {
    size_t n = hvd::DtypeSize(t.dtype);
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
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

// Stream-ordered completion (HVD_CUDA_ASYNC_COMPLETION=1) on the device
// path: two fused batches on two streams, back to back. The first batch's
// copy out of the device fusion buffer is still queued on its stream when
// the second copies in on another stream; the second stream must wait for
// the first (else the first result is the second's sums). The second's
// handle completes with its copy out queued, and a stream waiting through
// the handle sees it.
TEST_F(DeviceTransport, AsyncCompletionOrdersTheFusionBufferAcrossStreams) {
  ScopedEnv async("HVD_CUDA_ASYNC_COMPLETION", "1");
  RunDev(2, [](hvd_context_t ctx, int rank) {
    const int dev = rank % 2;
    auto batch = [&](int seed, void* stream, std::vector<std::unique_ptr<Tensor>>* ts) {
      std::vector<hvd_tensor_t> in;
      std::vector<void*> out;
      std::vector<std::string> names;
      for (int k = 0; k < 3; ++k) {
        ts->push_back(std::make_unique<Tensor>(HVD_INT32, 4, Bytes(HVD_INT32, rank, seed + k, 4),
                                               dev, stream));
        in.push_back(ts->back()->t);
        out.push_back(ts->back()->dev);
        names.push_back("async" + std::to_string(seed) + "." + std::to_string(k));
      }
      const char* cn[3] = {names[0].c_str(), names[1].c_str(), names[2].c_str()};
      hvd_handle_t h = nullptr;
      EXPECT_EQ(hvd_grouped_allreduce_async(ctx, 3, cn, in.data(), out.data(), HVD_SUM, 1, 1, &h),
                HVD_OK)
          << hvd_last_error();
      EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
      return h;
    };
    auto want = [&](int seed) {
      std::vector<int32_t> w(4, 0);
      for (int r = 0; r < 2; ++r) {
        std::vector<unsigned char> b = Bytes(HVD_INT32, r, seed, 4);
        for (int i = 0; i < 4; ++i) {
          int32_t v;
          std::memcpy(&v, b.data() + 4 * i, 4);
          w[i] += v;
        }
      }
      return w;
    };
    std::vector<std::unique_ptr<Tensor>> a, b;
    hvd_handle_t ha = batch(0, StreamOf(rank, 1), &a);
    hvd_handle_t hb = batch(10, StreamOf(rank, 2), &b);
    // The second batch's results are queued on its stream, not in place.
    EXPECT_EQ(std::memcmp(b[0]->dev, Bytes(HVD_INT32, rank, 10, 4).data(), 16), 0);
    void* ev = nullptr;
    ASSERT_EQ(hvd_handle_cuda_event(hb, &ev), HVD_OK);
    EXPECT_NE(ev, nullptr);
    ASSERT_EQ(hvd_handle_stream_wait(ha, StreamOf(rank, 9)), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_handle_stream_wait(hb, StreamOf(rank, 9)), HVD_OK) << hvd_last_error();
    for (int k = 0; k < 3; ++k) {
      std::vector<int32_t> wa = want(k), wb = want(10 + k);
      EXPECT_EQ(std::memcmp(a[k]->dev, wa.data(), 16), 0) << "first batch, tensor " << k;
      EXPECT_EQ(std::memcmp(b[k]->dev, wb.data(), 16), 0) << "second batch, tensor " << k;
    }
    hvd_handle_release(ha);
    hvd_handle_release(hb);
  });
}
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

// Broadcast on the device transport; host tensors in the same context over
// the host transport.
TEST_F(DeviceTransport, BroadcastAndHostTensors) {
  RunDev(3, [](hvd_context_t ctx, int rank) {
    {
      Tensor x(HVD_INT32, 4, Bytes(HVD_INT32, rank, 1, 4), rank % 2, StreamOf(rank));
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_broadcast_async(ctx, "bc", &x.t, x.dev, 2, &h), HVD_OK) << hvd_last_error();
      WaitOk(h, "broadcast");
      const auto want = Bytes(HVD_INT32, 2, 1, 4);
      EXPECT_EQ(std::memcmp(x.bytes(), want.data(), want.size()), 0);
    }
    {
      Tensor x(HVD_INT32, 3, Bytes(HVD_INT32, rank, 2, 3), HVD_DEVICE_CPU, nullptr);
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_allgather_async(ctx, "host.ag", &x.t, &h), HVD_OK) << hvd_last_error();
      ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
      const void* data = nullptr;
      size_t bytes = 0;
      int32_t device = 7;
      ASSERT_EQ(hvd_handle_output_device(h, &data, &bytes, &device), HVD_OK) << hvd_last_error();
      EXPECT_EQ(device, HVD_DEVICE_CPU);
      EXPECT_EQ(bytes, 3u * 3 * 4);
      hvd_handle_release(h);
    }
    // A host tensor in the same context: over gloo.
    auto host = GroupedAllreduce(ctx, rank, false, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, {5}, "host");
    ASSERT_EQ(host.size(), 1u);
  });
  const DevStats s = F().Stats();
  EXPECT_EQ(s.broadcasts, 3);
  EXPECT_EQ(s.allreduces, 0);  // the host tensors did not come here
  EXPECT_EQ(s.allgathers, 0);
  EXPECT_EQ(s.others, 0);
  EXPECT_EQ(s.host_refused, 0);
}

// What a handle that owns its result says about it.
struct Owned {
  std::vector<unsigned char> bytes;  // hvd_handle_output's (host) copy
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;
  int device = HVD_DEVICE_CPU;  // hvd_handle_output_device's
};

// Waits for h and reads its result. A device result must lie in memory of
// `device`, and hvd_handle_output must copy exactly those bytes to host.
void Collect(hvd_handle_t h, int device, int nsplits, const std::string& what, Owned* out) {
  ASSERT_NE(h, nullptr) << what;
  ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << what << ": " << hvd_last_error();
  const void* where = nullptr;
  size_t where_bytes = 0;
  int32_t on = -2;
  ASSERT_EQ(hvd_handle_output_device(h, &where, &where_bytes, &on), HVD_OK) << what;
  out->device = on;
  const void* data = nullptr;
  size_t bytes = 0;
  ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK) << what << ": " << hvd_last_error();
  EXPECT_EQ(bytes, where_bytes) << what;
  if (bytes > 0) {
    EXPECT_EQ(F().DeviceOf(data), -1) << what << ": hvd_handle_output gave device memory";
    EXPECT_EQ(F().DeviceOf(where), device) << what;
    if (device >= 0) {
      EXPECT_NE(data, where) << what;
      // The fake's device memory is host memory: the copy must equal it.
      EXPECT_EQ(std::memcmp(data, where, bytes), 0) << what;
    }
    out->bytes.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes);
  }
  int64_t dims[HVD_MAX_NDIM];
  int32_t ndim = 0;
  ASSERT_EQ(hvd_handle_output_shape(h, dims, HVD_MAX_NDIM, &ndim), HVD_OK) << what;
  out->shape.assign(dims, dims + ndim);
  if (nsplits > 0) {
    out->splits.resize(static_cast<size_t>(nsplits));
    ASSERT_EQ(hvd_handle_recv_splits(h, out->splits.data(), nsplits), HVD_OK) << what;
  }
  hvd_handle_release(h);
}

// Allgather (rank r holds a different number of rows, rank 1 none),
// alltoall (uneven splits) and reducescatter (rows not a multiple of the
// size; every op and scaling) of every dtype, on CUDA tensors and on the
// same host tensors; the device ones are submitted in an order that
// differs per rank. Both must give the same bits, the device results in
// device memory of the input's device.
void EveryOwned(int n) {
  RunDev(n, [n](hvd_context_t ctx, int rank) {
    constexpr int64_t kCols = 3;
    for (hvd_dtype_t dt : kDtypes) {
      struct Case {
        std::string name;
        std::unique_ptr<Tensor> x;
        int kind;  // 0 allgather, 1 alltoall, 2 reducescatter
        hvd_reduce_op_t op = HVD_SUM;
        double pre = 1.0, post = 1.0;
        std::vector<int64_t> splits;
        Owned got;
      };
      for (int device_input = 0; device_input < 2; ++device_input) {
        const int device = device_input ? rank % 2 : HVD_DEVICE_CPU;
        const std::string tag = "d" + std::to_string(dt) + (device_input ? ".dev" : ".host");
        std::vector<std::unique_ptr<Case>> cases;
        auto add = [&](int kind, int64_t rows, int seed) {
          auto c = std::make_unique<Case>();
          c->kind = kind;
          const size_t count = static_cast<size_t>(rows * kCols);
          c->x = std::make_unique<Tensor>(dt, count, Bytes(dt, rank, seed, count), device,
                                          StreamOf(rank, seed % 4), kCols);
          cases.push_back(std::move(c));
          return cases.back().get();
        };
        add(0, rank == 1 ? 0 : rank + 2, 1)->name = tag + ".ag";
        {
          std::vector<int64_t> splits;
          int64_t rows = 0;
          for (int j = 0; j < n; ++j) {
            splits.push_back((rank + 2 * j) % 3);
            rows += splits.back();
          }
          Case* c = add(1, rows, 2);
          c->name = tag + ".a2a";
          c->splits = splits;
        }
        int seed = 3;
        for (hvd_reduce_op_t op : kOps) {
          if (dt == HVD_BOOL && op == HVD_AVERAGE) continue;
          for (int scaled = 0; scaled < 2; ++scaled) {
            Case* c = add(2, 2 * n + 1, seed++);
            c->name = tag + ".rs" + std::to_string(op) + "s" + std::to_string(scaled);
            c->op = op;
            c->pre = scaled ? 0.5 : 1.0;
            c->post = scaled ? 4.0 : 1.0;
          }
        }
        // Submit in an order that differs per rank (rotated), then wait.
        std::vector<hvd_handle_t> handles(cases.size(), nullptr);
        for (size_t i = 0; i < cases.size(); ++i) {
          const size_t k = (i + static_cast<size_t>(rank) * 2) % cases.size();
          Case& c = *cases[k];
          hvd_status_t st = HVD_ERR_INTERNAL;
          if (c.kind == 0) {
            st = hvd_allgather_async(ctx, c.name.c_str(), &c.x->t, &handles[k]);
          } else if (c.kind == 1) {
            st = hvd_alltoall_async(ctx, c.name.c_str(), &c.x->t, c.splits.data(), &handles[k]);
          } else {
            st = hvd_reducescatter_async(ctx, c.name.c_str(), &c.x->t, c.op, c.pre, c.post, &handles[k]);
          }
          ASSERT_EQ(st, HVD_OK) << c.name << ": " << hvd_last_error();
        }
        for (size_t k = 0; k < cases.size(); ++k) {
          Collect(handles[k], device, cases[k]->kind == 1 ? n : 0, cases[k]->name, &cases[k]->got);
        }
        static thread_local std::vector<Owned> host_results;
        if (!device_input) {
          host_results.clear();
          for (const auto& c : cases) host_results.push_back(c->got);
          continue;
        }
        ASSERT_EQ(host_results.size(), cases.size());
        for (size_t k = 0; k < cases.size(); ++k) {
          const Owned& want = host_results[k];
          const Owned& got = cases[k]->got;
          EXPECT_EQ(got.device, device) << cases[k]->name << " on rank " << rank;
          EXPECT_EQ(want.shape, got.shape) << cases[k]->name << " on rank " << rank;
          EXPECT_EQ(want.splits, got.splits) << cases[k]->name << " on rank " << rank;
          EXPECT_EQ(want.bytes, got.bytes) << cases[k]->name << " on rank " << rank;
        }
      }
    }
  });
  const DevStats s = F().Stats();
  const long dtypes = static_cast<long>(sizeof(kDtypes) / sizeof(kDtypes[0]));
  EXPECT_EQ(s.allgathers, n * dtypes);
  EXPECT_EQ(s.alltoalls, n * dtypes);
  EXPECT_EQ(s.reducescatters, n * ((dtypes - 1) * 10 + 8));  // bool has no AVERAGE
  EXPECT_EQ(s.host_refused, 0) << "host memory reached the device transport";
  EXPECT_EQ(s.others, 0);
}

TEST_F(DeviceTransport, OwnedResultsStayOnTheDeviceTwoRanks) { EveryOwned(2); }

// Stream-ordered completion and the device results pool: a handle released
// while the caller's stream still has a read of its result queued gives its
// block back behind that read; the next result taking the block (on
// another stream) waits for it before writing. Else the queued read would
// copy the second result.
TEST_F(DeviceTransport, AsyncCompletionReusesAResultBlockOnlyAfterItsReaders) {
  ScopedEnv async("HVD_CUDA_ASYNC_COMPLETION", "1");
  auto* memcpy_async = Sym<int (*)(void*, const void*, size_t, int, void*)>(F().cudart, "cudaMemcpyAsync");
  auto* stream_sync = Sym<int (*)(void*)>(F().cudart, "cudaStreamSynchronize");
  ASSERT_NE(memcpy_async, nullptr);
  ASSERT_NE(stream_sync, nullptr);
  RunDev(2, [&](hvd_context_t ctx, int rank) {
    const int dev = rank % 2;
    void* s1 = StreamOf(rank, 1);
    void* s2 = StreamOf(rank, 2);
    Tensor x(HVD_INT32, 2, Bytes(HVD_INT32, rank, 1, 2), dev, s1);
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allgather_async(ctx, "pool.a", &x.t, &h), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
    hvd_handle_t ha = h;
    // A device operation on s2, so that s2 no longer needs to wait for s1
    // as the device path's last stream: only the block's own fence orders
    // what follows.
    Tensor z(HVD_INT32, 2, Bytes(HVD_INT32, rank, 3, 2), dev, s2);
    ASSERT_EQ(hvd_allreduce_async(ctx, "pool.z", &z.t, z.dev, HVD_SUM, 1, 1, &h), HVD_OK);
    ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
    hvd_handle_release(h);
    const void* data = nullptr;
    size_t bytes = 0;
    int32_t where = -1;
    ASSERT_EQ(hvd_handle_output_device(ha, &data, &bytes, &where), HVD_OK);
    ASSERT_EQ(bytes, 16u);
    // "A kernel" on s1 reads the result (queued: it runs when s1 does).
    int32_t seen[4] = {0, 0, 0, 0};
    ASSERT_EQ(memcpy_async(seen, data, 16, 2, s1), 0);
    hvd_handle_release(ha);
    // Same size, on s2: takes the released block.
    Tensor y(HVD_INT32, 2, Bytes(HVD_INT32, rank, 2, 2), dev, s2);  // other values than seed 1
    ASSERT_EQ(hvd_allgather_async(ctx, "pool.b", &y.t, &h), HVD_OK) << hvd_last_error();
    ASSERT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
    const void* data2 = nullptr;
    ASSERT_EQ(hvd_handle_output_device(h, &data2, &bytes, &where), HVD_OK);
    EXPECT_EQ(data2, data) << "the block was not reused; the test shows nothing";
    ASSERT_EQ(stream_sync(s1), 0);
    for (int r = 0; r < 2; ++r) {
      std::vector<unsigned char> b = Bytes(HVD_INT32, r, 1, 2);
      EXPECT_EQ(std::memcmp(seen + 2 * r, b.data(), 8), 0) << "the read saw the second result";
    }
    ASSERT_EQ(hvd_handle_stream_wait(h, s2), HVD_OK);
    hvd_handle_release(h);
  });
}
TEST_F(DeviceTransport, OwnedResultsStayOnTheDeviceThreeRanks) { EveryOwned(3); }

// Reducescatter's AVERAGE of a floating type goes to the transport as it is
// where it offers it (no postscale), as the sum divided on the device where not.
TEST_F(DeviceTransport, ReducescatterAverageGoesNativeWhereOffered) {
  for (int native = 0; native < 2; ++native) {
    ScopedEnv avg("FAKE_DEV_AVERAGE", native ? "1" : "0");
    F().dev_reset();
    F().kernels_reset();
    RunDev(2, [](hvd_context_t ctx, int rank) {
      Tensor x(HVD_FLOAT32, 4, Bytes(HVD_FLOAT32, rank, 5, 4), rank % 2, StreamOf(rank));
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_reducescatter_async(ctx, "rsavg", &x.t, HVD_AVERAGE, 1.0, 1.0, &h), HVD_OK);
      Owned got;
      Collect(h, rank % 2, 0, "rsavg", &got);
      ASSERT_EQ(got.bytes.size(), 2 * sizeof(float));
      for (int i = 0; i < 2; ++i) {
        float v = 0;
        std::memcpy(&v, got.bytes.data() + 4 * i, 4);
        const double want = (Value(HVD_FLOAT32, 0, 5, 2 * rank + i) + Value(HVD_FLOAT32, 1, 5, 2 * rank + i)) / 2;
        EXPECT_EQ(v, static_cast<float>(want)) << i;
      }
    });
    EXPECT_EQ(F().Stats().last_rs_op, native ? HVD_AVERAGE : HVD_SUM);
    EXPECT_EQ(F().launches(), native ? 0 : 2);  // the division, per rank
  }
}

// Device results come from a pool: a released result's memory serves the
// next one of the size, no new cudaMalloc. A handle may outlive its
// context: its device result is still read (and copied to host) after the
// context is gone, and freed on release; nothing is left allocated.
TEST_F(DeviceTransport, DeviceResultsArePooledAndOutliveTheContext) {
  const long live_before = F().live();
  std::vector<hvd_handle_t> kept(2, nullptr);
  std::vector<long> grew(2, -1);
  RunDev(2, [&](hvd_context_t ctx, int rank) {
    Tensor x(HVD_INT64, 8, Bytes(HVD_INT64, rank, 6, 8), rank % 2, StreamOf(rank));
    auto gather = [&](const std::string& name) {
      hvd_handle_t h = nullptr;
      EXPECT_EQ(hvd_allgather_async(ctx, name.c_str(), &x.t, &h), HVD_OK) << hvd_last_error();
      EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << hvd_last_error();
      return h;
    };
    auto barrier = [&] {
      hvd_handle_t b = nullptr;
      ASSERT_EQ(hvd_barrier_async(ctx, &b), HVD_OK);
      WaitOk(b, "barrier");
    };
    hvd_handle_release(gather("first"));
    barrier();
    const long before = F().mallocs();
    barrier();
    hvd_handle_release(gather("second"));  // the first's block, from the pool
    barrier();
    grew[static_cast<size_t>(rank)] = F().mallocs() - before;
    barrier();
    kept[static_cast<size_t>(rank)] = gather("kept");
  });
  EXPECT_EQ(grew[0], 0);
  EXPECT_EQ(grew[1], 0);
  for (int rank = 0; rank < 2; ++rank) {
    hvd_handle_t h = kept[static_cast<size_t>(rank)];
    ASSERT_NE(h, nullptr);
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK) << hvd_last_error();
    ASSERT_EQ(bytes, 2 * 8 * sizeof(int64_t));
    for (int r = 0; r < 2; ++r) {
      const auto want = Bytes(HVD_INT64, r, 6, 8);
      EXPECT_EQ(std::memcmp(static_cast<const char*>(data) + r * 64, want.data(), 64), 0) << r;
    }
    EXPECT_EQ(hvd_handle_release(h), HVD_OK);
  }
  EXPECT_EQ(F().live(), live_before) << "device memory left allocated";
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

// A process set's CUDA tensors go to a device transport of the set's own,
// opened by its members the first time they move CUDA tensors (its keys
// the set's: a later set, even over the same slot, gets a fresh one); host
// tensors stay on the set's host connections.
TEST_F(DeviceTransport, ProcessSetsOpenTheirOwnDeviceTransport) {
  RunDev(3, [](hvd_context_t ctx, int rank) {
    for (const std::vector<int32_t>& ranks : {std::vector<int32_t>{0, 2}, std::vector<int32_t>{1, 2}}) {
      hvd_context_t set = nullptr;
      ASSERT_EQ(hvd_process_set_create(ctx, 2, ranks.data(), &set), HVD_OK) << hvd_last_error();
      if (set != nullptr) {
        const std::string tag = "set" + std::to_string(ranks[1]);
        auto want = GroupedAllreduce(set, rank, false, HVD_INT32, HVD_SUM, 1.0, 1.0, {5}, tag);
        auto got = GroupedAllreduce(set, rank, true, HVD_INT32, HVD_SUM, 1.0, 1.0, {5}, tag);
        EXPECT_EQ(want, got);
        Tensor x(HVD_INT16, 2, Bytes(HVD_INT16, rank, 4, 2), rank % 2, StreamOf(rank));
        hvd_handle_t h = nullptr;
        ASSERT_EQ(hvd_allgather_async(set, (tag + ".ag").c_str(), &x.t, &h), HVD_OK);
        Owned g;
        Collect(h, rank % 2, 0, tag + ".ag", &g);
        ASSERT_EQ(g.bytes.size(), 2u * 2 * 2);
        for (int j = 0; j < 2; ++j) {
          const auto part = Bytes(HVD_INT16, ranks[static_cast<size_t>(j)], 4, 2);
          EXPECT_EQ(std::memcmp(g.bytes.data() + 4 * j, part.data(), 4), 0) << tag << " " << j;
        }
        EXPECT_EQ(hvd_context_destroy(set), HVD_OK);
      }
      // The rank outside the set stays until the others are done with it.
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_barrier_async(ctx, &h), HVD_OK) << hvd_last_error();
      WaitOk(h, "barrier");
    }
  });
  const DevStats s = F().Stats();
  EXPECT_EQ(s.allreduces, 4);  // two sets of two members, one CUDA allreduce each
  EXPECT_EQ(s.allgathers, 4);
  EXPECT_EQ(s.host_refused, 0);
}

// Where a set's device transport cannot be opened, its CUDA operations fail
// naming the set, the rank and why; the context then stops (the members may
// have parted ways there), and says so.
TEST_F(DeviceTransport, SetDeviceTransportThatCannotOpenIsNamed) {
  ScopedEnv refuse("FAKE_DEV_REFUSE_SIZE", "2");
  RunDev(3, [](hvd_context_t ctx, int rank) {
    const int32_t ranks[] = {0, 2};
    hvd_context_t set = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 2, ranks, &set), HVD_OK) << hvd_last_error();
    if (set != nullptr) {
      auto host = GroupedAllreduce(set, rank, false, HVD_INT32, HVD_SUM, 1.0, 1.0, {4}, "sh");
      EXPECT_EQ(host.size(), 1u);  // host tensors open nothing
      Tensor x(HVD_FLOAT32, 3, Bytes(HVD_FLOAT32, rank, 0, 3), rank % 2, StreamOf(rank));
      hvd_handle_t h = nullptr;
      ASSERT_EQ(hvd_allreduce_async(set, "sx", &x.t, x.dev, HVD_SUM, 1.0, 1.0, &h), HVD_OK);
      EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_ERR_TRANSPORT);
      const std::string err = hvd_last_error();
      EXPECT_NE(err.find("process set [0, 2]"), std::string::npos) << err;
      EXPECT_NE(err.find("on rank " + std::to_string(rank) + " (set rank " +
                         std::to_string(rank / 2) + ")"), std::string::npos) << err;
      EXPECT_NE(err.find("FAKE_DEV_REFUSE_SIZE"), std::string::npos) << err;
      hvd_handle_release(h);
      hvd_context_destroy(set);
    }
    // Rank 1 (outside the set) learns of it at its next operation at the
    // latest, from the others' going.
    hvd_handle_t b = nullptr;
    if (hvd_barrier_async(ctx, &b) == HVD_OK) {
      EXPECT_NE(hvd_handle_wait(b, 60.0), HVD_OK);
      hvd_handle_release(b);
    }
  });
  EXPECT_EQ(F().Stats().allreduces, 0);
}

// Reductions of a dtype the device transport does not reduce (its table's
// reduce_dtypes; NCCL: no 16-bit integers) are staged over the host
// transport beside it, fused or not, allreduce and reducescatter, with the
// host path's bits; the others still go to the device.
TEST_F(DeviceTransport, DtypesTheDeviceDoesNotReduceAreStaged) {
  const uint64_t mask = ~uint64_t{0} & ~(uint64_t{1} << HVD_INT16) & ~(uint64_t{1} << HVD_UINT16);
  ScopedEnv dts("FAKE_DEV_REDUCE_DTYPES", std::to_string(mask).c_str());
  RunDev(2, [](hvd_context_t ctx, int rank) {
    for (hvd_dtype_t dt : {HVD_INT16, HVD_UINT16, HVD_INT32}) {
      for (const std::vector<size_t>& sizes : {std::vector<size_t>{5}, std::vector<size_t>{2, 3}}) {
        const std::string tag = "st" + std::to_string(dt) + "n" + std::to_string(sizes.size());
        auto want = GroupedAllreduce(ctx, rank, false, dt, HVD_SUM, 1.0, 1.0, sizes, tag);
        auto got = GroupedAllreduce(ctx, rank, true, dt, HVD_SUM, 1.0, 1.0, sizes, tag);
        EXPECT_EQ(want, got) << tag;
      }
      Owned host, dev;
      for (int device_input = 0; device_input < 2; ++device_input) {
        const int device = device_input ? rank % 2 : HVD_DEVICE_CPU;
        Tensor x(dt, 6, Bytes(dt, rank, 3, 6), device, StreamOf(rank), 2);
        const std::string name = "rs" + std::to_string(dt) + (device_input ? "d" : "h");
        hvd_handle_t h = nullptr;
        ASSERT_EQ(hvd_reducescatter_async(ctx, name.c_str(), &x.t, HVD_MAX, 1.0, 1.0, &h), HVD_OK);
        // Staged: the result is the handle's host memory; on the device: device memory.
        const bool staged = dt != HVD_INT32;
        Collect(h, device_input && !staged ? device : HVD_DEVICE_CPU, 0, name, device_input ? &dev : &host);
      }
      EXPECT_EQ(host.bytes, dev.bytes) << dt;
      EXPECT_EQ(host.shape, dev.shape) << dt;
    }
  });
  const DevStats s = F().Stats();
  EXPECT_EQ(s.dtype_refused, 0) << "a 16-bit integer reduction reached the device transport";
  EXPECT_EQ(s.allreduces, 2 * 2);      // int32's two allreduces, per rank
  EXPECT_EQ(s.reducescatters, 2 * 1);  // int32's, per rank
  EXPECT_EQ(s.host_refused, 0);
}

// Without the kernels: tensor by tensor, and a clear refusal where the
// device would have to scale.
TEST_F(DeviceTransport, WithoutKernels) {
  ScopedEnv none("HVD_CUDA_KERNELS", "/nonexistent/libhvd_cuda_kernels.so");
  RunDev(2, [](hvd_context_t ctx, int rank) {
    auto want = GroupedAllreduce(ctx, rank, false, HVD_INT32, HVD_MAX, 1.0, 1.0, {3, 4, 2}, "nk");
    auto got = GroupedAllreduce(ctx, rank, true, HVD_INT32, HVD_MAX, 1.0, 1.0, {3, 4, 2}, "nk");
    EXPECT_EQ(want, got);
    // Reducescatter without scaling runs on the device.
    Tensor y(HVD_INT32, 4, Bytes(HVD_INT32, rank, 1, 4), rank % 2, StreamOf(rank));
    hvd_handle_t rh = nullptr;
    ASSERT_EQ(hvd_reducescatter_async(ctx, "rsmax", &y.t, HVD_MAX, 1.0, 1.0, &rh), HVD_OK);
    Owned rs;
    Collect(rh, rank % 2, 0, "rsmax", &rs);
    EXPECT_EQ(rs.bytes.size(), 2 * sizeof(int32_t));
    // A refusal on the device ends the context (ranks could part ways there).
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
  EXPECT_EQ(F().Stats().reducescatters, 2);
  EXPECT_EQ(F().launches(), 0);
}

TEST_F(DeviceTransport, ScaledReducescatterWithoutKernelsIsRefusedByName) {
  ScopedEnv none("HVD_CUDA_KERNELS", "/nonexistent/libhvd_cuda_kernels.so");
  RunDev(2, [](hvd_context_t ctx, int rank) {
    Tensor y(HVD_INT32, 4, Bytes(HVD_INT32, rank, 1, 4), rank % 2, StreamOf(rank));
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_reducescatter_async(ctx, "rsint", &y.t, HVD_AVERAGE, 1.0, 1.0, &h), HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_ERR_UNSUPPORTED);
    const std::string err = hvd_last_error();
    EXPECT_NE(err.find("'rsint'"), std::string::npos) << err;
    EXPECT_NE(err.find("needs scaling on the device"), std::string::npos) << err;
    EXPECT_NE(err.find("/nonexistent/libhvd_cuda_kernels.so"), std::string::npos) << err;
    hvd_handle_release(h);
  });
  EXPECT_EQ(F().Stats().reducescatters, 0);  // refused before the transport
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
    // A set of the one rank (no store in a world of one): its own device transport.
    const int32_t ranks[] = {0};
    hvd_context_t set = nullptr;
    ASSERT_EQ(hvd_process_set_create(ctx, 1, ranks, &set), HVD_OK) << hvd_last_error();
    auto in_set = GroupedAllreduce(set, rank, true, HVD_FLOAT16, HVD_AVERAGE, 0.5, 2.0, {3, 3}, "one");
    EXPECT_EQ(want, in_set);
    EXPECT_EQ(hvd_context_destroy(set), HVD_OK);
  });
  EXPECT_EQ(F().Stats().allreduces, 2);
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
