// CUDA tensors over host-memory transports (staging), without a GPU: the
// core loads fake_cudart.c's library (HVD_CUDA_RUNTIME), whose "device
// memory" is host memory it remembers and whose streams are queues that run
// only when synchronized. A core that copies on the wrong stream, or does not
// synchronize before reading a copy or before completing a handle, reads or
// leaves stale data, and these checks fail.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/context.h"
#include "hvd.h"
#include "scoped_env.h"
#include "thread_ranks.h"

namespace {

using hvd::test::RunRanks;
using hvd::test::ScopedEnv;

struct FakeStats {
  long get_device_count, set_device, host_alloc, free_host, copies_to_host, copies_to_device,
      copies_on_device, bytes_to_host, bytes_to_device, stream_syncs, event_syncs,
      pointer_queries, bad_copies, pending, dropped;
  void* last_copy_stream;
};

// The fake's entry points, from the same library the core loads (dlopen
// returns the one already loaded, so both see the same state).
struct Fake {
  void* dl = nullptr;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*sync)(void*) = nullptr;
  void (*fill_async)(void*, const void*, size_t, void*) = nullptr;
  void (*stats)(FakeStats*) = nullptr;
  void (*reset)() = nullptr;

  Fake() {
    dl = dlopen(FAKE_CUDART_LIB, RTLD_NOW | RTLD_LOCAL);
    if (dl == nullptr) return;
    malloc_ = reinterpret_cast<decltype(malloc_)>(dlsym(dl, "cudaMalloc"));
    free_ = reinterpret_cast<decltype(free_)>(dlsym(dl, "cudaFree"));
    set_device = reinterpret_cast<decltype(set_device)>(dlsym(dl, "cudaSetDevice"));
    sync = reinterpret_cast<decltype(sync)>(dlsym(dl, "cudaStreamSynchronize"));
    fill_async = reinterpret_cast<decltype(fill_async)>(dlsym(dl, "fake_cuda_fill_async"));
    stats = reinterpret_cast<decltype(stats)>(dlsym(dl, "fake_cuda_stats"));
    reset = reinterpret_cast<decltype(reset)>(dlsym(dl, "fake_cuda_reset_stats"));
  }
  FakeStats Stats() const {
    FakeStats s{};
    stats(&s);
    return s;
  }
  // n bytes of "device memory" on `device`, filled with `byte`.
  void* Alloc(int device, size_t n, unsigned char byte = 0xAB) const {
    EXPECT_EQ(set_device(device), 0);
    void* p = nullptr;
    EXPECT_EQ(malloc_(&p, n), 0);
    std::memset(p, byte, n);
    return p;
  }
};

Fake& F() {
  static Fake* f = new Fake();
  return *f;
}

class CudaStaging : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(F().dl, nullptr) << dlerror();
    ASSERT_NE(F().fill_async, nullptr);
    F().reset();
  }
  ScopedEnv runtime_{"HVD_CUDA_RUNTIME", FAKE_CUDART_LIB};
  ScopedEnv devices_{"HVD_FAKE_CUDA_DEVICES", "2"};
};

void* StreamOf(int rank) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + rank)); }

template <typename T>
hvd_dtype_t DtypeOf() {
  if (std::is_same<T, float>::value) return HVD_FLOAT32;
  if (std::is_same<T, double>::value) return HVD_FLOAT64;
  if (std::is_same<T, int32_t>::value) return HVD_INT32;
  if (std::is_same<T, int64_t>::value) return HVD_INT64;
  if (std::is_same<T, int8_t>::value) return HVD_INT8;
  return HVD_UINT8;
}

// A device tensor whose data is written by "a kernel" queued on `stream`
// (it lands only when the stream runs).
template <typename T>
struct DevTensor {
  std::vector<int64_t> shape;
  T* data = nullptr;
  hvd_tensor_t t = HVD_TENSOR_INIT;
  DevTensor(int device, void* stream, std::vector<int64_t> s, const std::vector<T>& values)
      : shape(std::move(s)) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    EXPECT_EQ(n, values.size());
    data = static_cast<T*>(F().Alloc(device, n * sizeof(T) + 1));
    F().fill_async(data, values.data(), n * sizeof(T), stream);
    t.data = data;
    t.dtype = DtypeOf<T>();
    t.ndim = static_cast<int32_t>(shape.size());
    t.shape = shape.data();
    t.device = device;
    t.stream = stream;
  }
  ~DevTensor() { F().free_(data); }
};

