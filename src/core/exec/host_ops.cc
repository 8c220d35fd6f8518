// The other operations on host tensors: broadcast, allgather, alltoall,
// reducescatter, barrier, join.
#include "core/exec/executor.h"

#include <chrono>
#include <cstring>
#include <string>

#include "common/kernels.h"
#include "core/exec/layout.h"
#include "core/exec/scaling.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

Status Executor::RunHostOne(OpRequest& req, const Response& resp) {
  const int n = size_;
  const int me = rank_;
  auto t0 = Clock::now();
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const size_t esize = DtypeSize(t.dtype);
  const size_t row = RowBytes(t);

  switch (req.type) {
    case OpType::kBroadcast: {
      size_t bytes = static_cast<size_t>(t.NumElements()) * esize;
      if (me == req.root && t.output != t.input && bytes > 0) std::memcpy(t.output, t.input, bytes);
      HVD_CHECK(transport_->Broadcast(t.output, bytes, req.root));
      break;
    }
    case OpType::kAllgather:
    case OpType::kProcessSet: {
      const Counts c = AllgatherCounts(resp, n, row);
      HVD_CHECK(TakeOutput(&h, c.recv_total));
      HVD_CHECK(transport_->Allgatherv(t.input, h.output.data(), c.recv.data()));
      h.output_shape = t.shape.vec();
      h.output_shape[0] = c.rows;
      break;
    }
    case OpType::kAlltoall: {
      const Counts c = AlltoallCounts(req, resp, n, me, row, &h.recv_splits);
      HVD_CHECK(TakeOutput(&h, c.recv_total));
      HVD_CHECK(transport_->Alltoallv(t.input, c.send.data(), h.output.data(), c.recv.data()));
      h.output_shape = t.shape.vec();
      h.output_shape[0] = c.rows;
      break;
    }
    case OpType::kReducescatter:
      HVD_CHECK(HostReducescatter(req));
      break;
    case OpType::kBarrier:
      HVD_CHECK(transport_->Barrier());
      break;
    case OpType::kJoin: {
      // Negotiation did the work: every rank has joined. The result is the
      // rank that joined last, as one int32 (Horovod's join() value).
      const int32_t last = resp.last_joined;
      HVD_CHECK(TakeOutput(&h, sizeof(last)));
      std::memcpy(h.output.data(), &last, sizeof(last));
      h.output_shape = {1};
      break;
    }
    case OpType::kCloseSet:
      break;  // negotiation did the work
    case OpType::kAllreduce:
      return Error(HVD_ERR_INTERNAL, "allreduce routed outside the fusion path");
  }
  if (timeline_->enabled()) {
    timeline_->Span(t.name, OpTypeName(req.type), t0, Clock::now());
  }
  return Status::Ok();
}

// Reduced in place in scratch memory, of which this rank keeps its rows.
Status Executor::HostReducescatter(OpRequest& req) {
  const int n = size_;
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const size_t esize = DtypeSize(t.dtype);
  const size_t row = RowBytes(t);
  const int me = rank_;
  const size_t count = static_cast<size_t>(t.NumElements());
  const size_t row_elems = row / esize;
  const ScatterRows sr = ReducescatterRows(t.shape[0], n, me, row_elems);
  const int64_t my_rows = sr.mine, first_row = sr.first;
  // Scratch for the in-place reduction: the fusion buffer where it is
  // big enough already, else a pool buffer handed back right after (the
  // pool keeps it only within its cap), so that one large reducescatter
  // does not pin an input-sized buffer for the context's life.
  const size_t scratch_bytes = count * esize;
  struct Scratch {
    BufferPool* pool;
    ByteBuffer b;
    ~Scratch() {
      if (b.capacity() > 0) pool->Give(std::move(b));
    }
  } scratch{results_.get(), ByteBuffer()};
  uint8_t* buf = nullptr;
  if (scratch_bytes <= fusion_.capacity()) {
    buf = fusion_.Reserve(scratch_bytes);
  } else {
    scratch.b = results_->Take(scratch_bytes);
    if (scratch.b.capacity() >= scratch_bytes) buf = scratch.b.data();
  }
  if (buf == nullptr) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(scratch_bytes) +
                                        " bytes of reducescatter scratch");
  }
  Prepare(buf, t.input, count, t.dtype, req.prescale);
  if (transport_->has_reducescatter()) {
    HVD_CHECK(transport_->Reducescatter(buf, sr.counts.data(), t.dtype, TransportOp(req.reduce_op)));
  } else {
    // A version 1 plugin: the whole reduction, of which this rank keeps its rows.
    HVD_CHECK(transport_->Allreduce(buf, count, t.dtype, TransportOp(req.reduce_op)));
  }
  HVD_CHECK(TakeOutput(&h, static_cast<size_t>(my_rows) * row));
  Finalize(h.output.data(), buf + static_cast<size_t>(first_row) * row,
           static_cast<size_t>(my_rows) * row_elems, t.dtype, req.reduce_op, req.postscale, n);
  h.output_shape = t.shape.vec();
  h.output_shape[0] = my_rows;
  return Status::Ok();
}

}  // namespace hvd
