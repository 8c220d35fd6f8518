// Allreduce batches of host tensors: one tensor in place, spans the
// transport reduces where they lie, the fusion buffer, and Adasum.
#include "core/exec/executor.h"

#include <chrono>
#include <cstring>
#include <string>

#include "algorithms/adasum.h"
#include "common/kernels.h"
#include "core/exec/layout.h"
#include "core/exec/scaling.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

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

Status Executor::FinishPiggybacked(OpRequest& req, const void* reduced, size_t bytes,
                                   int64_t rows, Clock::time_point t0) {
  TensorSpec& t = req.tensors.front();
  const size_t n = static_cast<size_t>(t.NumElements());
  const char* what = "ALLREDUCE";
  if (req.type == OpType::kBroadcast) {
    // The root's bytes (the root's own too: its output may be elsewhere).
    std::memcpy(t.output, reduced, bytes);
    what = "BROADCAST";
  } else if (req.type == OpType::kAllgather) {
    // Every rank's part, in rank order, into the handle's result.
    Handle& h = *req.handle;
    HVD_CHECK(TakeOutput(&h, bytes));
    if (bytes > 0) std::memcpy(h.output.data(), reduced, bytes);
    h.output_shape = t.shape.vec();
    h.output_shape[0] = rows;
    what = "ALLGATHER";
  } else {
    Finalize(t.output, reduced, n, t.dtype, req.reduce_op, req.postscale, size_);
  }
  if (timeline_->enabled()) {
    timeline_->Span(t.name, what, t0, Clock::now(),
                    "{\"bytes\":" + std::to_string(bytes) + ",\"in_negotiation\":true}");
  }
  return Status::Ok();
}

// One batch of host tensors: reduced where it lies when it is one tensor
// or the transport reads spans, else through the fusion buffer.
Status Executor::RunHostAllreduceBatch(std::vector<OpRequest*>& batch) {
  if (batch.front()->reduce_op == HVD_ADASUM) return RunAdasumBatch(batch);
  const auto t0 = Clock::now();
  if (size_ == 1) {
    HostAllreduceAlone(batch, t0);
    return Status::Ok();
  }
  const BatchSize size = SizeOf(batch);
  if (size.tensors == 1) return HostAllreduceOne(batch, t0);
  const size_t esize = DtypeSize(batch.front()->tensors.front().dtype);
  if (transport_->allreduce_spans(size.elements * esize)) {
    return HostAllreduceSpans(batch, size, t0);
  }
  return HostAllreduceFused(batch, size, t0);
}

// Unfused: reduce straight in the caller's output buffer.
Status Executor::HostAllreduceOne(std::vector<OpRequest*>& batch, Clock::time_point t0) {
  const OpRequest& first = *batch.front();
  TensorSpec& t = batch.front()->tensors.front();
  const hvd_dtype_t dtype = t.dtype;
  const hvd_reduce_op_t op = first.reduce_op;
  size_t n = static_cast<size_t>(t.NumElements());
  Prepare(t.output, t.input, n, dtype, first.prescale);
  HVD_CHECK(transport_->Allreduce(t.output, n, dtype, TransportOp(op)));
  Finalize(t.output, t.output, n, dtype, op, first.postscale, size_);
  if (timeline_->enabled()) {
    timeline_->Span(t.name, "ALLREDUCE", t0, Clock::now(),
                    "{\"bytes\":" + std::to_string(n * DtypeSize(dtype)) + "}");
  }
  return Status::Ok();
}

// One rank: a reduction of one contribution is that contribution (any op,
// AVERAGE divides by 1), so each tensor is only scaled into its output: no
// transport, no fusion buffer (two copies of every byte through it, where a
// single-process run of a training script spent most of its step).
void Executor::HostAllreduceAlone(std::vector<OpRequest*>& batch, Clock::time_point t0) {
  for (OpRequest* r : batch) {
    for (TensorSpec& t : r->tensors) {
      const size_t n = static_cast<size_t>(t.NumElements());
      Prepare(t.output, t.input, n, t.dtype, r->prescale);
      Finalize(t.output, t.output, n, t.dtype, r->reduce_op, r->postscale, 1);
    }
  }
  if (timeline_->enabled()) {
    const auto t1 = Clock::now();
    for (OpRequest* r : batch) {
      for (const TensorSpec& t : r->tensors) {
        timeline_->Span(t.name, "ALLREDUCE", t0, t1,
                        "{\"bytes\":" +
                            std::to_string(static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype)) +
                            ",\"alone\":true}");
      }
    }
  }
}

// The transport reads and writes the outputs where they lie (shared
// memory, or the ring over point-to-point): no fusion buffer, no copy in
// or out.
Status Executor::HostAllreduceSpans(std::vector<OpRequest*>& batch, BatchSize size,
                                    Clock::time_point t0) {
  const OpRequest& first = *batch.front();
  const hvd_dtype_t dtype = first.tensors.front().dtype;
  const hvd_reduce_op_t op = first.reduce_op;
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
    const auto t3 = Clock::now();
    const std::string args = FusedArgs(size, DtypeSize(dtype), ",\"in_place\":true");
    for (OpRequest* r : batch) {
      for (const TensorSpec& t : r->tensors) timeline_->Span(t.name, "ALLREDUCE", t0, t3, args);
    }
  }
  return Status::Ok();
}

// Through the fusion buffer: prescaled copies in, one allreduce, the
// results out with the postscale.
Status Executor::HostAllreduceFused(std::vector<OpRequest*>& batch, BatchSize size,
                                    Clock::time_point t0) {
  const OpRequest& first = *batch.front();
  const hvd_dtype_t dtype = first.tensors.front().dtype;
  const size_t esize = DtypeSize(dtype);
  const hvd_reduce_op_t op = first.reduce_op;
  uint8_t* buf = fusion_.Reserve(size.elements * esize);
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
  HVD_CHECK(transport_->Allreduce(buf, size.elements, dtype, TransportOp(op)));
  auto t2 = Clock::now();
  off = 0;
  for (OpRequest* r : batch) {
    for (TensorSpec& t : r->tensors) {
      size_t n = static_cast<size_t>(t.NumElements());
      Finalize(t.output, buf + off, n, dtype, op, first.postscale, size_);
      off += n * esize;
    }
  }
  if (timeline_->enabled()) FusedSpans(batch, {t0, t1, t2, Clock::now()}, FusedArgs(size, esize));
  return Status::Ok();
}

}  // namespace hvd
