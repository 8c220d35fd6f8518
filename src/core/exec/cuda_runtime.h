// The CUDA runtime, loaded at run time: libhvd never links CUDA. A context
// loads it the first time a tensor with a device ordinal reaches it (the C
// API checks the device then), and keeps it for its life (one handle per
// context; dlopen counts references, so contexts share the loaded library).
//
// Which library: HVD_CUDA_RUNTIME (a path or a soname) alone where set, else
// the first of libcudart.so.13, libcudart.so.12, libcudart.so that loads.
// The few entry points used here are resolved by name; their types are
// declared below (no CUDA header in the core, so it builds without CUDA).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "cuda/cuda_kernels.h"

namespace hvd {

// A library opened with dlopen and the name it was opened by; closed when
// this goes (move-only).
class OpenedLibrary {
 public:
  OpenedLibrary() = default;
  OpenedLibrary(void* dl, std::string name) : dl_(dl), name_(std::move(name)) {}
  OpenedLibrary(OpenedLibrary&& other) noexcept { *this = std::move(other); }
  OpenedLibrary& operator=(OpenedLibrary&& other) noexcept;
  ~OpenedLibrary();
  void* handle() const { return dl_; }
  const std::string& name() const { return name_; }

 private:
  void* dl_ = nullptr;
  std::string name_;
};

class CudaRuntime {
 public:
  // Loads the runtime and counts the devices. Fails with
  // HVD_ERR_UNSUPPORTED: "no CUDA runtime could be loaded (<what was tried,
  // and why each failed>)", or "this host has no CUDA device (<CUDA's
  // answer>)".
  static Result<std::unique_ptr<CudaRuntime>> Load();
  ~CudaRuntime();

  const std::string& library() const { return lib_.name(); }  // what was loaded
  int device_count() const { return devices_; }

  // Every call below returns CUDA's failure as HVD_ERR_TRANSPORT:
  // "<function>: <cudaGetErrorString>" (a device fault).
  Status GetDevice(int* device) const;
  Status SetDevice(int device) const;
  // memory: 0 unregistered host memory, 1 page-locked host, 2 device,
  // 3 managed (cudaMemoryType); device: its ordinal (device, managed).
  Status PointerInfo(const void* p, int* memory, int* device) const;
  Status HostAlloc(void** p, size_t bytes) const;  // page-locked
  void FreeHost(void* p) const;
  // Asynchronous copies on `stream` (a cudaStream_t; NULL: the legacy
  // default stream of the current device).
  Status CopyToHost(void* dst, const void* src, size_t bytes, void* stream) const;
  Status CopyToDevice(void* dst, const void* src, size_t bytes, void* stream) const;
  Status CopyOnDevice(void* dst, const void* src, size_t bytes, void* stream) const;
  Status StreamSynchronize(void* stream) const;
  // Device memory of the current device (cudaMalloc / cudaFree).
  Status Malloc(void** p, size_t bytes) const;
  void Free(void* p) const;
  // `waiter` waits (on the device, the host does not block) for the work
  // queued on `waited` so far: an event recorded there.
  Status StreamWaitStream(void* waiter, void* waited) const;
  // Waits for the work on `stream` so far through an event (recorded
  // there, then synchronized): where another stream, or the host, must
  // wait for work a transport enqueued on it.
  Status WaitForStream(void* stream) const;
  // Events without timing (cudaEventDisableTiming), on the current device.
  Status EventCreate(void** event) const;
  Status EventRecord(void* event, void* stream) const;
  Status EventSynchronize(void* event) const;
  Status StreamWaitEvent(void* stream, void* event) const;
  void EventDestroy(void* event) const;

 private:
  CudaRuntime() = default;
  Status Check(int err, const char* what) const;

  OpenedLibrary lib_;
  int devices_ = 0;
  struct Fns;
  std::unique_ptr<Fns> fn_;
};

// The core's CUDA kernels (src/cuda/cuda_kernels.h), loaded at run time
// from HVD_CUDA_KERNELS (a path) where set, else libhvd_cuda_kernels.so in
// the folder libhvd.so was loaded from, else by that name from the
// loader's path. Used for the device fusion buffer and device-side scaling;
// without them a device transport runs one tensor at a time and refuses
// operations that need scaling, naming what it could not load.
class CudaKernels {
 public:
  static Result<std::unique_ptr<CudaKernels>> Load();
  const std::string& library() const { return lib_.name(); }
  // n copies of one dtype and scaling on `stream` of the current device.
  Status ScaleCopy(const hvd_cuda_copy_t* copies, size_t n, const hvd_cuda_scale_t& how,
                   void* stream) const;

 private:
  CudaKernels() = default;
  OpenedLibrary lib_;
  const hvd_cuda_kernels_v1_t* table_ = nullptr;
};

// The calling thread's current device set to `device` for the scope, and
// restored after (a caller's thread may run the context's cycle).
class CudaDeviceScope {
 public:
  CudaDeviceScope(const CudaRuntime& rt, int device);
  ~CudaDeviceScope();
  const Status& status() const { return status_; }

