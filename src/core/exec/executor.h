// The executor: runs one negotiated unit (a fused allreduce batch, or one
// operation) over the transport and returns its status. It never completes
// handles (the loop does, from the status) and never negotiates: it sees
// only what the loop hands it. Owns the memory the runs reuse: the fusion
// buffer, the spans of an in-place fused batch, the pool results come from.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/negotiation/controller.h"
#include "core/exec/cuda_runtime.h"
#include "core/fusion/fusion_buffer.h"
#include "core/loop/request.h"
#include "core/observability/timeline.h"
#include "core/comm.h"

namespace hvd {

class Executor {
 public:
  Executor(Comm* comm, Timeline* timeline, size_t pool_bytes)
      : transport_(comm), timeline_(timeline), rank_(comm->rank()), size_(comm->size()),
        pool_bytes_(pool_bytes), results_(std::make_shared<BufferPool>(pool_bytes)) {}
  ~Executor();

  // The communicator the next runs use: the context's, or one of its
  // process sets' (which share this executor's buffers: one loop thread
  // runs them all, one at a time).
  // `device`: a device-only transport beside it (the root context's, for
  // CUDA tensors; null: none, CUDA tensors are staged over `comm`).
  // device_status: not ok where a device transport should serve `comm`'s
  // CUDA tensors but could not be opened (they then fail with it).
  void Use(Comm* comm, Comm* device = nullptr, Status device_status = Status::Ok()) {
    transport_ = comm;
    device_ = device;
    device_status_ = std::move(device_status);
    rank_ = comm->rank();
    size_ = comm->size();
  }

  // A fused allreduce: every request has the same dtype, op and scale
  // factors (the loop's bucketing guarantees it).
  // HVD_ADASUM batches run tensor by tensor (RunAdasumBatch).
  Status RunAllreduceBatch(std::vector<OpRequest*>& batch);
  // One operation as the negotiated response describes it.
  Status RunOne(OpRequest& req, const Response& resp);
  // A one-tensor host allreduce the negotiation reduced (HVD_PIGGYBACK):
  // `reduced` holds the ranks' prescaled tensors reduced under the
  // transport op; writes the output with the postscale (AVERAGE's
  // division included), as an unfused allreduce would. A broadcast's:
  // `reduced` holds the root's bytes, copied to the output. An
  // allgather's: every rank's part in rank order, `rows` rows, copied to
  // the handle's result. `bytes`: the result's (the tensor's, but for an
  // allgather).
  Status FinishPiggybacked(OpRequest& req, const void* reduced, size_t bytes, int64_t rows,
                           std::chrono::steady_clock::time_point t0);

  // Stream-ordered completion of CUDA operations (HVD_CUDA_ASYNC_COMPLETION):
  // the host no longer waits for the results' copies and scaling on the
  // tensors' streams; each handle gets the event recorded after them
  // (Handle::cuda_fence). Off: the host waits, and handles carry none.
  void set_async_completion(bool on) { async_ = on; }

  // This rank's index on its host: a device transport's device is
  // local_rank % devices (as the NCCL plugin's), used for a joined rank's zeros.
  void set_local_rank(int r) { local_rank_ = r < 0 ? 0 : r; }

  FusionBuffer& fusion() { return fusion_; }
  const FusionBuffer& fusion() const { return fusion_; }
  const BufferPool& results() const { return *results_; }
  // The context's CUDA runtime (loaded when the first device tensor is
  // checked; any thread may call Check) and the page-locked staging
  // buffer's capacity (tests).
  CudaSlot& cuda() { return cuda_; }
  size_t staging_capacity() const { return stage_cap_; }

 private:
  Status TakeOutput(Handle* h, size_t bytes);
  // A batch's size: elements over all its tensors, and tensors.
  struct BatchSize {
    size_t elements = 0;
    size_t tensors = 0;
  };
  static BatchSize SizeOf(const std::vector<OpRequest*>& batch);
  // A fused batch's timeline arguments; `extra`: more fields, each after a comma.
  static std::string FusedArgs(BatchSize size, size_t esize, const std::string& extra = "");
  // The timeline spans of every tensor of a fused batch: the copy in
  // [t[0], t[1]), the collective [t[1], t[2]), the copy out [t[2], t[3]).
  void FusedSpans(const std::vector<OpRequest*>& batch, const std::array<Clock::time_point, 4>& t,
                  const std::string& args) const;

  // Host memory (host_allreduce.cc, host_ops.cc).
  Status RunAdasumBatch(std::vector<OpRequest*>& batch);
  Status RunHostAllreduceBatch(std::vector<OpRequest*>& batch);
  Status HostAllreduceOne(std::vector<OpRequest*>& batch, Clock::time_point t0);
  void HostAllreduceAlone(std::vector<OpRequest*>& batch, Clock::time_point t0);
  Status HostAllreduceSpans(std::vector<OpRequest*>& batch, BatchSize size, Clock::time_point t0);
  Status HostAllreduceFused(std::vector<OpRequest*>& batch, BatchSize size, Clock::time_point t0);
  Status RunHostOne(OpRequest& req, const Response& resp);
  Status HostReducescatter(OpRequest& req);