void Wait(hvd_handle_t h, const char* what) {
  ASSERT_NE(h, nullptr) << what;
  EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_OK) << what << ": " << hvd_last_error();
}

// Every collective on device tensors; rank r uses device r % 2 and stream
// 0x1000 + r (or the legacy stream), values small integers so that every
// result is exact.
template <typename T>
void AllCollectives(hvd_context_t ctx, int rank, int n, bool legacy_stream) {
  const int dev = rank % 2;
  void* stream = legacy_stream ? nullptr : StreamOf(rank);
  const std::string tag = std::to_string(static_cast<int>(DtypeOf<T>()));
  auto V = [](long x) { return static_cast<T>(x); };
  // Allreduce, out of place, SUM.
  {
    std::vector<T> in(5);
    for (int i = 0; i < 5; ++i) in[i] = V(rank + i);
    DevTensor<T> x(dev, stream, {5}, in);
    T* out = static_cast<T*>(F().Alloc(dev, 5 * sizeof(T)));
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allreduce_async(ctx, ("ar" + tag).c_str(), &x.t, out, HVD_SUM, 1, 1, &h), HVD_OK)
        << hvd_last_error();
    Wait(h, "allreduce");
    hvd_handle_release(h);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(out[i], V(n * (n - 1) / 2 + n * i)) << "allreduce element " << i;
    }
    F().free_(out);
  }
  // Allreduce in place, MAX.
  {
    std::vector<T> in = {V(rank), V(10 - rank), V(3)};
    DevTensor<T> x(dev, stream, {3}, in);
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allreduce_async(ctx, ("max" + tag).c_str(), &x.t, x.data, HVD_MAX, 1, 1, &h),
              HVD_OK)
        << hvd_last_error();
    Wait(h, "allreduce max");
    hvd_handle_release(h);
    EXPECT_EQ(x.data[0], V(n - 1));
    EXPECT_EQ(x.data[1], V(10));
    EXPECT_EQ(x.data[2], V(3));
  }
  // Several allreduces at once (fused) and a grouped one.
  {
    std::vector<std::unique_ptr<DevTensor<T>>> xs;
    std::vector<hvd_handle_t> hs(4, nullptr);
    for (int k = 0; k < 4; ++k) {
      xs.push_back(std::make_unique<DevTensor<T>>(dev, stream, std::vector<int64_t>{2, 2},
                                                  std::vector<T>{V(k), V(rank), V(1), V(2 * k)}));
      const std::string name = "f" + std::to_string(k) + "_" + tag;
      ASSERT_EQ(hvd_allreduce_async(ctx, name.c_str(), &xs[k]->t, xs[k]->data, HVD_SUM, 1, 1,
                                    &hs[k]),
                HVD_OK)
          << hvd_last_error();
    }
    std::vector<std::unique_ptr<DevTensor<T>>> gs;
    std::vector<hvd_tensor_t> gt;
    std::vector<void*> gout;
    std::vector<std::string> gnames;
    for (int k = 0; k < 3; ++k) {
      gs.push_back(std::make_unique<DevTensor<T>>(dev, stream, std::vector<int64_t>{k + 1},
                                                  std::vector<T>(static_cast<size_t>(k + 1), V(k + rank))));
      gt.push_back(gs[k]->t);
      gout.push_back(F().Alloc(dev, static_cast<size_t>(k + 1) * sizeof(T)));
      gnames.push_back("g" + std::to_string(k) + "_" + tag);
    }
    const char* names[3] = {gnames[0].c_str(), gnames[1].c_str(), gnames[2].c_str()};
    hvd_handle_t hg = nullptr;
    ASSERT_EQ(hvd_grouped_allreduce_async(ctx, 3, names, gt.data(), gout.data(), HVD_SUM, 1, 1, &hg),
              HVD_OK)
        << hvd_last_error();
    for (int k = 0; k < 4; ++k) {
      Wait(hs[k], "fused allreduce");
      hvd_handle_release(hs[k]);
      EXPECT_EQ(xs[k]->data[0], V(n * k));
      EXPECT_EQ(xs[k]->data[1], V(n * (n - 1) / 2));
      EXPECT_EQ(xs[k]->data[2], V(n));
      EXPECT_EQ(xs[k]->data[3], V(2 * k * n));
    }
    Wait(hg, "grouped allreduce");
    hvd_handle_release(hg);
    for (int k = 0; k < 3; ++k) {
      const T* o = static_cast<const T*>(gout[k]);
      for (int i = 0; i <= k; ++i) EXPECT_EQ(o[i], V(n * k + n * (n - 1) / 2)) << "group " << k;
      F().free_(gout[k]);
    }
  }
  // Broadcast from the last rank, out of place.
  {
    DevTensor<T> x(dev, stream, {4}, {V(rank), V(rank + 1), V(7), V(rank * 2)});
    T* out = static_cast<T*>(F().Alloc(dev, 4 * sizeof(T)));
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_broadcast_async(ctx, ("bc" + tag).c_str(), &x.t, out, n - 1, &h), HVD_OK)
        << hvd_last_error();
    Wait(h, "broadcast");
    hvd_handle_release(h);
    EXPECT_EQ(out[0], V(n - 1));
    EXPECT_EQ(out[1], V(n));
    EXPECT_EQ(out[2], V(7));
    EXPECT_EQ(out[3], V(2 * (n - 1)));
    F().free_(out);
  }
  // Allgather: rank r gives r + 1 rows of 2; the result is host memory.
  {
    std::vector<T> in;
    for (int i = 0; i <= rank; ++i) {
      in.push_back(V(rank));
      in.push_back(V(i));
    }
    DevTensor<T> x(dev, stream, {rank + 1, 2}, in);
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allgather_async(ctx, ("ag" + tag).c_str(), &x.t, &h), HVD_OK) << hvd_last_error();
    Wait(h, "allgather");
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
    std::vector<T> want;
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i <= r; ++i) {
        want.push_back(V(r));
        want.push_back(V(i));
      }
    }
    ASSERT_EQ(bytes, want.size() * sizeof(T));
    EXPECT_EQ(std::memcmp(data, want.data(), bytes), 0) << "allgather result";
    hvd_handle_release(h);
  }
  // Alltoall: one row of 1 element to each rank, valued rank * 10 + j.
  {
    std::vector<T> in;
    for (int j = 0; j < n; ++j) in.push_back(V(rank * 10 + j));
    DevTensor<T> x(dev, stream, {n}, in);
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_alltoall_async(ctx, ("a2a" + tag).c_str(), &x.t, nullptr, &h), HVD_OK)
        << hvd_last_error();
    Wait(h, "alltoall");
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
    ASSERT_EQ(bytes, static_cast<size_t>(n) * sizeof(T));
    for (int r = 0; r < n; ++r) EXPECT_EQ(static_cast<const T*>(data)[r], V(r * 10 + rank));
    hvd_handle_release(h);
  }
  // Reducescatter: n + 1 rows of 2 (rank 0 gets 2 rows), SUM.
  {
    std::vector<T> in;
    for (int i = 0; i <= n; ++i) {
      in.push_back(V(i));
      in.push_back(V(rank));
    }
    DevTensor<T> x(dev, stream, {n + 1, 2}, in);
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_reducescatter_async(ctx, ("rs" + tag).c_str(), &x.t, HVD_SUM, 1, 1, &h), HVD_OK)
        << hvd_last_error();
    Wait(h, "reducescatter");
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
    const int first = rank == 0 ? 0 : rank + 1;
    const int rows = rank == 0 ? 2 : 1;
    ASSERT_EQ(bytes, static_cast<size_t>(rows * 2) * sizeof(T));
    for (int i = 0; i < rows; ++i) {
      EXPECT_EQ(static_cast<const T*>(data)[2 * i], V(n * (first + i)));
      EXPECT_EQ(static_cast<const T*>(data)[2 * i + 1], V(n * (n - 1) / 2));
    }
    hvd_handle_release(h);
  }
}