 private:
  const CudaRuntime& rt_;
  int saved_ = -1;
  Status status_;
};

// An event recorded on a stream after some work (stream-ordered completion,
// HVD_CUDA_ASYNC_COMPLETION): the host, or another stream, waits for that
// work through it. Keeps the runtime it was made with, so it is destroyed
// correctly whenever its last holder lets go (a handle may outlive its
// context). Shared by the handles of one fused batch.
class CudaFence {
 public:
  // An event made on `device` and recorded on `stream` (NULL: the legacy
  // default stream); the calling thread's current device is restored.
  static Result<std::shared_ptr<CudaFence>> Record(std::shared_ptr<const CudaRuntime> rt,
                                                   int device, void* stream);
  ~CudaFence();
  CudaFence(const CudaFence&) = delete;
  CudaFence& operator=(const CudaFence&) = delete;
  void* event() const { return event_; }  // a cudaEvent_t
  int device() const { return device_; }
  void* stream() const { return stream_; }  // where it was recorded
  const CudaRuntime& runtime() const { return *rt_; }
  const std::shared_ptr<const CudaRuntime>& shared_runtime() const { return rt_; }
  // The host waits for the work before the event.
  Status Synchronize() const;
  // `stream` (of this fence's device) waits for it on the device; the host
  // does not block.
  Status OrderBefore(void* stream) const;

 private:
  CudaFence(std::shared_ptr<const CudaRuntime> rt, int device, void* stream)
      : rt_(std::move(rt)), device_(device), stream_(stream) {}
  std::shared_ptr<const CudaRuntime> rt_;
  int device_;
  void* stream_;
  void* event_ = nullptr;
};

// Device memory a handle owns: the result of a CUDA allgather, alltoall or
// reducescatter that a device transport left on the device.
struct DeviceBlock {
  void* data = nullptr;
  size_t capacity = 0;
  int device = -1;
  // Work that may still read the block when it was given back (its handle
  // was released with stream-ordered completion: recorded on the stream the
  // result was ordered on). The next user's stream waits for it first.
  std::shared_ptr<CudaFence> fence;
};

// Where those blocks come from and go back to when their handles are
// released (cudaMalloc per result would cost more than the collective, and
// cudaFree synchronizes the device). Holds the runtime it frees through, so
// a handle released after its context is gone still frees correctly.
// Spares beyond max_bytes are freed, oldest first. Thread-safe.
class DevicePool {
 public:
  DevicePool(std::shared_ptr<const CudaRuntime> rt, size_t max_bytes)
      : rt_(std::move(rt)), max_bytes_(max_bytes) {}
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  // A block of at least `bytes` on `device`: the smallest spare that fits,
  // else a new one (the calling thread's current device is restored).
  Result<DeviceBlock> Take(int device, size_t bytes);
  void Give(DeviceBlock b);
  // bytes of b into host memory, synchronously (a completed result).
  Status CopyToHost(void* dst, const DeviceBlock& b, size_t bytes) const;
  size_t spare_bytes() const;

 private:
  void FreeBlock(const DeviceBlock& b) const;
  std::shared_ptr<const CudaRuntime> rt_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  std::vector<DeviceBlock> spare_;
  size_t spare_bytes_ = 0;
};

// A context's runtime, loaded on first use (any thread; the result, runtime
// or error, is kept). Check() is what the C API asks of each device tensor.
class CudaSlot {
 public:
  // The runtime, or why there is none.
  Result<const CudaRuntime*> Get();
  // OK if a tensor on `device` can be served: the runtime loads, the
  // ordinal is below the device count, and `data` (unless null) is device
  // memory of that device or managed memory (cudaPointerGetAttributes).
  // Errors start "CUDA tensor on device N (tensor 'name'): ".
  Status Check(int device, const std::string& name, const void* data);
  // The loaded runtime, or null (never loads).
  const CudaRuntime* loaded() const;
  // The same, shared: what a CudaFence keeps.
  std::shared_ptr<const CudaRuntime> shared() const;
  // The kernels, loaded on first use (the loop thread), or why not.
  Result<const CudaKernels*> Kernels();
  // The pool device results come from (made with the first call after the
  // runtime loaded, keeping at most max_bytes of spares); null before.
  std::shared_ptr<DevicePool> Results(size_t max_bytes);

 private:
  mutable std::mutex mu_;
  bool tried_ = false;
  Status error_;
  std::shared_ptr<CudaRuntime> rt_;
  std::shared_ptr<DevicePool> results_;
  bool kernels_tried_ = false;
  Status kernels_error_;
  std::unique_ptr<CudaKernels> kernels_;
};

}  // namespace hvd
