#include "core/exec/cuda_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace hvd {

namespace {

// The CUDA runtime's types, as far as used here (CUDA 11 to 13 layouts).
using cudaError = int;
constexpr cudaError kCudaSuccess = 0;
constexpr int kMemcpyHostToDevice = 1;
constexpr int kMemcpyDeviceToHost = 2;
constexpr int kMemcpyDeviceToDevice = 3;
constexpr int kMemoryHost = 1;
constexpr int kMemoryDevice = 2;
constexpr int kMemoryManaged = 3;
constexpr unsigned kHostAllocDefault = 0;
constexpr unsigned kEventDisableTiming = 2;

struct PointerAttributes {
  int type;  // cudaMemoryType
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];  // CUDA 12 and 13 have them; more room than any older layout needs
};

// dlopen(name), or nullptr with why appended to *tried ("; "-separated).
void* OpenLibrary(const std::string& name, std::string* tried) {
  void* dl = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* e = dlerror();
    *tried += (tried->empty() ? "" : "; ") + (e != nullptr ? std::string(e) : name + ": not found");
  }
  return dl;
}

}  // namespace

OpenedLibrary& OpenedLibrary::operator=(OpenedLibrary&& other) noexcept {
  if (this != &other) {
    if (dl_ != nullptr) dlclose(dl_);
    dl_ = other.dl_;
    name_ = std::move(other.name_);
    other.dl_ = nullptr;
  }
  return *this;
}

OpenedLibrary::~OpenedLibrary() {
  if (dl_ != nullptr) dlclose(dl_);
}

struct CudaRuntime::Fns {
  cudaError (*get_device_count)(int*) = nullptr;
  cudaError (*set_device)(int) = nullptr;
  cudaError (*get_device)(int*) = nullptr;
  cudaError (*pointer_get_attributes)(PointerAttributes*, const void*) = nullptr;
  cudaError (*host_alloc)(void**, size_t, unsigned) = nullptr;
  cudaError (*free_host)(void*) = nullptr;
  cudaError (*memcpy_async)(void*, const void*, size_t, int, void*) = nullptr;
  cudaError (*stream_synchronize)(void*) = nullptr;
  cudaError (*event_create_with_flags)(void**, unsigned) = nullptr;
  cudaError (*event_record)(void*, void*) = nullptr;
  cudaError (*event_synchronize)(void*) = nullptr;
  cudaError (*event_destroy)(void*) = nullptr;
  cudaError (*stream_wait_event)(void*, void*, unsigned) = nullptr;
  cudaError (*malloc)(void**, size_t) = nullptr;
  cudaError (*free)(void*) = nullptr;
  const char* (*get_error_string)(cudaError) = nullptr;
};

