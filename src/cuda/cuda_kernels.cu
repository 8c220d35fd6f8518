// libhvd_cuda_kernels.so: the table of cuda_kernels.h. The work is
// batched_copy.h's (the plan, and RunBlockAs for each block); this file is
// the kernel, one instantiation per element operation, and the launches.
#include <cuda_runtime.h>

#include "cuda/batched_copy.h"
#include "cuda/cuda_kernels.h"

namespace hvd {
namespace batched_copy {
namespace {

// One block per chunk of a piece (LaunchParams.block_start); the parameter
// is read in place (__grid_constant__), not copied per thread.
template <typename Op>
__global__ void __launch_bounds__(kThreadsPerBlock)
    BatchedCopyKernel(const __grid_constant__ LaunchParams p) {
  RunBlockAs<Op>(p, blockIdx.x, threadIdx.x, blockDim.x);
}

// The kernel for p's dtype and flags (the same choice as RunBlock).
const void* KernelFor(const LaunchParams& p) {
  if (p.flags == 0) return reinterpret_cast<const void*>(&BatchedCopyKernel<CopyOp>);
  switch (p.dtype) {
#define HVD_KERNEL_CASE(dtype, Op) \
  case dtype:                      \
    return reinterpret_cast<const void*>(&BatchedCopyKernel<Op>);
    HVD_BATCHED_COPY_SCALING_OPS(HVD_KERNEL_CASE)
#undef HVD_KERNEL_CASE
    default:
      return nullptr;
  }
}

int ScaleCopy(const hvd_cuda_copy_t* copies, size_t n, const hvd_cuda_scale_t* how,
              void* stream) noexcept {
  try {
    if (CheckArguments(copies, n, how) != nullptr) return cudaErrorInvalidValue;
    LaunchPlanner plan(copies, n, *how);
    LaunchParams params;
    while (plan.Next(&params)) {
      const void* kernel = KernelFor(params);
      if (kernel == nullptr) return cudaErrorInvalidValue;
      void* args[] = {&params};
      // cudaLaunchKernel is what <<<...>>> expands to; its return value is
      // this launch's own error, where cudaGetLastError() could also return
      // an earlier call's. That error is consumed all the same, as
      // cudaGetLastError() after <<<...>>> would.
      const cudaError_t err = cudaLaunchKernel(kernel, dim3(params.blocks), dim3(kThreadsPerBlock),
                                               args, 0, static_cast<cudaStream_t>(stream));
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return err;
      }
    }
    return cudaSuccess;
  } catch (...) {
    return cudaErrorUnknown;
  }
}

const char* ErrorString(int err) noexcept {
  try {
    return cudaGetErrorString(static_cast<cudaError_t>(err));
  } catch (...) {
    return "unknown CUDA error";
  }
}

const hvd_cuda_kernels_v1_t kTable = {
    HVD_CUDA_KERNELS_ABI, sizeof(hvd_cuda_kernels_v1_t), kBatchCapacity, 0, &ScaleCopy,
    &ErrorString,
};

}  // namespace
}  // namespace batched_copy
}  // namespace hvd

// The one export (cuda_kernels.map; everything else is hidden).
#define HVD_CUDA_KERNELS_EXPORT __attribute__((visibility("default")))

extern "C" HVD_CUDA_KERNELS_EXPORT const hvd_cuda_kernels_v1_t* hvd_cuda_kernels_v1(void) {
  return &hvd::batched_copy::kTable;
}
