#include "core/observability/metrics.h"

#include <limits>

namespace hvd {
namespace metrics {

const char* OpName(size_t op) {
  static const char* const kNames[kOps] = {"allreduce", "allgather",     "broadcast", "alltoall",
                                           "reducescatter", "barrier", "join"};
  return op < kOps ? kNames[op] : "other";
}

const char* PathName(size_t path) {
  static const char* const kNames[kPaths] = {
      "auto", "native", "shm", "direct", "ring", "tree", "chain", "pairwise", "dissemination",
      "hierarchical", "piggyback", "device", "set", "adasum"};
  return path < kPaths ? kNames[path] : "other";
}

size_t SizeClassOf(uint64_t bytes) {
  size_t c = 0;
  while (c + 1 < kSizeClasses && bytes > SizeClassBound(c)) ++c;
  return c;
}

uint64_t SizeClassBound(size_t c) {
  static const uint64_t kBounds[kSizeClasses] = {1ull << 10, 1ull << 16, 1ull << 20,
                                                 1ull << 24, 1ull << 28, 0};
  return c < kSizeClasses ? kBounds[c] : 0;
}

const char* SizeClassName(size_t c) {
  static const char* const kNames[kSizeClasses] = {"1KiB", "64KiB", "1MiB", "16MiB", "256MiB",
                                                   "inf"};
  return c < kSizeClasses ? kNames[c] : "inf";
}

double TimeBucketBound(size_t b) {
  static const double kBounds[kTimeBuckets - 1] = {1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10};
  return b + 1 < kTimeBuckets ? kBounds[b] : std::numeric_limits<double>::infinity();
}

size_t TimeBucketOf(uint64_t nanos) {
  uint64_t bound = 10000;  // 10 us
  size_t b = 0;
  while (b + 1 < kTimeBuckets && nanos > bound) {
    ++b;
    bound *= 10;
  }
  return b;
}

size_t BatchBucketOf(uint64_t tensors) {
  size_t b = 0;
  while (b + 1 < kBatchBuckets && tensors > BatchBucketBound(b)) ++b;
  return b;
}

uint64_t BatchBucketBound(size_t b) { return b + 1 < kBatchBuckets ? uint64_t{1} << b : 0; }

const char* StatusName(size_t index) {
  static const char* const kNames[kStatuses] = {
      "invalid_argument", "not_initialized", "no_memory", "timeout", "mismatch",
      "transport", "unsupported", "not_found", "aborted", "duplicate_name", "version",
      "rendezvous", "internal", "membership_changed"};
  return index < kStatuses ? kNames[index] : "unknown";
}

double BusFactor(size_t op, int size) {
  if (size <= 1) return 0;
  const double n = size;
  switch (op) {
    case 0: return 2 * (n - 1) / n;  // allreduce
    case 1:                          // allgather
    case 3:                          // alltoall
    case 4: return (n - 1) / n;      // reducescatter
    case 2: return 1;                // broadcast
    default: return 0;
  }
}

}  // namespace metrics

void ScopeMetrics::Unit(OpType type, size_t tensors, uint64_t bytes, uint64_t nanos,
                        metrics::Path path, int size) {
  const size_t op = static_cast<size_t>(type);
  if (op < metrics::kOps) {
    OpMetrics& m = ops[op];
    m.count.Add(tensors);
    m.bytes.Add(bytes);
    m.nanos.Add(nanos);
    m.seconds[metrics::TimeBucketOf(nanos)].Add(1);
    OpMetrics::ByPath& p = m.paths[path < metrics::kPaths ? path : 0];
    p.count.Add(tensors);
    p.bytes.Add(bytes);
    p.nanos.Add(nanos);
    OpMetrics::BySize& s = m.sizes[metrics::SizeClassOf(bytes)];
    s.count.Add(1);
    s.bytes.Add(bytes);
    s.bus_bytes.Add(static_cast<uint64_t>(static_cast<double>(bytes) * metrics::BusFactor(op, size)));
    s.nanos.Add(nanos);
  }
  if (type == OpType::kAllreduce) {
    batch_tensors[metrics::BatchBucketOf(tensors)].Add(1);
    if (tensors > 1) {
      fused_batches.Add(1);
      fused_tensors.Add(tensors);
    }
  }
  data_nanos.Add(nanos);
}

void ScopeMetrics::Failed(hvd_status_t code, size_t n) {
  const int c = static_cast<int>(code);
  if (c >= 0) return;
  const size_t index = static_cast<size_t>(-c - 1);
  if (index < metrics::kStatuses) errors[index].Add(n);
}

}  // namespace hvd
