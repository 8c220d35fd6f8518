// A stand-in for libhvd_cuda_kernels.so on hosts without a GPU: the same
// table (src/cuda/cuda_kernels.h), whose "kernels" are host functions
// queued on the fake CUDA runtime's streams (fake_cudart.c's
// cudaLaunchHostFunc), so they run in stream order when the stream is
// synchronized, as a launch would. The element work is the host path's own
// (common/kernels.h), the reference the real kernels are tested against
// (test_cuda_kernel_plan); what this checks is the core around them:
// which copies it asks for, on which stream, in which order.
//
// The runtime is the one HVD_CUDA_RUNTIME names (dlopen returns the copy
// the core already loaded). fake_cuda_kernels_launches() counts calls.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "common/kernels.h"
#include "cuda/cuda_kernels.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<long> g_launches{0};
std::atomic<long> g_copies{0};

using LaunchHostFunc = int (*)(void*, void (*)(void*), void*);
using ErrorString = const char* (*)(int);

struct Runtime {
  LaunchHostFunc launch = nullptr;
  ErrorString error_string = nullptr;
  Runtime() {
    const char* lib = std::getenv("HVD_CUDA_RUNTIME");
    void* dl = lib != nullptr ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (dl == nullptr) return;
    launch = reinterpret_cast<LaunchHostFunc>(dlsym(dl, "cudaLaunchHostFunc"));
    error_string = reinterpret_cast<ErrorString>(dlsym(dl, "cudaGetErrorString"));
  }
};

const Runtime& Rt() {
  static const Runtime* rt = new Runtime();
  return *rt;
}

struct Job {
  std::vector<hvd_cuda_copy_t> copies;
  hvd_cuda_scale_t how;
};

void Run(void* arg) {
  Job* job = static_cast<Job*>(arg);
  const hvd_cuda_scale_t& h = job->how;
  const auto dtype = static_cast<hvd_dtype_t>(h.dtype);
  for (const hvd_cuda_copy_t& c : job->copies) {
    if (h.divisor != 1) {
      if (c.dst != c.src) std::memmove(c.dst, c.src, c.count * hvd::DtypeSize(dtype));
      hvd::DivideInPlace(c.dst, c.count, dtype, h.divisor);
      hvd::ScaleInPlace(c.dst, c.count, dtype, h.scale);
    } else {
      hvd::ScaleCopy(c.dst, c.src, c.count, dtype, h.scale);
    }
  }
  delete job;
}

constexpr int kInvalidValue = 1;  // cudaErrorInvalidValue

int ScaleCopy(const hvd_cuda_copy_t* copies, size_t n, const hvd_cuda_scale_t* how,
              void* stream) noexcept {
  if (n == 0) return 0;
  if (copies == nullptr || how == nullptr || Rt().launch == nullptr) return kInvalidValue;
  if (hvd::DtypeSize(how->dtype) == 0 || how->divisor == 0 ||
      (how->divisor != 1 && hvd::IsFloatingDtype(static_cast<hvd_dtype_t>(how->dtype)))) {
    return kInvalidValue;
  }
  Job* job = new (std::nothrow) Job();
  if (job == nullptr) return 2;  // cudaErrorMemoryAllocation
  try {
    job->copies.assign(copies, copies + n);
  } catch (...) {
    delete job;
    return 2;
  }
  job->how = *how;
  g_launches.fetch_add(1);
  g_copies.fetch_add(static_cast<long>(n));
  const int e = Rt().launch(stream, &Run, job);
  if (e != 0) delete job;
  return e;
}

const char* ErrorText(int e) noexcept {
  return Rt().error_string != nullptr ? Rt().error_string(e) : "fake kernels: no runtime";
}

const hvd_cuda_kernels_v1_t kTable = {HVD_CUDA_KERNELS_ABI, sizeof(hvd_cuda_kernels_v1_t), 128, 0,
                                      &ScaleCopy, &ErrorText};

}  // namespace

FAKE_EXPORT const hvd_cuda_kernels_v1_t* hvd_cuda_kernels_v1(void) { return &kTable; }
FAKE_EXPORT long fake_cuda_kernels_launches(void) { return g_launches.load(); }
FAKE_EXPORT long fake_cuda_kernels_copies(void) { return g_copies.load(); }
FAKE_EXPORT void fake_cuda_kernels_reset(void) {
  g_launches.store(0);
  g_copies.store(0);
}