Result<std::unique_ptr<CudaRuntime>> CudaRuntime::Load() {
  std::vector<std::string> names;
  const char* env = std::getenv("HVD_CUDA_RUNTIME");
  if (env != nullptr && env[0] != '\0') {
    names.emplace_back(env);
  } else {
    names = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  }
  std::unique_ptr<CudaRuntime> rt(new CudaRuntime());
  std::string tried;
  for (const std::string& n : names) {
    void* dl = OpenLibrary(n, &tried);
    if (dl == nullptr) continue;
    rt->lib_ = OpenedLibrary(dl, n);
    break;
  }
  if (rt->lib_.handle() == nullptr) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "no CUDA runtime could be loaded (" + tried +
                     (env != nullptr && env[0] != '\0' ? "; set by HVD_CUDA_RUNTIME" : "") + ")");
  }
  rt->fn_ = std::make_unique<Fns>();
  Fns& f = *rt->fn_;
  std::string missing;
  auto sym = [&](auto& fp, const char* name) {
    void* p = dlsym(rt->lib_.handle(), name);
    if (p == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
    fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(p);
  };
  sym(f.get_device_count, "cudaGetDeviceCount");
  sym(f.set_device, "cudaSetDevice");
  sym(f.get_device, "cudaGetDevice");
  sym(f.pointer_get_attributes, "cudaPointerGetAttributes");
  sym(f.host_alloc, "cudaHostAlloc");
  sym(f.free_host, "cudaFreeHost");
  sym(f.memcpy_async, "cudaMemcpyAsync");
  sym(f.stream_synchronize, "cudaStreamSynchronize");
  sym(f.event_create_with_flags, "cudaEventCreateWithFlags");
  sym(f.event_record, "cudaEventRecord");
  sym(f.event_synchronize, "cudaEventSynchronize");
  sym(f.event_destroy, "cudaEventDestroy");
  sym(f.stream_wait_event, "cudaStreamWaitEvent");
  sym(f.malloc, "cudaMalloc");
  sym(f.free, "cudaFree");
  sym(f.get_error_string, "cudaGetErrorString");
  if (!missing.empty()) {
    return Error(HVD_ERR_UNSUPPORTED, "no CUDA runtime could be loaded (" + rt->lib_.name() +
                                          " lacks " + missing + ")");
  }
  int count = 0;
  const cudaError e = f.get_device_count(&count);
  if (e != kCudaSuccess || count <= 0) {
    std::string why = e != kCudaSuccess ? std::string("cudaGetDeviceCount: ") +
                                              f.get_error_string(e)
                                        : "cudaGetDeviceCount found 0 devices";
    return Error(HVD_ERR_UNSUPPORTED,
                 "this host has no CUDA device (" + why + "; runtime " + rt->lib_.name() + ")");
  }
  rt->devices_ = count;
  return rt;
}

CudaRuntime::~CudaRuntime() = default;  // here, where Fns is complete

Status CudaRuntime::Check(int err, const char* what) const {
  if (err == kCudaSuccess) return Status::Ok();
  const char* text = fn_->get_error_string(err);
  return Error(HVD_ERR_TRANSPORT, std::string(what) + ": " +
                                      (text != nullptr ? text : "error " + std::to_string(err)));
}

Status CudaRuntime::GetDevice(int* device) const {
  return Check(fn_->get_device(device), "cudaGetDevice");
}

Status CudaRuntime::SetDevice(int device) const {
  return Check(fn_->set_device(device), "cudaSetDevice");
}

Status CudaRuntime::PointerInfo(const void* p, int* memory, int* device) const {
  PointerAttributes a{};
  HVD_CHECK(Check(fn_->pointer_get_attributes(&a, p), "cudaPointerGetAttributes"));
  *memory = a.type;
  *device = a.device;
  return Status::Ok();
}

Status CudaRuntime::HostAlloc(void** p, size_t bytes) const {
  return Check(fn_->host_alloc(p, bytes, kHostAllocDefault), "cudaHostAlloc");
}

void CudaRuntime::FreeHost(void* p) const {
  if (p != nullptr) fn_->free_host(p);
}

