// Metrics of a context and each of its process sets, always on: counts,
// bytes and time per collective and per algorithm, bus bytes per size
// class, fusion, the response cache, negotiation against data time, errors
// by status. Written by the thread that holds the cycle (one at a time, the
// hand-over is under the loop's lock), read by any thread: each counter is
// a relaxed atomic with one writer, so an update is a plain load and store
// and a reader sees every counter whole (a snapshot is not one instant).
// Rendered as JSON and Prometheus text by metrics_render.cc (docs/metrics.md).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "core/loop/request.h"
#include "hvd.h"

namespace hvd {

// A counter with one writer at a time.
class Counter {
 public:
  void Add(uint64_t n) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t Get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

namespace metrics {

// The collectives counted (OpType's user-facing values, in its order).
constexpr size_t kOps = 7;
const char* OpName(size_t op);  // "allreduce" ... "join"

// How an operation ran: the transport's algorithm (algo::Algorithm's
// values first), or one of the core's paths.
enum Path : uint8_t {
  kPathAuto = 0,  // unknown (algo::Algorithm::kAuto)
  kPathNative, kPathShm, kPathDirect, kPathRing, kPathTree, kPathChain, kPathPairwise,
  kPathDissemination,
  kPathHierarchical,  // the transport's hierarchical composition
  kPathPiggyback,     // reduced inside the negotiation (HVD_PIGGYBACK)
  kPathDevice,        // a device transport (NCCL)
  kPathSet,           // a process set's own communicator
  kPathAdasum,
  kPaths
};
const char* PathName(size_t path);

// Size classes for bus bandwidth, by a unit's bytes: up to 1 KiB, 64 KiB,
// 1 MiB, 16 MiB, 256 MiB, and above.
constexpr size_t kSizeClasses = 6;
size_t SizeClassOf(uint64_t bytes);
uint64_t SizeClassBound(size_t c);  // its upper bound (0 for the last: none)
const char* SizeClassName(size_t c);  // "1KiB" ... "inf"

// Seconds histograms: upper bounds 10 us, 100 us, 1 ms, 10 ms, 100 ms, 1 s,
// 10 s, then +Inf.
constexpr size_t kTimeBuckets = 8;
double TimeBucketBound(size_t b);  // +Inf for the last
size_t TimeBucketOf(uint64_t nanos);

// Tensors per fused batch: 1, 2, 4, ... 512, then more.
constexpr size_t kBatchBuckets = 11;
size_t BatchBucketOf(uint64_t tensors);
uint64_t BatchBucketBound(size_t b);  // 0 for the last: none

// Errors by status: HVD_ERR_INVALID_ARGUMENT (-1) .. HVD_ERR_MEMBERSHIP_CHANGED (-14).
constexpr size_t kStatuses = 14;
const char* StatusName(size_t index);  // index = -code - 1: "invalid_argument" ...

// A collective's bus bytes per byte of data (NCCL's busBw over algBw):
// allreduce 2(n-1)/n, allgather, alltoall and reducescatter (n-1)/n,
// broadcast 1, barrier and join 0.
double BusFactor(size_t op, int size);

}  // namespace metrics

struct OpMetrics {
  Counter count, bytes, nanos;
  std::array<Counter, metrics::kTimeBuckets> seconds;  // by unit
  struct ByPath {
    Counter count, bytes, nanos;
  };
  std::array<ByPath, metrics::kPaths> paths;
  struct BySize {
    Counter count, bytes, bus_bytes, nanos;
  };
  std::array<BySize, metrics::kSizeClasses> sizes;
};

// Units of at least this many bytes are timed alone; smaller ones share the
// time up to the next timed one.
constexpr size_t kTimedUnitBytes = 65536;

// One scope's metrics (the context, or one process set).
class ScopeMetrics {
 public:
  using Clock = std::chrono::steady_clock;
  // A unit the executor ran: `tensors` tensors of collective `type` over
  // `bytes` in `nanos`, on `path`; `size` ranks. A fused batch is one unit.
  void Unit(OpType type, size_t tensors, uint64_t bytes, uint64_t nanos, metrics::Path path,
            int size);
  // A response's source: a cache slot (a hit) or a full round (a miss).
  void Cache(bool hit) { (hit ? cache_hits : cache_misses).Add(1); }
  // `n` completions with a failed status.
  void Failed(hvd_status_t code, size_t n);

  std::array<OpMetrics, metrics::kOps> ops;
  Counter fused_batches, fused_tensors;  // batches of more than one tensor
  std::array<Counter, metrics::kBatchBuckets> batch_tensors;  // tensors per batch
  Counter cache_hits, cache_misses;
  std::array<Counter, metrics::kStatuses> errors;
  Counter data_nanos;  // in the executor
};

// The context's own: its negotiations (one allreduce for it and its sets).
struct LoopMetrics {
  Counter negotiations, negotiation_nanos, cycles_with_work;
};

}  // namespace hvd
