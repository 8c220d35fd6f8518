#include "core/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "algorithms/adasum.h"
#include "common/kernels.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

namespace {

// Result = post-op scaling of a reduced buffer (AVERAGE, postscale) while
// copying src -> dst (dst may equal src).
void Finalize(void* dst, const void* src, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
              double postscale, int size) {
  if (op == HVD_AVERAGE && !IsFloatingDtype(dtype)) {
    if (dst != src) std::memcpy(dst, src, count * DtypeSize(dtype));
    DivideInPlace(dst, count, dtype, size);
    ScaleInPlace(dst, count, dtype, postscale);
    return;
  }
  double f = postscale;
  if (op == HVD_AVERAGE) f /= size;
  if (dst == src) {
    ScaleInPlace(dst, count, dtype, f);
  } else {
    ScaleCopy(dst, src, count, dtype, f);
  }
}

// dst = src * prescale (dst may equal src).
void Prepare(void* dst, const void* src, size_t count, hvd_dtype_t dtype, double prescale) {
  if (dst == src) {
    ScaleInPlace(dst, count, dtype, prescale);
  } else if (count > 0) {
    ScaleCopy(dst, src, count, dtype, prescale);
  }
}

hvd_reduce_op_t TransportOp(hvd_reduce_op_t op) { return op == HVD_AVERAGE ? HVD_SUM : op; }

}  // namespace

// HVD_ADASUM: tensor by tensor (dot products and norms are per tensor, so a
// fused batch is never combined as one concatenated vector): prescale into
// the output, allgatherv every rank's copy into the fusion buffer (size x
// the tensor's bytes), combine them with the tree of algorithms/adasum.h
// (the same bits on every rank), postscale.
Status Executor::RunAdasumBatch(std::vector<OpRequest*>& batch) {
  const OpRequest& first = *batch.front();
  const hvd_dtype_t dtype = first.tensors.front().dtype;
  const size_t esize = DtypeSize(dtype);
  if (!AdasumSupportsDtype(dtype)) {
    return Error(HVD_ERR_INVALID_ARGUMENT,
                 std::string("adasum is not defined for dtype ") + DtypeName(dtype));
  }
  std::vector<size_t> recv(static_cast<size_t>(size_));
  for (OpRequest* r : batch) {
    for (TensorSpec& t : r->tensors) {
      auto t0 = Clock::now();
      const size_t n = static_cast<size_t>(t.NumElements());
      const size_t bytes = n * esize;
      if (n == 0) continue;
      Prepare(t.output, t.input, n, dtype, first.prescale);
      uint8_t* buf = fusion_.Reserve(bytes * static_cast<size_t>(size_));
      if (buf == nullptr) {
        return Error(HVD_ERR_NO_MEMORY, "cannot grow the fusion buffer for adasum of '" +
                                            t.name + "'");
      }
      recv.assign(static_cast<size_t>(size_), bytes);
      HVD_CHECK(transport_->Allgatherv(t.output, buf, recv.data()));
      AdasumCombine(buf, size_, n, dtype, t.output);
      Finalize(t.output, t.output, n, dtype, HVD_ADASUM, first.postscale, size_);
      if (timeline_->enabled()) {
        timeline_->Span(t.name, "ADASUM_ALLREDUCE", t0, Clock::now(),
                        "{\"bytes\":" + std::to_string(bytes) + "}");
      }
    }
  }
  return Status::Ok();
}

