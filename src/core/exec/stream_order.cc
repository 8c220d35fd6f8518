// Stream-ordered completion: handles' fences, waits between the streams
// of successive device runs, and the host waiting for streams.
#include "core/exec/executor.h"

#include <memory>

namespace hvd {

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

}  // namespace hvd