Status CudaRuntime::CopyToHost(void* dst, const void* src, size_t bytes, void* stream) const {
  return Check(fn_->memcpy_async(dst, src, bytes, kMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync (device to host)");
}

Status CudaRuntime::CopyToDevice(void* dst, const void* src, size_t bytes, void* stream) const {
  return Check(fn_->memcpy_async(dst, src, bytes, kMemcpyHostToDevice, stream),
               "cudaMemcpyAsync (host to device)");
}

Status CudaRuntime::CopyOnDevice(void* dst, const void* src, size_t bytes, void* stream) const {
  return Check(fn_->memcpy_async(dst, src, bytes, kMemcpyDeviceToDevice, stream),
               "cudaMemcpyAsync (device to device)");
}

Status CudaRuntime::StreamSynchronize(void* stream) const {
  return Check(fn_->stream_synchronize(stream), "cudaStreamSynchronize");
}

Status CudaRuntime::WaitForStream(void* stream) const {
  void* ev = nullptr;
  HVD_CHECK(Check(fn_->event_create_with_flags(&ev, kEventDisableTiming), "cudaEventCreateWithFlags"));
  Status s = Check(fn_->event_record(ev, stream), "cudaEventRecord");
  if (s.ok()) s = Check(fn_->event_synchronize(ev), "cudaEventSynchronize");
  fn_->event_destroy(ev);
  return s;
}

Status CudaRuntime::EventCreate(void** event) const {
  return Check(fn_->event_create_with_flags(event, kEventDisableTiming), "cudaEventCreateWithFlags");
}

Status CudaRuntime::EventRecord(void* event, void* stream) const {
  return Check(fn_->event_record(event, stream), "cudaEventRecord");
}

Status CudaRuntime::EventSynchronize(void* event) const {
  return Check(fn_->event_synchronize(event), "cudaEventSynchronize");
}

Status CudaRuntime::StreamWaitEvent(void* stream, void* event) const {
  return Check(fn_->stream_wait_event(stream, event, 0), "cudaStreamWaitEvent");
}

void CudaRuntime::EventDestroy(void* event) const {
  if (event != nullptr) fn_->event_destroy(event);
}

Result<std::shared_ptr<CudaFence>> CudaFence::Record(std::shared_ptr<const CudaRuntime> rt,
                                                     int device, void* stream) {
  if (!rt) return Error(HVD_ERR_INTERNAL, "a CUDA fence without a runtime");
  CudaDeviceScope scope(*rt, device);
  HVD_CHECK(scope.status());
  std::shared_ptr<CudaFence> f(new CudaFence(rt, device, stream));
  HVD_CHECK(rt->EventCreate(&f->event_));
  HVD_CHECK(rt->EventRecord(f->event_, stream));
  return f;
}

CudaFence::~CudaFence() {
  if (event_ == nullptr) return;
  CudaDeviceScope scope(*rt_, device_);
  rt_->EventDestroy(event_);  // CUDA releases it once the work before it is done
}

Status CudaFence::Synchronize() const { return rt_->EventSynchronize(event_); }

Status CudaFence::OrderBefore(void* stream) const {
  CudaDeviceScope scope(*rt_, device_);
  HVD_CHECK(scope.status());
  return rt_->StreamWaitEvent(stream, event_);
}

Status CudaRuntime::Malloc(void** p, size_t bytes) const {
  return Check(fn_->malloc(p, bytes), "cudaMalloc");
}

void CudaRuntime::Free(void* p) const {
  if (p != nullptr) fn_->free(p);
}

Status CudaRuntime::StreamWaitStream(void* waiter, void* waited) const {
  if (waiter == waited) return Status::Ok();
  void* ev = nullptr;
  HVD_CHECK(Check(fn_->event_create_with_flags(&ev, kEventDisableTiming), "cudaEventCreateWithFlags"));
  Status s = Check(fn_->event_record(ev, waited), "cudaEventRecord");
  if (s.ok()) s = Check(fn_->stream_wait_event(waiter, ev, 0), "cudaStreamWaitEvent");
  fn_->event_destroy(ev);  // CUDA releases it once the wait is done
  return s;
}

// ---- the kernels -------------------------------------------------------------

namespace {

// The folder libhvd.so (the library holding this function) was loaded from.
std::string ThisLibraryDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ThisLibraryDir), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

Result<std::unique_ptr<CudaKernels>> CudaKernels::Load() {
  std::vector<std::string> names;
  const char* env = std::getenv("HVD_CUDA_KERNELS");
  const bool forced = env != nullptr && env[0] != '\0';
  if (forced) {
    names.emplace_back(env);
  } else {
    const std::string dir = ThisLibraryDir();
    if (!dir.empty()) names.push_back(dir + "/libhvd_cuda_kernels.so");
    names.emplace_back("libhvd_cuda_kernels.so");
  }
  std::unique_ptr<CudaKernels> k(new CudaKernels());
  std::string tried;
  for (const std::string& n : names) {
    void* dl = OpenLibrary(n, &tried);
    if (dl == nullptr) continue;
    auto fn = reinterpret_cast<hvd_cuda_kernels_v1_fn>(dlsym(dl, "hvd_cuda_kernels_v1"));
    const hvd_cuda_kernels_v1_t* t = fn != nullptr ? fn() : nullptr;
    if (t == nullptr || t->abi_version != HVD_CUDA_KERNELS_ABI ||
        t->struct_size < sizeof(hvd_cuda_kernels_v1_t) || t->scale_copy == nullptr) {
      tried += (tried.empty() ? "" : "; ") + n +
               (t == nullptr ? ": no hvd_cuda_kernels_v1 table"
                             : ": table version " + std::to_string(t->abi_version) +
                                   " (this core needs " + std::to_string(HVD_CUDA_KERNELS_ABI) + ")");
      dlclose(dl);
      continue;
    }
    k->lib_ = OpenedLibrary(dl, n);
    k->table_ = t;
    return k;
  }
  return Error(HVD_ERR_UNSUPPORTED,
               "hvd's CUDA kernels could not be loaded (" + tried +
                   (forced ? "; set by HVD_CUDA_KERNELS" : "; build hvd with the CUDA toolkit") + ")");
}

Status CudaKernels::ScaleCopy(const hvd_cuda_copy_t* copies, size_t n, const hvd_cuda_scale_t& how,
                              void* stream) const {
  const int e = table_->scale_copy(copies, n, &how, stream);
  if (e == 0) return Status::Ok();
  const char* text = table_->error_string != nullptr ? table_->error_string(e) : nullptr;
  return Error(HVD_ERR_TRANSPORT, std::string("hvd CUDA kernel (scaled copy of ") +
                                      std::to_string(n) + " tensors): " +
                                      (text != nullptr ? text : "error " + std::to_string(e)));
}

CudaDeviceScope::CudaDeviceScope(const CudaRuntime& rt, int device) : rt_(rt) {
  status_ = rt_.GetDevice(&saved_);
  if (!status_.ok()) {
    saved_ = -1;
    return;
  }
  if (saved_ != device) status_ = rt_.SetDevice(device);
}

CudaDeviceScope::~CudaDeviceScope() {
  int now = -1;
  if (saved_ >= 0 && rt_.GetDevice(&now).ok() && now != saved_) (void)rt_.SetDevice(saved_);
}

namespace {

// The library `load` gives, loaded once (the outcome kept); under the
// slot's lock.
template <typename T, typename Ptr, typename LoadFn>
Result<const T*> LoadOnce(bool* tried, Status* error, Ptr* slot, LoadFn load) {
  if (!*tried) {
    *tried = true;
    auto r = load();
    if (r.ok()) {
      *slot = std::move(r).value();
    } else {
      *error = r.status();
    }
  }
  if (!*slot) return *error;
  return static_cast<const T*>(slot->get());
}

}  // namespace

Result<const CudaRuntime*> CudaSlot::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  return LoadOnce<CudaRuntime>(&tried_, &error_, &rt_, &CudaRuntime::Load);
}

std::shared_ptr<DevicePool> CudaSlot::Results(size_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!results_ && rt_) results_ = std::make_shared<DevicePool>(rt_, max_bytes);
  return results_;
}

