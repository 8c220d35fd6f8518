// Allreduce batches of CUDA tensors on a transport that takes device
// memory: tensor by tensor, or fused in the device fusion buffer with the
// scaling done by the core's CUDA kernels; a joined rank's zeros.
#include "core/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "common/kernels.h"
#include "core/exec/layout.h"
#include "core/exec/scaling.h"
#include "hvd_transport.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

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
  const DeviceScaling how = DeviceScalingOf(dtype, op, first.prescale, first.postscale, size_,
                                            dev.device_average());
  if ((!Identity(how.pre) || !Identity(how.post)) && k == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED, "allreduce '" + t.name +
                                          "' of a CUDA tensor needs scaling on the device "
                                          "(AVERAGE of integers, or scale factors)");
  }
  if (!Identity(how.pre)) {
    const hvd_cuda_copy_t c{t.input, t.output, n};
    HVD_CHECK(k->ScaleCopy(&c, 1, how.pre, t.stream));
  } else if (t.output != t.input) {
    HVD_CHECK(rt.CopyOnDevice(t.output, t.input, bytes, t.stream));
  }
  HVD_CHECK(dev.DeviceAllreduce(DeviceBuffer(t.output, bytes, t), n, dtype, how.op));
  if (!Identity(how.post)) {
    const hvd_cuda_copy_t c{t.output, t.output, n};
    HVD_CHECK(k->ScaleCopy(&c, 1, how.post, t.stream));
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
  HVD_CHECK(dev.DeviceAllreduce(DeviceBuffer(buf, total * esize, lead), total, dtype,
                                TransportOp(first.reduce_op)));
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
    FusedSpans(batch, {t0, t1, t2, Clock::now()},
               FusedArgs({total, ntensors}, esize, ",\"device\":" + std::to_string(device)));
  }
  return Status::Ok();
}

}  // namespace hvd