template <typename T>
void RunAll(int n, bool legacy_stream = false) {
  RunRanks(n, [&](hvd_context_t ctx, int rank) { AllCollectives<T>(ctx, rank, n, legacy_stream); });
  const FakeStats s = F().Stats();
  EXPECT_EQ(s.bad_copies, 0);
  EXPECT_EQ(s.pending, 0) << "operations left queued on a stream";
  EXPECT_EQ(s.dropped, 0) << "operations still queued when their memory was freed";
  EXPECT_GT(s.copies_to_host, 0);
  EXPECT_GT(s.copies_to_device, 0);
  EXPECT_GT(s.stream_syncs, 0);
  EXPECT_GT(s.pointer_queries, 0);
  // The staging buffer is reused: a few allocations per context, not one per operation.
  EXPECT_GT(s.host_alloc, 0);
  EXPECT_LE(s.host_alloc, 4L * n);
  EXPECT_EQ(s.host_alloc, s.free_host) << "staging memory not freed with its context";
  if (!legacy_stream) EXPECT_NE(s.last_copy_stream, nullptr);
}

TEST_F(CudaStaging, TwoRanksFloat32) { RunAll<float>(2); }
TEST_F(CudaStaging, TwoRanksFloat64) { RunAll<double>(2); }
TEST_F(CudaStaging, TwoRanksInt32) { RunAll<int32_t>(2); }
TEST_F(CudaStaging, TwoRanksInt8LegacyStream) { RunAll<int8_t>(2, /*legacy_stream=*/true); }
TEST_F(CudaStaging, ThreeRanksFloat32) { RunAll<float>(3); }
TEST_F(CudaStaging, ThreeRanksInt64) { RunAll<int64_t>(3); }
TEST_F(CudaStaging, ThreeRanksUint8) { RunAll<uint8_t>(3); }