Status CudaSlot::Check(int device, const std::string& name, const void* data) {
  const std::string what =
      "CUDA tensor on device " + std::to_string(device) + " (tensor '" + name + "'): ";
  auto r = Get();
  if (!r.ok()) return Error(r.status().code(), what + r.status().message());
  const int n = r.value()->device_count();
  if (device >= n) {
    return Error(HVD_ERR_INVALID_ARGUMENT,
                 what + "this host has " + std::to_string(n) + " CUDA device" +
                     (n == 1 ? "" : "s") + " (ordinals 0.." + std::to_string(n - 1) + ")");
  }
  if (data == nullptr) return Status::Ok();
  int memory = 0, on = -1;
  Status s = r.value()->PointerInfo(data, &memory, &on);
  if (!s.ok()) return Error(HVD_ERR_INVALID_ARGUMENT, what + "its data pointer: " + s.message());
  if (memory == kMemoryManaged || (memory == kMemoryDevice && on == device)) return Status::Ok();
  if (memory == kMemoryDevice) {
    return Error(HVD_ERR_INVALID_ARGUMENT,
                 what + "its data is memory of CUDA device " + std::to_string(on));
  }
  return Error(HVD_ERR_INVALID_ARGUMENT,
               what + "its data is host memory" +
                   (memory == kMemoryHost ? " (page-locked)" : "") +
                   "; pass device = HVD_DEVICE_CPU for host memory");
}