  // CUDA tensors over a host-memory transport: each device tensor's data
  // is copied into the staging buffer on its stream (the streams are then
  // synchronized), the tensor points there while the host code runs, and
  // results go back to the device on the same stream (synchronized before
  // the handle completes). Stage returns false where no tensor is on a device.
  struct StagedTensor {
    TensorSpec* t;
    const void* input;  // the caller's device pointers
    void* output;
    size_t bytes;
    bool copy_out;  // the result lands in the caller's output (allreduce, broadcast)
  };
  Status Stage(std::vector<TensorSpec*>& tensors, const std::vector<bool>& copy_in,
               const std::vector<bool>& copy_out);
  Status Unstage(bool ok);  // copies results back when ok; always restores the pointers
  // Each distinct stream of streams_ once: the host waits for it, or with
  // `fence` an event recorded there is kept for SettleStaging (the host
  // waits only where none could be made). Clears streams_.
  Status SynchronizeStreams(const CudaRuntime& rt, bool fence = false);
  // Stream-ordered completion. The staging buffer's copies back to the
  // devices may still be queued after a run: the next Stage (and the
  // destructor) waits for them before writing (freeing) it.
  Status SettleStaging();
  // Where a device path's last work was queued (its buffers, the device
  // fusion buffer above all, may still be in use there): a later run on
  // another stream of that device waits for it on the device first.
  Status AfterLastDeviceWork(const CudaRuntime& rt, int device, void* stream);
  // The end of a device path: the host waits for `stream` (host-
  // synchronized completion), or it is remembered for the next run.
  Status EndOnStream(const CudaRuntime& rt, int device, void* stream);
  // Records, for each request with CUDA tensors, the event its handle
  // hands out (stream-ordered completion only).
  Status FenceHandles(OpRequest* const* reqs, size_t n);
  Status RunAllreduceBatchOn(std::vector<OpRequest*>& batch);
  Status RunOneOn(OpRequest& req, const Response& resp);
  // CUDA tensors handed to a transport that takes device memory (NCCL):
  // the device transport beside the host one, or the transport itself.
  // Null where CUDA tensors are staged over the host transport.
  Comm* DeviceComm() const {
    if (device_ != nullptr && device_->device_memory()) return device_;
    return transport_->device_memory() ? transport_ : nullptr;
  }
  // Whether the device path serves this batch; where not (Adasum; a dtype
  // the device transport does not reduce), it is staged over a host
  // transport, if there is one.
  bool DeviceServes(const std::vector<OpRequest*>& batch, const Comm& dev) const;
  Status RunDeviceAllreduce(std::vector<OpRequest*>& batch, Comm& dev);
  Status DeviceAllreduceOne(TensorSpec& t, const OpRequest& first, Comm& dev,
                            const CudaRuntime& rt, const CudaKernels* k);
  Status DeviceAllreduceFused(std::vector<OpRequest*>& batch, Comm& dev, const CudaRuntime& rt,
                              const CudaKernels& k, size_t total, size_t ntensors);
  Status RunDeviceOne(OpRequest& req, const Response& resp, Comm& dev);
  // Allgather, alltoall and reducescatter on the device transport: the
  // result lands in device memory the handle owns (Handle::device_output).
  Status DeviceOwnedResult(OpRequest& req, const Response& resp, Comm& dev,
                           const CudaRuntime& rt);
  // Its operations; *out_bytes: the result's size.
  Status DeviceAllgather(OpRequest& req, const Response& resp, Comm& dev, size_t* out_bytes);
  Status DeviceAlltoall(OpRequest& req, const Response& resp, Comm& dev, size_t* out_bytes);
  Status DeviceReducescatter(OpRequest& req, Comm& dev, const CudaRuntime& rt, size_t* out_bytes);
  Result<uint8_t*> TakeDeviceOutput(Handle* h, int device, size_t bytes, void* stream);
  // The device fusion buffer of `device` (the current device), grown to
  // at least `bytes`; one per device, kept for the executor's life.
  struct DeviceFusionBuffer {
    int device;
    void* data;
    size_t capacity;
  };
  Result<uint8_t*> DeviceFusion(const CudaRuntime& rt, int device, size_t bytes) {
    return DeviceBufferOf(&dev_fusion_, rt, device, bytes);
  }
  static Result<uint8_t*> DeviceBufferOf(std::vector<DeviceFusionBuffer>* list,
                                         const CudaRuntime& rt, int device, size_t bytes);
  // A joined rank's zeros, moved to this rank's device where the other
  // ranks' tensors go to a device transport (so it makes the same calls).
  Status ZerosToDevice(std::vector<OpRequest*>& batch);
  std::vector<DeviceFusionBuffer> dev_fusion_;
  std::vector<DeviceFusionBuffer> dev_zeros_;  // ZerosToDevice's memory
  int local_rank_ = 0;
  std::vector<hvd_cuda_copy_t> copies_;

  CudaSlot cuda_;  // first: the staging buffer is freed through it
  void* stage_ = nullptr;  // page-locked (cudaHostAlloc), grown on demand
  size_t stage_cap_ = 0;
  std::vector<StagedTensor> staged_;
  std::vector<std::pair<int, void*>> streams_;  // (device, stream) pairs to synchronize
  std::vector<TensorSpec*> stage_list_;
  std::vector<bool> stage_in_, stage_out_;
  bool async_ = false;  // set_async_completion
  std::vector<std::shared_ptr<CudaFence>> stage_fences_;  // SettleStaging's
  struct LastDeviceWork {
    bool set = false;
    int device = -1;
    void* stream = nullptr;
  } last_device_;

  Comm* transport_;
  Comm* device_ = nullptr;  // a device-only transport beside transport_ (Use)
  Status device_status_;
  Timeline* timeline_;
  int rank_;
  int size_;
  size_t pool_bytes_;  // the most spare result memory kept, host and device each
  FusionBuffer fusion_;
  std::vector<hvd_transport_span_t> spans_;  // a fused batch's outputs (in-place transports)
  // Buffers recycled between operations: results of released handles
  // (allgather, alltoall, reducescatter) and reducescatter's scratch.
  std::shared_ptr<BufferPool> results_;
};

}  // namespace hvd