// Every result a staged allreduce copies back is in device memory when the
// handle completes, and the input was read after the work queued before it
// on the caller's stream: with a fill queued and nothing synchronized by
// the test, the values can only be right if the core did both.
TEST_F(CudaStaging, OrderedOnTheCallersStream) {
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    void* stream = StreamOf(rank);
    DevTensor<float> x(rank, stream, {3}, {1.0f, 2.0f, 3.0f + rank});
    // A second "kernel" after the first, on the same stream: the allreduce
    // must see its values, not the first's.
    const float later[3] = {10.0f, 20.0f, 30.0f};
    F().fill_async(x.data, later, sizeof(later), stream);
    ASSERT_EQ(hvd_allreduce(ctx, "ordered", &x.t, x.data, HVD_SUM), HVD_OK) << hvd_last_error();
    EXPECT_EQ(x.data[0], 20.0f);
    EXPECT_EQ(x.data[1], 40.0f);
    EXPECT_EQ(x.data[2], 60.0f);
  });
  EXPECT_EQ(F().Stats().pending, 0);
}

// Stream-ordered completion (HVD_CUDA_ASYNC_COMPLETION=1): the handle
// completes with the copy back still queued on the caller's stream (the
// fake runs it only when that stream is synchronized or waited for), hands
// out the event after it, and a stream waiting through the handle sees the
// result. The default completion hands out no event: the result is in place.
TEST_F(CudaStaging, AsyncCompletionLeavesResultsQueuedOnTheStream) {
  ScopedEnv async("HVD_CUDA_ASYNC_COMPLETION", "1");
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    void* stream = StreamOf(rank);
    void* other = StreamOf(rank + 100);
    DevTensor<int32_t> x(rank, stream, {4}, {1, 2, 3, rank});
    int32_t* out = static_cast<int32_t*>(F().Alloc(rank, 4 * sizeof(int32_t), 0));
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allreduce_async(ctx, "async", &x.t, out, HVD_SUM, 1, 1, &h), HVD_OK)
        << hvd_last_error();
    Wait(h, "async allreduce");
    // Completed, and the copy back is still queued on the caller's stream.
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0) << "element " << i << " before the wait";
    void* ev = nullptr;
    ASSERT_EQ(hvd_handle_cuda_event(h, &ev), HVD_OK) << hvd_last_error();
    EXPECT_NE(ev, nullptr);
    ASSERT_EQ(hvd_handle_stream_wait(h, other), HVD_OK) << hvd_last_error();
    EXPECT_EQ(out[0], 2);
    EXPECT_EQ(out[1], 4);
    EXPECT_EQ(out[2], 6);
    EXPECT_EQ(out[3], 1);
    hvd_handle_release(h);
    // Broadcast in place, and an allgather (its result the handle's host
    // memory: in place at completion whatever the mode).
    DevTensor<int32_t> b(rank, stream, {2}, {7 * rank, 9});
    ASSERT_EQ(hvd_broadcast_async(ctx, "async.bc", &b.t, b.data, 1, &h), HVD_OK);
    Wait(h, "async broadcast");
    ASSERT_EQ(hvd_handle_stream_wait(h, other), HVD_OK) << hvd_last_error();
    hvd_handle_release(h);
    EXPECT_EQ(b.data[0], 7);
    EXPECT_EQ(b.data[1], 9);
    DevTensor<int32_t> g(rank, stream, {1}, {rank + 40});
    ASSERT_EQ(hvd_allgather_async(ctx, "async.ag", &g.t, &h), HVD_OK);
    Wait(h, "async allgather");
    const void* data = nullptr;
    size_t bytes = 0;
    ASSERT_EQ(hvd_handle_output(h, &data, &bytes), HVD_OK);
    ASSERT_EQ(bytes, 2 * sizeof(int32_t));
    EXPECT_EQ(static_cast<const int32_t*>(data)[0], 40);
    EXPECT_EQ(static_cast<const int32_t*>(data)[1], 41);
    hvd_handle_release(h);
    F().free_(out);
  });
  const FakeStats s = F().Stats();
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.dropped, 0);
  EXPECT_EQ(s.bad_copies, 0);
}

