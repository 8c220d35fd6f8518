// Where a collective's bytes go: the counts of results the handles own,
// tensor sizes, staging alignment, device buffer descriptors;
// executor-internal.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/kernels.h"
#include "core/loop/request.h"
#include "core/negotiation/controller.h"
#include "hvd_transport.h"

namespace hvd {

// ---- the byte counts of collectives with owned results --------------------
//
// From the negotiated descriptors, the same on the host path and the device
// path: one row is everything but the first dimension.

inline size_t RowBytes(const TensorSpec& t) {
  size_t row = DtypeSize(t.dtype);
  for (size_t d = 1; d < t.shape.size(); ++d) row *= static_cast<size_t>(t.shape[d]);
  return row;
}

struct Counts {
  std::vector<size_t> send, recv;  // bytes to and from each rank
  size_t send_total = 0, recv_total = 0;
  int64_t rows = 0;  // the result's first dimension
};

// Allgather: rank r's rows from its descriptor.
inline Counts AllgatherCounts(const Response& resp, int n, size_t row) {
  Counts c;
  c.recv.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const int64_t rr = resp.desc(r).shapes[0][0];
    c.recv[r] = static_cast<size_t>(rr) * row;
    c.rows += rr;
    c.recv_total += c.recv[r];
  }
  return c;
}

// Alltoall: this rank's splits out, each rank's split for this rank in;
// the rows received from each rank go to *recv_splits.
inline Counts AlltoallCounts(const OpRequest& req, const Response& resp, int n, int me, size_t row,
                      std::vector<int64_t>* recv_splits) {
  Counts c;
  c.send.resize(static_cast<size_t>(n));
  c.recv.resize(static_cast<size_t>(n));
  recv_splits->assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    c.send[r] = static_cast<size_t>(req.splits[r]) * row;
    c.send_total += c.send[r];
    const int64_t from_r = resp.desc(r).splits[me];
    (*recv_splits)[r] = from_r;
    c.recv[r] = static_cast<size_t>(from_r) * row;
    c.rows += from_r;
    c.recv_total += c.recv[r];
  }
  return c;
}

// Reducescatter: the first rows % n ranks get one row more.
struct ScatterRows {
  int64_t mine = 0, first = 0;  // this rank's rows and where they start
  std::vector<size_t> counts;   // elements of each rank's block
};
inline ScatterRows ReducescatterRows(int64_t rows, int n, int me, size_t row_elems) {
  ScatterRows s;
  const int64_t base = rows / n, extra = rows % n;
  s.mine = base + (me < extra ? 1 : 0);
  s.first = me * base + std::min<int64_t>(me, extra);
  s.counts.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) s.counts[r] = static_cast<size_t>(base + (r < extra ? 1 : 0)) * row_elems;
  return s;
}

// ---- CUDA tensors -----------------------------------------------------------

inline constexpr size_t kStageAlign = 64;

inline size_t AlignUp(size_t n) { return (n + kStageAlign - 1) / kStageAlign * kStageAlign; }

inline size_t TensorBytes(const TensorSpec& t) {
  return static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype);
}

inline hvd_transport_buffer_t DeviceBuffer(void* data, size_t bytes, const TensorSpec& t) {
  hvd_transport_buffer_t b{};
  b.data = data;
  b.bytes = bytes;
  b.memory_type = HVD_MEMORY_CUDA;
  b.device = t.device;
  b.stream = t.stream;
  return b;
}

}  // namespace hvd
