// The other operations on CUDA tensors on a transport that takes device
// memory: broadcast, and allgather, alltoall and reducescatter into
// device memory the handle owns.
#include "core/exec/executor.h"

#include <chrono>
#include <string>

#include "common/kernels.h"
#include "core/exec/layout.h"
#include "core/exec/scaling.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

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
  TensorSpec& t = req.tensors.front();
  CudaDeviceScope scope(rt, t.device);
  HVD_CHECK(scope.status());
  HVD_CHECK(AfterLastDeviceWork(rt, t.device, t.stream));
  size_t out_bytes = 0;
  switch (req.type) {
    case OpType::kAllgather:
      HVD_CHECK(DeviceAllgather(req, resp, dev, &out_bytes));
      break;
    case OpType::kAlltoall:
      HVD_CHECK(DeviceAlltoall(req, resp, dev, &out_bytes));
      break;
    case OpType::kReducescatter:
      HVD_CHECK(DeviceReducescatter(req, dev, rt, &out_bytes));
      break;
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

Status Executor::DeviceAllgather(OpRequest& req, const Response& resp, Comm& dev,
                                 size_t* out_bytes) {
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const Counts c = AllgatherCounts(resp, size_, RowBytes(t));
  *out_bytes = c.recv_total;
  HVD_ASSIGN_OR_RETURN(uint8_t* out, TakeDeviceOutput(&h, t.device, *out_bytes, t.stream));
  h.output_shape = t.shape.vec();
  h.output_shape[0] = c.rows;
  if (*out_bytes == 0) return Status::Ok();
  return dev.DeviceAllgatherv(DeviceBuffer(const_cast<void*>(t.input), c.recv[rank_], t),
                              DeviceBuffer(out, *out_bytes, t), c.recv.data());
}

Status Executor::DeviceAlltoall(OpRequest& req, const Response& resp, Comm& dev,
                                size_t* out_bytes) {
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const Counts c = AlltoallCounts(req, resp, size_, rank_, RowBytes(t), &h.recv_splits);
  *out_bytes = c.recv_total;
  HVD_ASSIGN_OR_RETURN(uint8_t* out, TakeDeviceOutput(&h, t.device, *out_bytes, t.stream));
  h.output_shape = t.shape.vec();
  h.output_shape[0] = c.rows;
  // Called even with nothing to move here: the others may be waiting.
  return dev.DeviceAlltoallv(DeviceBuffer(const_cast<void*>(t.input), c.send_total, t),
                             c.send.data(), DeviceBuffer(out, *out_bytes, t), c.recv.data());
}

// In place over a copy of the whole input (the device fusion buffer);
// this rank's rows then go to the result with the postscale.
Status Executor::DeviceReducescatter(OpRequest& req, Comm& dev, const CudaRuntime& rt,
                                     size_t* out_bytes) {
  Handle& h = *req.handle;
  TensorSpec& t = req.tensors.front();
  const size_t esize = DtypeSize(t.dtype);
  const size_t row = RowBytes(t);
  const size_t count = static_cast<size_t>(t.NumElements());
  const size_t row_elems = row / esize;
  const ScatterRows sr = ReducescatterRows(t.shape[0], size_, rank_, row_elems);
  *out_bytes = static_cast<size_t>(sr.mine) * row;
  h.output_shape = t.shape.vec();
  h.output_shape[0] = sr.mine;
  if (!dev.device_reduces(t.dtype)) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "reducescatter '" + t.name + "' of a " + DtypeName(t.dtype) +
                     " CUDA tensor: the device transport does not reduce that dtype, and "
                     "there is no host transport beside it to stage over (HVD_CPU_TRANSPORT)");
  }
  HVD_ASSIGN_OR_RETURN(uint8_t* out, TakeDeviceOutput(&h, t.device, *out_bytes, t.stream));
  if (count == 0) return Status::Ok();
  const DeviceScaling how = DeviceScalingOf(t.dtype, req.reduce_op, req.prescale, req.postscale,
                                            size_, dev.device_average());
  const CudaKernels* k = nullptr;
  if (!Identity(how.pre) || !Identity(how.post)) {
    auto kr = cuda_.Kernels();
    if (!kr.ok()) {
      return Error(HVD_ERR_UNSUPPORTED,
                   "reducescatter '" + t.name +
                       "' of a CUDA tensor needs scaling on the device (AVERAGE of "
                       "integers, or scale factors): " + kr.status().message());
    }
    k = kr.value();
  }
  HVD_ASSIGN_OR_RETURN(uint8_t* scratch, DeviceFusion(rt, t.device, count * esize));
  if (k != nullptr && !Identity(how.pre)) {
    const hvd_cuda_copy_t c{t.input, scratch, count};
    HVD_CHECK(k->ScaleCopy(&c, 1, how.pre, t.stream));
  } else {
    HVD_CHECK(rt.CopyOnDevice(scratch, t.input, count * esize, t.stream));
  }
  HVD_CHECK(dev.DeviceReducescatter(DeviceBuffer(scratch, count * esize, t), sr.counts.data(),
                                    t.dtype, how.op));
  if (*out_bytes == 0) return Status::Ok();
  uint8_t* mine = scratch + static_cast<size_t>(sr.first) * row;
  if (k != nullptr && !Identity(how.post)) {
    const hvd_cuda_copy_t c{mine, out, static_cast<size_t>(sr.mine) * row_elems};
    return k->ScaleCopy(&c, 1, how.post, t.stream);
  }
  return rt.CopyOnDevice(out, mine, *out_bytes, t.stream);
}
}  // namespace hvd