// The staging buffer is written again only once the last run's copies out
// of it are done: two allreduces on two streams, neither synchronized by
// the test in between; the first result would be the second's values if
// the second copied in over a buffer the first still copies back from.
TEST_F(CudaStaging, AsyncCompletionReusesStagingOnlyAfterItsCopiesBack) {
  ScopedEnv async("HVD_CUDA_ASYNC_COMPLETION", "1");
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    void* s1 = StreamOf(rank);
    void* s2 = StreamOf(rank + 10);
    DevTensor<int64_t> a(0, s1, {3}, {1, 2, 3});
    DevTensor<int64_t> b(0, s2, {3}, {100, 200, 300 + rank});
    hvd_handle_t ha = nullptr, hb = nullptr;
    ASSERT_EQ(hvd_allreduce_async(ctx, "reuse.a", &a.t, a.data, HVD_SUM, 1, 1, &ha), HVD_OK);
    Wait(ha, "first");
    ASSERT_EQ(hvd_allreduce_async(ctx, "reuse.b", &b.t, b.data, HVD_SUM, 1, 1, &hb), HVD_OK);
    Wait(hb, "second");
    EXPECT_EQ(b.data[0], 100) << "the second result is queued, not in place";
    ASSERT_EQ(F().sync(s1), 0);
    ASSERT_EQ(F().sync(s2), 0);
    EXPECT_EQ(a.data[0], 2);
    EXPECT_EQ(a.data[1], 4);
    EXPECT_EQ(a.data[2], 6);
    EXPECT_EQ(b.data[0], 200);
    EXPECT_EQ(b.data[1], 400);
    EXPECT_EQ(b.data[2], 601);
    hvd_handle_release(ha);
    hvd_handle_release(hb);
  });
  EXPECT_EQ(F().Stats().pending, 0);
}

TEST_F(CudaStaging, DefaultCompletionHandsOutNoEvent) {
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    DevTensor<float> x(rank, StreamOf(rank), {2}, {1.0f, 2.0f});
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allreduce_async(ctx, "sync", &x.t, x.data, HVD_SUM, 1, 1, &h), HVD_OK);
    void* ev = reinterpret_cast<void*>(1);
    // Pending or done, never an event: pending answers HVD_IN_PROGRESS.
    const hvd_status_t early = hvd_handle_cuda_event(h, &ev);
    EXPECT_TRUE(early == HVD_OK || early == HVD_IN_PROGRESS) << early;
    EXPECT_EQ(ev, nullptr);
    Wait(h, "allreduce");
    EXPECT_EQ(x.data[0], 2.0f);  // in place at completion
    ASSERT_EQ(hvd_handle_cuda_event(h, &ev), HVD_OK);
    EXPECT_EQ(ev, nullptr);
    EXPECT_EQ(hvd_handle_stream_wait(h, StreamOf(rank + 5)), HVD_OK);
    hvd_handle_release(h);
  });
}

