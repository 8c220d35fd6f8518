#include "core/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "algorithms/adasum.h"
#include "common/kernels.h"
#include "hvd_transport.h"

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

void Executor::FinishPiggybacked(OpRequest& req, const void* reduced, Clock::time_point t0) {
  TensorSpec& t = req.tensors.front();
  const size_t n = static_cast<size_t>(t.NumElements());
  Finalize(t.output, reduced, n, t.dtype, req.reduce_op, req.postscale, size_);
  if (timeline_->enabled()) {
    timeline_->Span(t.name, "ALLREDUCE", t0, Clock::now(),
                    "{\"bytes\":" + std::to_string(n * DtypeSize(t.dtype)) +
                        ",\"in_negotiation\":true}");
  }
}

Status Executor::RunHostAllreduceBatch(std::vector<OpRequest*>& batch) {
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

  if (transport_->allreduce_spans(total * esize)) {
    // The transport reads and writes the outputs where they lie (shared
    // memory, or the ring over point-to-point): no fusion buffer, no copy
    // in or out.
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

// ---- the byte counts of collectives with owned results --------------------
//
// From the negotiated descriptors, the same on the host path and the device
// path: one row is everything but the first dimension.

namespace {

size_t RowBytes(const TensorSpec& t) {
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
Counts AllgatherCounts(const Response& resp, int n, size_t row) {
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
Counts AlltoallCounts(const OpRequest& req, const Response& resp, int n, int me, size_t row,
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
ScatterRows ReducescatterRows(int64_t rows, int n, int me, size_t row_elems) {
  ScatterRows s;
  const int64_t base = rows / n, extra = rows % n;
  s.mine = base + (me < extra ? 1 : 0);
  s.first = me * base + std::min<int64_t>(me, extra);
  s.counts.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) s.counts[r] = static_cast<size_t>(base + (r < extra ? 1 : 0)) * row_elems;
  return s;
}

}  // namespace

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
    case OpType::kReducescatter: {
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
      break;
    }
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

// ---- CUDA tensors -----------------------------------------------------------

namespace {

constexpr size_t kStageAlign = 64;

size_t AlignUp(size_t n) { return (n + kStageAlign - 1) / kStageAlign * kStageAlign; }

size_t TensorBytes(const TensorSpec& t) {
  return static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype);
}

hvd_transport_buffer_t DeviceBuffer(void* data, size_t bytes, const TensorSpec& t) {
  hvd_transport_buffer_t b{};
  b.data = data;
  b.bytes = bytes;
  b.memory_type = HVD_MEMORY_CUDA;
  b.device = t.device;
  b.stream = t.stream;
  return b;
}

}  // namespace

Executor::~Executor() {
  const CudaRuntime* rt = cuda_.loaded();
  if (rt == nullptr) return;
  (void)SettleStaging();
  if (stage_ != nullptr) rt->FreeHost(stage_);
  for (const auto* list : {&dev_fusion_, &dev_zeros_}) {
    for (const DeviceFusionBuffer& b : *list) {
      CudaDeviceScope scope(*rt, b.device);
      if (scope.status().ok()) rt->Free(b.data);
    }
  }
}

Status Executor::RunAllreduceBatch(std::vector<OpRequest*>& batch) {
  Status s = RunAllreduceBatchOn(batch);
  if (s.ok() && async_) s = FenceHandles(batch.data(), batch.size());
  return s;
}

Status Executor::RunOne(OpRequest& req, const Response& resp) {
  Status s = RunOneOn(req, resp);
  if (s.ok() && async_) {
    OpRequest* one = &req;
    s = FenceHandles(&one, 1);
  }
  return s;
}

Status Executor::FenceHandles(OpRequest* const* reqs, size_t n) {
  std::shared_ptr<const CudaRuntime> rt;  // loaded only where a CUDA tensor ran
  std::shared_ptr<CudaFence> last;        // shared while requests keep to one stream
  for (size_t i = 0; i < n; ++i) {
    OpRequest& req = *reqs[i];
    const TensorSpec* lead = nullptr;
    for (const TensorSpec& t : req.tensors) {
      if (t.device != HVD_DEVICE_CPU) {
        lead = &t;
        break;
      }
    }
    if (lead == nullptr || !req.handle) continue;
    if (!rt) rt = cuda_.shared();
    if (!rt) return Error(HVD_ERR_INTERNAL, "CUDA tensors ran before the CUDA runtime loaded");
    bool one_stream = true;
    for (const TensorSpec& t : req.tensors) {
      if (t.device == HVD_DEVICE_CPU || t.stream == lead->stream) continue;
      // The handle's one event covers every tensor of the group.
      one_stream = false;
      CudaDeviceScope scope(*rt, lead->device);
      HVD_CHECK(scope.status());
      HVD_CHECK(rt->StreamWaitStream(lead->stream, t.stream));
    }
    if (!one_stream || !last || last->device() != lead->device || last->stream() != lead->stream) {
      HVD_ASSIGN_OR_RETURN(last, CudaFence::Record(rt, lead->device, lead->stream));
    }
    req.handle->cuda_fence = last;
  }
  return Status::Ok();
}

Status Executor::SettleStaging() {
  Status first;
  for (const std::shared_ptr<CudaFence>& f : stage_fences_) {
    Status s = f->Synchronize();
    if (!s.ok() && first.ok()) first = s;
  }
  stage_fences_.clear();
  return first;
}

Status Executor::AfterLastDeviceWork(const CudaRuntime& rt, int device, void* stream) {
  if (!last_device_.set || last_device_.device != device || last_device_.stream == stream) {
    return Status::Ok();
  }
  return rt.StreamWaitStream(stream, last_device_.stream);
}

Status Executor::EndOnStream(const CudaRuntime& rt, int device, void* stream) {
  if (!async_) return rt.WaitForStream(stream);
  last_device_.set = true;
  last_device_.device = device;
  last_device_.stream = stream;
  return Status::Ok();
}

Status Executor::RunAllreduceBatchOn(std::vector<OpRequest*>& batch) {
  stage_list_.clear();
  bool zeros_for_device = false;
  for (OpRequest* r : batch) {
    zeros_for_device = zeros_for_device || r->zeros_device != HVD_DEVICE_CPU;
    for (TensorSpec& t : r->tensors) {
      if (t.device != HVD_DEVICE_CPU) stage_list_.push_back(&t);
    }
  }
  if (!device_status_.ok() && (zeros_for_device || !stage_list_.empty())) return device_status_;
  if (zeros_for_device) {
    // This rank joined; the others' tensors are CUDA memory. Where they go
    // to a device transport, so do this rank's zeros (else the others stage
    // theirs, and host zeros match).
    Comm* dev = DeviceComm();
    if (dev != nullptr && (dev == transport_ || DeviceServes(batch, *dev))) {
      HVD_CHECK(ZerosToDevice(batch));
      return RunDeviceAllreduce(batch, *dev);
    }
  }
  if (stage_list_.empty()) return RunHostAllreduceBatch(batch);
  if (Comm* dev = DeviceComm()) {
    // With no host transport to stage over, the device transport is the
    // only way (and says what it cannot do).
    if (dev == transport_ || DeviceServes(batch, *dev)) return RunDeviceAllreduce(batch, *dev);
  }
  stage_in_.assign(stage_list_.size(), true);
  stage_out_.assign(stage_list_.size(), true);
  HVD_CHECK(Stage(stage_list_, stage_in_, stage_out_));
  Status s = RunHostAllreduceBatch(batch);
  Status u = Unstage(s.ok());
  return s.ok() ? u : s;
}

Status Executor::RunOneOn(OpRequest& req, const Response& resp) {
  TensorSpec& t = req.tensors.front();
  if (t.device == HVD_DEVICE_CPU) return RunHostOne(req, resp);
  if (!device_status_.ok()) return device_status_;
  // A transport that takes CUDA memory runs every collective of CUDA
  // tensors (a host transport beside it, if any, carries the host ones),
  // except reductions of a dtype it does not reduce, staged over that one.
  if (Comm* dev = DeviceComm()) {
    if (dev == transport_ || req.type != OpType::kReducescatter || dev->device_reduces(t.dtype)) {
      return RunDeviceOne(req, resp, *dev);
    }
  }
  stage_list_.assign(1, &t);
  // Broadcast: only the root's data matters; every rank's output is written.
  const bool bcast = req.type == OpType::kBroadcast;
  stage_in_.assign(1, !bcast || rank_ == req.root);
  stage_out_.assign(1, bcast);  // other results are the handle's (host memory)
  HVD_CHECK(Stage(stage_list_, stage_in_, stage_out_));
  Status s = RunHostOne(req, resp);
  Status u = Unstage(s.ok());
  return s.ok() ? u : s;
}

Status Executor::SynchronizeStreams(const CudaRuntime& rt, bool fence) {
  Status first;
  std::shared_ptr<const CudaRuntime> shared = fence ? cuda_.shared() : nullptr;
  for (size_t i = 0; i < streams_.size(); ++i) {
    bool seen = false;
    for (size_t j = 0; j < i && !seen; ++j) seen = streams_[j] == streams_[i];
    if (seen) continue;
    if (fence) {
      auto f = CudaFence::Record(shared, streams_[i].first, streams_[i].second);
      if (f.ok()) {
        stage_fences_.push_back(std::move(f).value());
        continue;
      }
    }
    // No fence could be made, or none was asked for: the host waits.
    CudaDeviceScope scope(rt, streams_[i].first);
    Status s = scope.status();
    if (s.ok()) s = rt.StreamSynchronize(streams_[i].second);
    if (!s.ok() && first.ok()) first = s;
  }
  streams_.clear();
  return first;
}

Status Executor::Stage(std::vector<TensorSpec*>& tensors, const std::vector<bool>& copy_in,
                       const std::vector<bool>& copy_out) {
  auto r = cuda_.Get();
  if (!r.ok()) return r.status();
  const CudaRuntime& rt = *r.value();
  // Copies back from the last run may still read the buffer.
  HVD_CHECK(SettleStaging().Wrap("waiting for the last results' copies to CUDA memory"));
  size_t total = 0;
  for (const TensorSpec* t : tensors) total += AlignUp(TensorBytes(*t));
  if (total > stage_cap_) {
    const size_t want = std::max(total, stage_cap_ * 2);
    rt.FreeHost(stage_);
    stage_ = nullptr;
    stage_cap_ = 0;
    void* p = nullptr;
    Status s = rt.HostAlloc(&p, want);
    if (!s.ok() || p == nullptr) {
      return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(want) +
                                          " bytes of page-locked staging memory for CUDA "
                                          "tensors: " + s.message());
    }
    stage_ = p;
    stage_cap_ = want;
  }
  staged_.clear();
  streams_.clear();
  uint8_t* base = static_cast<uint8_t*>(stage_);
  size_t off = 0;
  Status s;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorSpec* t = tensors[i];
    const size_t bytes = TensorBytes(*t);
    staged_.push_back({t, t->input, t->output, bytes, copy_out[i]});
    uint8_t* host = bytes > 0 ? base + off : nullptr;
    off += AlignUp(bytes);
    if (copy_in[i] && bytes > 0 && s.ok()) {
      CudaDeviceScope scope(rt, t->device);
      s = scope.status();
      if (s.ok()) s = rt.CopyToHost(host, t->input, bytes, t->stream);
      if (s.ok()) streams_.emplace_back(t->device, t->stream);
    }
    t->input = host;
    if (copy_out[i]) t->output = host;
  }
  // The collective reads the staged data: the copies (and the work the
  // callers ordered before them on their streams) must have finished.
  Status sync = SynchronizeStreams(rt);
  if (s.ok()) s = sync;
  if (!s.ok()) {
    (void)Unstage(false);
    return s.Wrap("copying CUDA tensors to host memory");
  }
  return Status::Ok();
}

Status Executor::Unstage(bool ok) {
  const CudaRuntime* rt = cuda_.loaded();
  Status s;
  streams_.clear();
  if (ok && rt != nullptr) {
    for (const StagedTensor& st : staged_) {
      if (!st.copy_out || st.bytes == 0) continue;
      CudaDeviceScope scope(*rt, st.t->device);
      s = scope.status();
      if (s.ok()) s = rt->CopyToDevice(st.output, st.t->output, st.bytes, st.t->stream);
      if (!s.ok()) break;
      streams_.emplace_back(st.t->device, st.t->stream);
    }
    // The handle completes once the results are in device memory; with
    // stream-ordered completion once they are queued, the staging buffer
    // written again only after them (SettleStaging). After a failure
    // nothing may stay queued on the buffer: the host waits.
    Status sync = SynchronizeStreams(*rt, /*fence=*/async_ && s.ok());
    if (s.ok()) s = sync;
  }
  for (const StagedTensor& st : staged_) {
    st.t->input = st.input;
    st.t->output = st.output;
  }
  staged_.clear();
  return s.ok() ? s : s.Wrap("copying results back to CUDA memory");
}

// ---- CUDA tensors on a transport that takes device memory -------------------
//
// The result's scaling as the host path's Finalize does it: AVERAGE divides
// integers by the size (then postscale), and folds 1/size into the factor
// for floating types.

namespace {

hvd_cuda_scale_t FinishScale(hvd_dtype_t dtype, hvd_reduce_op_t op, double postscale, int size) {
  hvd_cuda_scale_t how{};
  how.dtype = dtype;
  how.divisor = 1;
  how.scale = postscale;
  if (op == HVD_AVERAGE) {
    if (IsFloatingDtype(dtype)) {
      how.scale = postscale / size;
    } else {
      how.divisor = size;
    }
  }
  return how;
}

bool Identity(const hvd_cuda_scale_t& how) {
  return how.dtype == HVD_BOOL || (how.scale == 1.0 && how.divisor == 1);
}

hvd_cuda_scale_t Prescale(hvd_dtype_t dtype, double prescale) {
  hvd_cuda_scale_t how{};
  how.dtype = dtype;
  how.divisor = 1;
  how.scale = prescale;
  return how;
}

}  // namespace

bool Executor::DeviceServes(const std::vector<OpRequest*>& batch, const Comm& dev) const {
  const OpRequest& first = *batch.front();
  if (first.reduce_op == HVD_ADASUM) return false;  // Adasum's tree runs on the host
  return first.tensors.empty() || dev.device_reduces(first.tensors.front().dtype);
}

Result<uint8_t*> Executor::DeviceBufferOf(std::vector<DeviceFusionBuffer>* list,
                                          const CudaRuntime& rt, int device, size_t bytes) {
  DeviceFusionBuffer* b = nullptr;
  for (DeviceFusionBuffer& x : *list) {
    if (x.device == device) b = &x;
  }
  if (b == nullptr) {
    list->push_back({device, nullptr, 0});
    b = &list->back();
  }
  if (b->capacity >= bytes) return static_cast<uint8_t*>(b->data);
  // Earlier runs finished (each waits for its stream), so the old buffer
  // is free; cudaFree also waits for the device.
  rt.Free(b->data);
  b->data = nullptr;
  b->capacity = 0;
  constexpr size_t kGrain = 2u << 20;
  const size_t want = (std::max(bytes, b->capacity + b->capacity / 2) + kGrain - 1) / kGrain * kGrain;
  void* p = nullptr;
  Status s = rt.Malloc(&p, want);
  if (!s.ok() || p == nullptr) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(want) +
                                        " bytes of device fusion buffer on CUDA device " +
                                        std::to_string(device) + ": " + s.message());
  }
  b->data = p;
  b->capacity = want;
  return static_cast<uint8_t*>(p);
}

