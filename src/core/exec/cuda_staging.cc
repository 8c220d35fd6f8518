// CUDA tensors over a host-memory transport: staged into page-locked
// memory on their streams before the run, copied back after.
#include "core/exec/executor.h"

#include <algorithm>
#include <string>

#include "core/exec/layout.h"

namespace hvd {

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

}  // namespace hvd