Status Executor::RunAllreduceBatch(std::vector<OpRequest*>& batch) {
  const OpRequest& first = *batch.front();
  const hvd_dtype_t dtype = first.tensors.front().dtype;
  const size_t esize = DtypeSize(dtype);
  const hvd_reduce_op_t op = first.reduce_op;
  if (op == HVD_ADASUM) return RunAdasumBatch(batch);
  auto t0 = Clock::now();

  size_t total = 0;
  size_t ntensors = 0;
  for (OpRequest* r : batch) {
    for (const TensorSpec& t : r->tensors) {
      total += static_cast<size_t>(t.NumElements());
      ++ntensors;
    }
  }

  if (ntensors == 1) {
    // Unfused: reduce straight in the caller's output buffer.
    TensorSpec& t = batch.front()->tensors.front();
    size_t n = static_cast<size_t>(t.NumElements());
    Prepare(t.output, t.input, n, dtype, first.prescale);
    HVD_CHECK(transport_->Allreduce(t.output, n, dtype, TransportOp(op)));
    Finalize(t.output, t.output, n, dtype, op, first.postscale, size_);
    if (timeline_->enabled()) {
      timeline_->Span(t.name, "ALLREDUCE", t0, Clock::now(),
                     "{\"bytes\":" + std::to_string(n * esize) + "}");
    }
    return Status::Ok();
  }

  if (transport_->allreduce_spans()) {
    // The transport reads and writes the outputs where they lie (shared
    // memory): no fusion buffer, no copy in or out.
    spans_.clear();
    for (OpRequest* r : batch) {
      for (TensorSpec& t : r->tensors) {
        size_t n = static_cast<size_t>(t.NumElements());
        Prepare(t.output, t.input, n, dtype, first.prescale);
        spans_.push_back({t.output, n});
      }
    }
    HVD_CHECK(transport_->AllreduceSpans(spans_.data(), spans_.size(), dtype, TransportOp(op)));
    for (OpRequest* r : batch) {
      for (TensorSpec& t : r->tensors) {
        Finalize(t.output, t.output, static_cast<size_t>(t.NumElements()), dtype, op,
                 first.postscale, size_);
      }
    }
    if (timeline_->enabled()) {
      auto t3 = Clock::now();
      std::string args = "{\"fused_tensors\":" + std::to_string(ntensors) +
                         ",\"bytes\":" + std::to_string(total * esize) + ",\"in_place\":true}";
      for (OpRequest* r : batch) {
        for (const TensorSpec& t : r->tensors) {
          timeline_->Span(t.name, "ALLREDUCE", t0, t3, args);
        }
      }
    }
    return Status::Ok();
  }

  uint8_t* buf = fusion_.Reserve(total * esize);
  if (buf == nullptr) return Error(HVD_ERR_NO_MEMORY, "cannot grow the fusion buffer");
  size_t off = 0;
  for (OpRequest* r : batch) {
    for (const TensorSpec& t : r->tensors) {
      size_t n = static_cast<size_t>(t.NumElements());
      Prepare(buf + off, t.input, n, dtype, first.prescale);
      off += n * esize;
    }
  }
  auto t1 = Clock::now();
  HVD_CHECK(transport_->Allreduce(buf, total, dtype, TransportOp(op)));
  auto t2 = Clock::now();
  off = 0;
  for (OpRequest* r : batch) {
    for (TensorSpec& t : r->tensors) {
      size_t n = static_cast<size_t>(t.NumElements());
      Finalize(t.output, buf + off, n, dtype, op, first.postscale, size_);
      off += n * esize;
    }
  }
  if (timeline_->enabled()) {
    auto t3 = Clock::now();
    std::string args = "{\"fused_tensors\":" + std::to_string(ntensors) +
                       ",\"bytes\":" + std::to_string(total * esize) + "}";
    for (OpRequest* r : batch) {
      for (const TensorSpec& t : r->tensors) {
        timeline_->Span(t.name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
        timeline_->Span(t.name, "ALLREDUCE", t1, t2, args);
        timeline_->Span(t.name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
      }
    }
  }
  return Status::Ok();
}

Status Executor::RunOne(OpRequest& req, const Response& resp) {
  const int n = size_;
  const int me = rank_;
  auto t0 = Clock::now();
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const size_t esize = DtypeSize(t.dtype);
  // Bytes of one row (everything but the first dimension).
  size_t row = esize;
  for (size_t d = 1; d < t.shape.size(); ++d) row *= static_cast<size_t>(t.shape[d]);

  switch (req.type) {
    case OpType::kBroadcast: {
      size_t bytes = static_cast<size_t>(t.NumElements()) * esize;
      if (me == req.root && t.output != t.input && bytes > 0) std::memcpy(t.output, t.input, bytes);
      HVD_CHECK(transport_->Broadcast(t.output, bytes, req.root));
      break;
    }
    case OpType::kAllgather:
    case OpType::kProcessSet: {
      std::vector<size_t> recv(static_cast<size_t>(n));
      int64_t rows = 0;
      size_t total = 0;
      for (int r = 0; r < n; ++r) {
        int64_t rr = resp.desc(r).shapes[0][0];
        recv[r] = static_cast<size_t>(rr) * row;
        rows += rr;
        total += recv[r];
      }
      HVD_CHECK(TakeOutput(&h, total));
      HVD_CHECK(transport_->Allgatherv(t.input, h.output.data(), recv.data()));
      h.output_shape = t.shape;
      h.output_shape[0] = rows;
      break;
    }
    case OpType::kAlltoall: {
      std::vector<size_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
      h.recv_splits.assign(static_cast<size_t>(n), 0);
      int64_t rows = 0;
      size_t total = 0;
      for (int r = 0; r < n; ++r) {
        send[r] = static_cast<size_t>(req.splits[r]) * row;
        int64_t from_r = resp.desc(r).splits[me];
        h.recv_splits[r] = from_r;
        recv[r] = static_cast<size_t>(from_r) * row;
        rows += from_r;
        total += recv[r];
      }
      HVD_CHECK(TakeOutput(&h, total));
      HVD_CHECK(transport_->Alltoallv(t.input, send.data(), h.output.data(), recv.data()));
      h.output_shape = t.shape;
      h.output_shape[0] = rows;
      break;
    }
    case OpType::kReducescatter: {
      const size_t count = static_cast<size_t>(t.NumElements());
      const int64_t rows = t.shape[0];
      const int64_t base = rows / n, extra = rows % n;
      const int64_t my_rows = base + (me < extra ? 1 : 0);
      const int64_t first_row = me * base + std::min<int64_t>(me, extra);
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
        std::vector<size_t> counts(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          counts[r] = static_cast<size_t>(base + (r < extra ? 1 : 0)) * (row / esize);
        }
        HVD_CHECK(transport_->Reducescatter(buf, counts.data(), t.dtype, TransportOp(req.reduce_op)));
      } else {
        // A version 1 plugin: the whole reduction, of which this rank keeps its rows.
        HVD_CHECK(transport_->Allreduce(buf, count, t.dtype, TransportOp(req.reduce_op)));
      }
      const size_t row_elems = row / esize;
      HVD_CHECK(TakeOutput(&h, static_cast<size_t>(my_rows) * row));
      Finalize(h.output.data(), buf + static_cast<size_t>(first_row) * row,
               static_cast<size_t>(my_rows) * row_elems, t.dtype, req.reduce_op, req.postscale, n);
      h.output_shape = t.shape;
      h.output_shape[0] = my_rows;
      break;
    }
    case OpType::kBarrier:
      HVD_CHECK(transport_->Barrier());
      break;
    case OpType::kJoin:
    case OpType::kCloseSet:
      break;  // negotiation did the work: every rank has joined
    case OpType::kAllreduce:
      return Error(HVD_ERR_INTERNAL, "allreduce routed outside the fusion path");
  }
  if (timeline_->enabled()) {
    timeline_->Span(t.name, OpTypeName(req.type), t0, Clock::now());
  }
  return Status::Ok();
}

Status Executor::TakeOutput(Handle* h, size_t bytes) {
  h->output = results_->Take(bytes);
  h->output_pool = results_;
  if (h->output.capacity() < bytes) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes for the result");
  }
  return Status::Ok();
}

}  // namespace hvd