Status Executor::ZerosToDevice(std::vector<OpRequest*>& batch) {
  auto r = cuda_.Get();
  if (!r.ok()) return r.status().Wrap("a joined rank's zeros for CUDA tensors");
  const CudaRuntime& rt = *r.value();
  const int device = local_rank_ % rt.device_count();
  size_t total = 0;
  for (OpRequest* req : batch) {
    if (req->zeros_device == HVD_DEVICE_CPU) continue;
    for (const TensorSpec& t : req->tensors) total += AlignUp(TensorBytes(t));
  }
  CudaDeviceScope scope(rt, device);
  HVD_CHECK(scope.status());
  HVD_ASSIGN_OR_RETURN(uint8_t* buf, DeviceBufferOf(&dev_zeros_, rt, device, total));
  size_t off = 0;
  for (OpRequest* req : batch) {
    if (req->zeros_device == HVD_DEVICE_CPU) continue;
    for (TensorSpec& t : req->tensors) {
      const size_t bytes = TensorBytes(t);
      if (bytes > 0) HVD_CHECK(rt.CopyToDevice(buf + off, t.input, bytes, nullptr));
      t.input = t.output = buf + off;
      t.device = device;
      t.stream = nullptr;
      off += AlignUp(bytes);
    }
    req->zeros_device = HVD_DEVICE_CPU;  // moved
  }
  return Status::Ok();
}