const CudaRuntime* CudaSlot::loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rt_.get();
}

std::shared_ptr<const CudaRuntime> CudaSlot::shared() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rt_;
}

Result<const CudaKernels*> CudaSlot::Kernels() {
  std::lock_guard<std::mutex> lock(mu_);
  return LoadOnce<CudaKernels>(&kernels_tried_, &kernels_error_, &kernels_, &CudaKernels::Load);
}


// ---- device memory for results the handles own ---------------------------

DevicePool::~DevicePool() {
  for (const DeviceBlock& b : spare_) FreeBlock(b);
}

void DevicePool::FreeBlock(const DeviceBlock& b) const {
  if (b.data == nullptr) return;
  if (b.fence) (void)b.fence->Synchronize();  // readers queued before its release
  CudaDeviceScope scope(*rt_, b.device);
  if (scope.status().ok()) rt_->Free(b.data);
}

Result<DeviceBlock> DevicePool::Take(int device, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = spare_.size();
    for (size_t i = 0; i < spare_.size(); ++i) {
      const DeviceBlock& b = spare_[i];
      if (b.device != device || b.capacity < bytes) continue;
      if (best == spare_.size() || b.capacity < spare_[best].capacity) best = i;
    }
    if (best < spare_.size()) {
      DeviceBlock b = spare_[best];
      spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(best));
      spare_bytes_ -= b.capacity;
      return b;
    }
  }
  CudaDeviceScope scope(*rt_, device);
  HVD_CHECK(scope.status());
  DeviceBlock b;
  b.device = device;
  Status s = rt_->Malloc(&b.data, bytes);
  if (!s.ok() || b.data == nullptr) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(bytes) +
                                        " bytes of CUDA device " + std::to_string(device) +
                                        " memory for the result: " + s.message());
  }
  b.capacity = bytes;
  return b;
}

void DevicePool::Give(DeviceBlock b) {
  if (b.data == nullptr) return;
  std::vector<DeviceBlock> drop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    spare_.push_back(b);
    spare_bytes_ += b.capacity;
    while (spare_bytes_ > max_bytes_ && !spare_.empty()) {  // oldest first
      drop.push_back(spare_.front());
      spare_bytes_ -= spare_.front().capacity;
      spare_.erase(spare_.begin());
    }
  }
  for (const DeviceBlock& d : drop) FreeBlock(d);
}

size_t DevicePool::spare_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spare_bytes_;
}

Status DevicePool::CopyToHost(void* dst, const DeviceBlock& b, size_t bytes) const {
  if (bytes == 0) return Status::Ok();
  CudaDeviceScope scope(*rt_, b.device);
  HVD_CHECK(scope.status());
  // The legacy default stream: the result is complete (the handle waited
  // for it), so the copy needs no ordering beyond its own.
  HVD_CHECK(rt_->CopyToHost(dst, b.data, bytes, nullptr));
  return rt_->StreamSynchronize(nullptr);
}

}  // namespace hvd
