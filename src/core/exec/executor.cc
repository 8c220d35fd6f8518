// The executor's entry points: each unit is routed to the host path, the
// device path or the staging of CUDA tensors over a host transport; and
// what the paths share (result memory, batch sizes, timeline spans).
#include "core/exec/executor.h"

#include <chrono>
#include <string>

#include "common/kernels.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

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

Status Executor::TakeOutput(Handle* h, size_t bytes) {
  h->output = results_->Take(bytes);
  h->output_pool = results_;
  if (h->output.capacity() < bytes) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes for the result");
  }
  return Status::Ok();
}

Executor::BatchSize Executor::SizeOf(const std::vector<OpRequest*>& batch) {
  BatchSize size;
  for (const OpRequest* r : batch) {
    for (const TensorSpec& t : r->tensors) {
      size.elements += static_cast<size_t>(t.NumElements());
      ++size.tensors;
    }
  }
  return size;
}

std::string Executor::FusedArgs(BatchSize size, size_t esize, const std::string& extra) {
  return "{\"fused_tensors\":" + std::to_string(size.tensors) +
         ",\"bytes\":" + std::to_string(size.elements * esize) + extra + "}";
}

void Executor::FusedSpans(const std::vector<OpRequest*>& batch,
                          const std::array<Clock::time_point, 4>& t,
                          const std::string& args) const {
  for (const OpRequest* r : batch) {
    for (const TensorSpec& x : r->tensors) {
      timeline_->Span(x.name, "MEMCPY_IN_FUSION_BUFFER", t[0], t[1]);
      timeline_->Span(x.name, "ALLREDUCE", t[1], t[2], args);
      timeline_->Span(x.name, "MEMCPY_OUT_FUSION_BUFFER", t[2], t[3]);
    }
  }
}

}  // namespace hvd