Status Executor::RunDeviceAllreduce(std::vector<OpRequest*>& batch, Comm& dev) {
  auto r = cuda_.Get();
  if (!r.ok()) return r.status();
  const CudaRuntime& rt = *r.value();
  const OpRequest& first = *batch.front();
  if (first.reduce_op == HVD_ADASUM) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "Adasum of CUDA tensors needs a host transport to stage over (HVD_CPU_TRANSPORT "
                 "beside the device transport)");
  }
  if (!dev.device_reduces(first.tensors.front().dtype)) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "allreduce '" + first.tensors.front().name + "' of " +
                     DtypeName(first.tensors.front().dtype) +
                     " CUDA tensors: the device transport does not reduce that dtype, and there "
                     "is no host transport beside it to stage over (HVD_CPU_TRANSPORT)");
  }
  size_t total = 0, ntensors = 0;
  int device = -1;
  for (OpRequest* req : batch) {
    for (TensorSpec& t : req->tensors) {
      if (t.device == HVD_DEVICE_CPU) {
        return Error(HVD_ERR_UNSUPPORTED, "allreduce '" + t.name +
                                              "': host memory on a transport that takes CUDA "
                                              "memory (a joined rank's zeros)");
      }
      if (device >= 0 && t.device != device) {
        return Error(HVD_ERR_INTERNAL, "a fused batch of CUDA tensors spans devices " +
                                           std::to_string(device) + " and " +
                                           std::to_string(t.device));
      }
      device = t.device;
      total += static_cast<size_t>(t.NumElements());
      ++ntensors;
    }
  }
  auto kr = cuda_.Kernels();
  const CudaKernels* k = kr.ok() ? kr.value() : nullptr;
  CudaDeviceScope scope(rt, device);
  HVD_CHECK(scope.status());
  if (ntensors > 1 && k != nullptr) {
    return DeviceAllreduceFused(batch, dev, rt, *k, total, ntensors);
  }
  // One tensor, or no kernels to fuse with: tensor by tensor, each on its
  // own stream.
  for (OpRequest* req : batch) {
    for (TensorSpec& t : req->tensors) {
      Status s = DeviceAllreduceOne(t, first, dev, rt, k);
      if (!s.ok() && k == nullptr && s.code() == HVD_ERR_UNSUPPORTED) {
        return s.Wrap(kr.status().message());
      }
      HVD_CHECK(s);
    }
  }
  return Status::Ok();
}