// Ranks whose tensors sit on different device ordinals build the same
// fusion batches (keyed on every rank's devices): rank 0 has a on device 0
// and b on device 1, rank 1 both on device 1.
TEST_F(CudaStaging, FusionKeyedOnEveryRanksDevices) {
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    void* stream = StreamOf(rank);
    DevTensor<int32_t> a(rank == 0 ? 0 : 1, stream, {2}, {1, rank});
    DevTensor<int32_t> b(1, stream, {2}, {2, 3 * rank});
    DevTensor<int32_t> c(rank == 0 ? 0 : 1, stream, {1}, {5});
    hvd_handle_t h[3] = {nullptr, nullptr, nullptr};
    ASSERT_EQ(hvd_allreduce_async(ctx, "ka", &a.t, a.data, HVD_SUM, 1, 1, &h[0]), HVD_OK);
    ASSERT_EQ(hvd_allreduce_async(ctx, "kb", &b.t, b.data, HVD_SUM, 1, 1, &h[1]), HVD_OK);
    ASSERT_EQ(hvd_allreduce_async(ctx, "kc", &c.t, c.data, HVD_SUM, 1, 1, &h[2]), HVD_OK);
    for (auto* x : h) {
      Wait(x, "allreduce");
      hvd_handle_release(x);
    }
    EXPECT_EQ(a.data[0], 2);
    EXPECT_EQ(a.data[1], 1);
    EXPECT_EQ(b.data[0], 4);
    EXPECT_EQ(b.data[1], 3);
    EXPECT_EQ(c.data[0], 10);
  });
}

// A rank passing a CPU tensor where another passes a CUDA tensor: the
// negotiation refuses it on both (device kind).
TEST_F(CudaStaging, DeviceKindMismatchAcrossRanks) {
  RunRanks(2, [](hvd_context_t ctx, int rank) {
    float host[2] = {1, 2};
    int64_t shape[1] = {2};
    DevTensor<float> d(0, StreamOf(rank), {2}, {1, 2});
    hvd_tensor_t t = d.t;
    if (rank == 1) {
      t.data = host;
      t.device = HVD_DEVICE_CPU;
      t.stream = nullptr;
      t.shape = shape;
    }
    hvd_handle_t h = nullptr;
    ASSERT_EQ(hvd_allreduce_async(ctx, "kind", &t, t.data, HVD_SUM, 1, 1, &h), HVD_OK);
    EXPECT_EQ(hvd_handle_wait(h, 60.0), HVD_ERR_MISMATCH);
    hvd_handle_release(h);
  });
}

// ---- refusals ---------------------------------------------------------------

void OneRank(const std::function<void(hvd_context_t)>& fn) {
  RunRanks(1, [&](hvd_context_t ctx, int) { fn(ctx); }, nullptr, "local");
}

TEST(CudaRefusals, NoRuntime) {
  ScopedEnv env("HVD_CUDA_RUNTIME", "/nonexistent/libcudart.so.99");
  OneRank([](hvd_context_t ctx) {
    float x[2] = {1, 2};
    int64_t shape[1] = {2};
    hvd_tensor_t t = HVD_TENSOR_INIT;
    t.data = x;
    t.ndim = 1;
    t.shape = shape;
    t.device = 0;
    hvd_handle_t h = nullptr;
    EXPECT_EQ(hvd_allreduce_async(ctx, "x", &t, x, HVD_SUM, 1, 1, &h), HVD_ERR_UNSUPPORTED);
    EXPECT_EQ(h, nullptr);
    const std::string err = hvd_last_error();
    EXPECT_NE(err.find("CUDA tensor on device 0 (tensor 'x'): no CUDA runtime could be loaded ("),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("/nonexistent/libcudart.so.99"), std::string::npos) << err;
    EXPECT_NE(err.find("HVD_CUDA_RUNTIME"), std::string::npos) << err;
    // Every collective refuses it, and host tensors still work.
    EXPECT_EQ(hvd_allgather_async(ctx, "g", &t, &h), HVD_ERR_UNSUPPORTED);
    EXPECT_EQ(hvd_broadcast_async(ctx, "b", &t, x, 0, &h), HVD_ERR_UNSUPPORTED);
    EXPECT_EQ(hvd_alltoall_async(ctx, "a", &t, nullptr, &h), HVD_ERR_UNSUPPORTED);
    EXPECT_EQ(hvd_reducescatter_async(ctx, "r", &t, HVD_SUM, 1, 1, &h), HVD_ERR_UNSUPPORTED);
    t.device = HVD_DEVICE_CPU;
    EXPECT_EQ(hvd_allreduce(ctx, "x", &t, x, HVD_SUM), HVD_OK) << hvd_last_error();
  });
}