Status Executor::DeviceAllreduceOne(TensorSpec& t, const OpRequest& first, Comm& dev,
                                    const CudaRuntime& rt, const CudaKernels* k) {
  auto t0 = Clock::now();
  const hvd_dtype_t dtype = t.dtype;
  const hvd_reduce_op_t op = first.reduce_op;
  const size_t n = static_cast<size_t>(t.NumElements());
  const size_t bytes = n * DtypeSize(dtype);
  if (bytes == 0) return Status::Ok();
  HVD_CHECK(AfterLastDeviceWork(rt, t.device, t.stream));
  // AVERAGE of a floating type with no postscale goes to the transport as
  // it is (NCCL's ncclAvg); otherwise the sum, scaled here after.
  const bool native_average = op == HVD_AVERAGE && IsFloatingDtype(dtype) &&
                              first.postscale == 1.0 && dev.device_average();
  const hvd_cuda_scale_t pre = Prescale(dtype, first.prescale);
  const hvd_cuda_scale_t post = native_average ? Prescale(dtype, 1.0)
                                               : FinishScale(dtype, op, first.postscale, size_);
  if ((!Identity(pre) || !Identity(post)) && k == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED, "allreduce '" + t.name +
                                          "' of a CUDA tensor needs scaling on the device "
                                          "(AVERAGE of integers, or scale factors)");
  }
  if (!Identity(pre)) {
    const hvd_cuda_copy_t c{t.input, t.output, n};
    HVD_CHECK(k->ScaleCopy(&c, 1, pre, t.stream));
  } else if (t.output != t.input) {
    HVD_CHECK(rt.CopyOnDevice(t.output, t.input, bytes, t.stream));
  }
  HVD_CHECK(dev.DeviceAllreduce(DeviceBuffer(t.output, bytes, t), n, dtype,
                                native_average ? HVD_AVERAGE : TransportOp(op)));
  if (!Identity(post)) {
    const hvd_cuda_copy_t c{t.output, t.output, n};
    HVD_CHECK(k->ScaleCopy(&c, 1, post, t.stream));
  }
  // A stream-ordered plugin may return before the work is done.
  HVD_CHECK(EndOnStream(rt, t.device, t.stream));
  if (timeline_->enabled()) {
    timeline_->Span(t.name, "ALLREDUCE", t0, Clock::now(),
                    "{\"bytes\":" + std::to_string(bytes) + ",\"device\":" +
                        std::to_string(t.device) + "}");
  }
  return Status::Ok();
}

// Many tensors as one: the first tensor's stream waits for the others',
// one kernel launch (per batch_capacity tensors) copies them into the
// device's fusion buffer with the prescale, the transport reduces the
// buffer on that stream, one launch copies the results out with the
// postscale (AVERAGE's division included), the other streams wait for it,
// and the host waits for the stream before the handles complete.
Status Executor::DeviceAllreduceFused(std::vector<OpRequest*>& batch, Comm& dev,
                                      const CudaRuntime& rt, const CudaKernels& k, size_t total,
                                      size_t ntensors) {
  auto t0 = Clock::now();
  const OpRequest& first = *batch.front();
  TensorSpec& lead = batch.front()->tensors.front();
  const hvd_dtype_t dtype = lead.dtype;
  const size_t esize = DtypeSize(dtype);
  const int device = lead.device;
  void* const stream = lead.stream;
  HVD_CHECK(AfterLastDeviceWork(rt, device, stream));  // the fusion buffer's last user
  HVD_ASSIGN_OR_RETURN(uint8_t* buf, DeviceFusion(rt, device, total * esize));
  copies_.clear();
  size_t off = 0;
  for (OpRequest* req : batch) {
    for (TensorSpec& t : req->tensors) {
      const size_t n = static_cast<size_t>(t.NumElements());
      if (n == 0) continue;
      if (t.stream != stream) HVD_CHECK(rt.StreamWaitStream(stream, t.stream));
      copies_.push_back({t.input, buf + off, n});
      off += n * esize;
    }
  }
  HVD_CHECK(k.ScaleCopy(copies_.data(), copies_.size(), Prescale(dtype, first.prescale), stream));
  auto t1 = Clock::now();
  hvd_transport_buffer_t b{};
  b.data = buf;
  b.bytes = total * esize;
  b.memory_type = HVD_MEMORY_CUDA;
  b.device = device;
  b.stream = stream;
  HVD_CHECK(dev.DeviceAllreduce(b, total, dtype, TransportOp(first.reduce_op)));
  auto t2 = Clock::now();
  copies_.clear();
  off = 0;
  for (OpRequest* req : batch) {
    for (TensorSpec& t : req->tensors) {
      const size_t n = static_cast<size_t>(t.NumElements());
      if (n == 0) continue;
      copies_.push_back({buf + off, t.output, n});
      off += n * esize;
    }
  }
  HVD_CHECK(k.ScaleCopy(copies_.data(), copies_.size(),
                        FinishScale(dtype, first.reduce_op, first.postscale, size_), stream));
  for (OpRequest* req : batch) {
    for (TensorSpec& t : req->tensors) {
      if (t.stream != stream) HVD_CHECK(rt.StreamWaitStream(t.stream, stream));
    }
  }
  HVD_CHECK(EndOnStream(rt, device, stream));
  if (timeline_->enabled()) {
    auto t3 = Clock::now();
    std::string args = "{\"fused_tensors\":" + std::to_string(ntensors) +
                       ",\"bytes\":" + std::to_string(total * esize) +
                       ",\"device\":" + std::to_string(device) + "}";
    for (OpRequest* req : batch) {
      for (const TensorSpec& t : req->tensors) {
        timeline_->Span(t.name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
        timeline_->Span(t.name, "ALLREDUCE", t1, t2, args);
        timeline_->Span(t.name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
      }
    }
  }
  return Status::Ok();
}

Status Executor::RunDeviceOne(OpRequest& req, const Response& resp, Comm& dev) {
  TensorSpec& t = req.tensors.front();
  auto r = cuda_.Get();
  if (!r.ok()) return r.status();
  const CudaRuntime& rt = *r.value();
  if (req.type == OpType::kAllgather || req.type == OpType::kAlltoall ||
      req.type == OpType::kReducescatter) {
    return DeviceOwnedResult(req, resp, dev, rt);
  }
  if (req.type != OpType::kBroadcast) {
    return Error(HVD_ERR_UNSUPPORTED, std::string(OpTypeName(req.type)) + " '" + t.name +
                                          "' on a transport that takes CUDA memory only");
  }
  const size_t bytes = TensorBytes(t);
  if (bytes == 0) return Status::Ok();
  CudaDeviceScope scope(rt, t.device);
  HVD_CHECK(scope.status());
  HVD_CHECK(AfterLastDeviceWork(rt, t.device, t.stream));
  if (rank_ == req.root && t.output != t.input) {
    HVD_CHECK(rt.CopyOnDevice(t.output, t.input, bytes, t.stream));
  }
  HVD_CHECK(dev.DeviceBroadcast(DeviceBuffer(t.output, bytes, t), req.root));
  return EndOnStream(rt, t.device, t.stream);
}

Result<uint8_t*> Executor::TakeDeviceOutput(Handle* h, int device, size_t bytes, void* stream) {
  h->output_device = device;
  h->device_bytes = bytes;
  if (bytes == 0) return static_cast<uint8_t*>(nullptr);
  std::shared_ptr<DevicePool> pool = cuda_.Results(pool_bytes_);
  if (!pool) return Error(HVD_ERR_INTERNAL, "device results before the CUDA runtime loaded");
  HVD_ASSIGN_OR_RETURN(DeviceBlock b, pool->Take(device, bytes));
  if (b.fence) {
    // Its last handle was released in stream order: work queued then may
    // still read it. This run's stream waits for that work first.
    Status s = b.fence->OrderBefore(stream);
    b.fence.reset();
    if (!s.ok()) {
      pool->Give(b);
      return s.Wrap("ordering a reused device result block");
    }
  }
  h->device_output = b;
  h->device_pool = std::move(pool);
  return static_cast<uint8_t*>(b.data);
}

// RunHostOne's counts (AllgatherCounts, ...), over device buffers on the
// tensor's stream: the input is read where it lies, the result written
// into a block of the device results pool that the handle then owns, and
// the host waits for the stream before the handle completes.
Status Executor::DeviceOwnedResult(OpRequest& req, const Response& resp, Comm& dev,
                                   const CudaRuntime& rt) {
  auto t0 = Clock::now();
  const int n = size_;
  const int me = rank_;
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const size_t esize = DtypeSize(t.dtype);
  const size_t row = RowBytes(t);
  CudaDeviceScope scope(rt, t.device);
  HVD_CHECK(scope.status());
  HVD_CHECK(AfterLastDeviceWork(rt, t.device, t.stream));
  auto buffer = [&](void* data, size_t bytes) { return DeviceBuffer(data, bytes, t); };
  size_t out_bytes = 0;
  switch (req.type) {
    case OpType::kAllgather: {
      const Counts c = AllgatherCounts(resp, n, row);
      out_bytes = c.recv_total;
      HVD_ASSIGN_OR_RETURN(uint8_t* out, TakeDeviceOutput(&h, t.device, out_bytes, t.stream));
      h.output_shape = t.shape.vec();
      h.output_shape[0] = c.rows;
      if (out_bytes == 0) break;
      HVD_CHECK(dev.DeviceAllgatherv(buffer(const_cast<void*>(t.input), c.recv[me]),
                                     buffer(out, out_bytes), c.recv.data()));
      break;
    }
    case OpType::kAlltoall: {
      const Counts c = AlltoallCounts(req, resp, n, me, row, &h.recv_splits);
      out_bytes = c.recv_total;
      HVD_ASSIGN_OR_RETURN(uint8_t* out, TakeDeviceOutput(&h, t.device, out_bytes, t.stream));
      h.output_shape = t.shape.vec();
      h.output_shape[0] = c.rows;
      // Called even with nothing to move here: the others may be waiting.
      HVD_CHECK(dev.DeviceAlltoallv(buffer(const_cast<void*>(t.input), c.send_total), c.send.data(),
                                    buffer(out, out_bytes), c.recv.data()));
      break;
    }
    case OpType::kReducescatter: {
      const size_t count = static_cast<size_t>(t.NumElements());
      const size_t row_elems = row / esize;
      const ScatterRows sr = ReducescatterRows(t.shape[0], n, me, row_elems);
      const int64_t my_rows = sr.mine, first_row = sr.first;
      out_bytes = static_cast<size_t>(my_rows) * row;
      h.output_shape = t.shape.vec();
      h.output_shape[0] = my_rows;
      if (!dev.device_reduces(t.dtype)) {
        return Error(HVD_ERR_UNSUPPORTED,
                     "reducescatter '" + t.name + "' of a " + DtypeName(t.dtype) +
                         " CUDA tensor: the device transport does not reduce that dtype, and "
                         "there is no host transport beside it to stage over (HVD_CPU_TRANSPORT)");
      }
      HVD_ASSIGN_OR_RETURN(uint8_t* out, TakeDeviceOutput(&h, t.device, out_bytes, t.stream));
      if (count == 0) break;
      // AVERAGE of a floating type with no postscale goes to the transport
      // as it is (NCCL's ncclAvg); otherwise the sum, scaled after.
      const bool native_average = req.reduce_op == HVD_AVERAGE && IsFloatingDtype(t.dtype) &&
                                  req.postscale == 1.0 && dev.device_average();
      const hvd_cuda_scale_t pre = Prescale(t.dtype, req.prescale);
      const hvd_cuda_scale_t post = native_average
                                        ? Prescale(t.dtype, 1.0)
                                        : FinishScale(t.dtype, req.reduce_op, req.postscale, n);
      const CudaKernels* k = nullptr;
      if (!Identity(pre) || !Identity(post)) {
        auto kr = cuda_.Kernels();
        if (!kr.ok()) {
          return Error(HVD_ERR_UNSUPPORTED,
                       "reducescatter '" + t.name +
                           "' of a CUDA tensor needs scaling on the device (AVERAGE of "
                           "integers, or scale factors): " + kr.status().message());
        }
        k = kr.value();
      }
      // In place over a copy of the whole input (the device fusion buffer);
      // this rank's rows then go to the result with the postscale.
      HVD_ASSIGN_OR_RETURN(uint8_t* scratch, DeviceFusion(rt, t.device, count * esize));
      if (k != nullptr && !Identity(pre)) {
        const hvd_cuda_copy_t c{t.input, scratch, count};
        HVD_CHECK(k->ScaleCopy(&c, 1, pre, t.stream));
      } else {
        HVD_CHECK(rt.CopyOnDevice(scratch, t.input, count * esize, t.stream));
      }
      HVD_CHECK(dev.DeviceReducescatter(buffer(scratch, count * esize), sr.counts.data(), t.dtype,
                                        native_average ? HVD_AVERAGE : TransportOp(req.reduce_op)));
      if (out_bytes == 0) break;
      uint8_t* mine = scratch + static_cast<size_t>(first_row) * row;
      if (k != nullptr && !Identity(post)) {
        const hvd_cuda_copy_t c{mine, out, static_cast<size_t>(my_rows) * row_elems};
        HVD_CHECK(k->ScaleCopy(&c, 1, post, t.stream));
      } else {
        HVD_CHECK(rt.CopyOnDevice(out, mine, out_bytes, t.stream));
      }
      break;
    }
    default:
      return Error(HVD_ERR_INTERNAL, "not an operation with an owned result");
  }
  // A stream-ordered plugin may return before the work is done.
  HVD_CHECK(EndOnStream(rt, t.device, t.stream));
  if (timeline_->enabled()) {
    timeline_->Span(t.name, OpTypeName(req.type), t0, Clock::now(),
                    "{\"bytes\":" + std::to_string(out_bytes) + ",\"device\":" +
                        std::to_string(t.device) + "}");
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