TEST(CudaRefusals, NoDevice) {
  ScopedEnv env("HVD_CUDA_RUNTIME", FAKE_CUDART_LIB);
  ScopedEnv devices("HVD_FAKE_CUDA_DEVICES", "0");
  OneRank([](hvd_context_t ctx) {
    float x[2] = {1, 2};
    int64_t shape[1] = {2};
    hvd_tensor_t t = HVD_TENSOR_INIT;
    t.data = x;
    t.ndim = 1;
    t.shape = shape;
    t.device = 1;
    hvd_handle_t h = nullptr;
    EXPECT_EQ(hvd_allgather_async(ctx, "y", &t, &h), HVD_ERR_UNSUPPORTED);
    const std::string err = hvd_last_error();
    EXPECT_NE(err.find("CUDA tensor on device 1 (tensor 'y'): this host has no CUDA device ("),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("no CUDA-capable device is detected"), std::string::npos) << err;
  });
}

TEST_F(CudaStaging, BadOrdinalHostPointerMixedGroup) {
  OneRank([](hvd_context_t ctx) {
    DevTensor<float> d0(0, nullptr, {2}, {1, 2});
    DevTensor<float> d1(1, nullptr, {2}, {3, 4});
    hvd_handle_t h = nullptr;
    hvd_tensor_t t = d0.t;
    t.device = 2;  // the fake has 2
    EXPECT_EQ(hvd_allreduce_async(ctx, "o", &t, t.data, HVD_SUM, 1, 1, &h), HVD_ERR_INVALID_ARGUMENT);
    std::string err = hvd_last_error();
    EXPECT_NE(err.find("CUDA tensor on device 2 (tensor 'o'): this host has 2 CUDA devices"),
              std::string::npos)
        << err;
    // Device 0's memory declared as device 1's.
    t.device = 1;
    EXPECT_EQ(hvd_allreduce_async(ctx, "o", &t, t.data, HVD_SUM, 1, 1, &h), HVD_ERR_INVALID_ARGUMENT);
    err = hvd_last_error();
    EXPECT_NE(err.find("its data is memory of CUDA device 0"), std::string::npos) << err;
    // Host memory declared as device memory, as input and as output.
    float host[2] = {0, 0};
    t = d0.t;
    t.data = host;
    EXPECT_EQ(hvd_broadcast_async(ctx, "o", &t, host, 0, &h), HVD_ERR_INVALID_ARGUMENT);
    err = hvd_last_error();
    EXPECT_NE(err.find("its data is host memory"), std::string::npos) << err;
    EXPECT_EQ(hvd_allreduce_async(ctx, "o", &d0.t, host, HVD_SUM, 1, 1, &h),
              HVD_ERR_INVALID_ARGUMENT);
    err = hvd_last_error();
    EXPECT_NE(err.find("its data is host memory"), std::string::npos) << err;
    // A group on two devices, and a group mixing host and device.
    const char* names[2] = {"m0", "m1"};
    hvd_tensor_t in[2] = {d0.t, d1.t};
    void* outs[2] = {d0.data, d1.data};
    EXPECT_EQ(hvd_grouped_allreduce_async(ctx, 2, names, in, outs, HVD_SUM, 1, 1, &h),
              HVD_ERR_INVALID_ARGUMENT);
    err = hvd_last_error();
    EXPECT_NE(err.find("a group must share one device"), std::string::npos) << err;
    in[1].data = host;
    in[1].device = HVD_DEVICE_CPU;
    outs[1] = host;
    EXPECT_EQ(hvd_grouped_allreduce_async(ctx, 2, names, in, outs, HVD_SUM, 1, 1, &h),
              HVD_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(h, nullptr);
    // A world of one over the local transport: staged too.
    ASSERT_EQ(hvd_allreduce(ctx, "one", &d1.t, d1.data, HVD_AVERAGE), HVD_OK) << hvd_last_error();
    EXPECT_EQ(d1.data[0], 3.0f);
    EXPECT_EQ(d1.data[1], 4.0f);
  });
}

}  // namespace
