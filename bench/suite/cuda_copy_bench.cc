// The core's batched copy kernel (libhvd_cuda_kernels.so's scale_copy,
// src/cuda/cuda_kernels.h) against the CUDA runtime's own device-to-device
// copies on the same GPU: N tensors of S bytes gathered into one buffer
// (what a fused allreduce's copy-in does), as one scale_copy call (one
// launch per batch_capacity tensors) and as N cudaMemcpyAsync calls on one
// stream; also with a scale factor (AVERAGE's copy-out), which memcpy
// cannot do. Timed with CUDA events, each point the median of the timed
// iterations. One result line per point:
//   BENCH {"kind":"cudacopy","system":"hvd-kernel"|"cudaMemcpyAsync",
//          "variant":"copy"|"scale","tensors":N,"tensor_bytes":S,
//          "bytes":N*S,"time_us":...,"min_us":...,"gbs":...}
// Without a device it prints one line "SKIP <reason>" and exits 0.
//
//   cuda-copy-bench --kernels build/lib/libhvd_cuda_kernels.so
//                   [--tensors 64,256] [--sizes 16K,256K,4M] [--quick]
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "cuda/cuda_kernels.h"
#include "hvd.h"

namespace {

using hvdbench::Median;
using hvdbench::Min;
using hvdbench::ParseSizes;

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "cuda-copy-bench: %s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

std::vector<size_t> ParseCounts(const std::string& s) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    out.push_back(std::strtoul(s.substr(pos, c - pos).c_str(), nullptr, 10));
    pos = c + 1;
  }
  return out;
}

void Emit(const char* system, const char* variant, size_t n, size_t bytes,
          const std::vector<double>& t) {
  const double med = Median(t);
  std::printf(
      "BENCH {\"kind\":\"cudacopy\",\"system\":\"%s\",\"variant\":\"%s\",\"tensors\":%zu,"
      "\"tensor_bytes\":%zu,\"bytes\":%zu,\"iters\":%zu,\"time_us\":%.3f,\"min_us\":%.3f,"
      "\"gbs\":%.3f}\n",
      system, variant, n, bytes, n * bytes, t.size(), med, Min(t),
      med > 0 ? static_cast<double>(n * bytes) / (med * 1e3) : 0.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string lib, tensors = "64,256", sizes = "16K,64K,256K,1M,4M";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--kernels") lib = next();
    else if (a == "--tensors") tensors = next();
    else if (a == "--sizes") sizes = next();
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: cuda-copy-bench --kernels LIB [--tensors N,..] [--sizes S,..] [--quick]\n");
      return 2;
    }
  }
  int devices = 0;
  const cudaError_t de = cudaGetDeviceCount(&devices);
  if (de != cudaSuccess || devices == 0) {
    std::printf("SKIP no CUDA device (cudaGetDeviceCount: %s)\n",
                de != cudaSuccess ? cudaGetErrorString(de) : "0 devices");
    return 0;
  }
  void* dl = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  auto fn = dl != nullptr ? reinterpret_cast<hvd_cuda_kernels_v1_fn>(dlsym(dl, "hvd_cuda_kernels_v1"))
                          : nullptr;
  const hvd_cuda_kernels_v1_t* k = fn != nullptr ? fn() : nullptr;
  if (k == nullptr || k->abi_version != HVD_CUDA_KERNELS_ABI) {
    std::fprintf(stderr, "cuda-copy-bench: cannot load the kernels from '%s': %s\n", lib.c_str(),
                 dl == nullptr ? dlerror() : "no usable hvd_cuda_kernels_v1 table");
    return 1;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s (sm_%d%d), batch capacity %u\n", prop.name, prop.major, prop.minor,
              k->batch_capacity);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int warm = quick ? 1 : 5, iters = quick ? 2 : 30;
  for (size_t n : ParseCounts(tensors)) {
    for (size_t bytes : ParseSizes(sizes)) {
      std::vector<void*> src(n);
      for (size_t i = 0; i < n; ++i) {
        CK(cudaMalloc(&src[i], bytes));
        CK(cudaMemset(src[i], static_cast<int>(i & 0x3f), bytes));
      }
      void* dst = nullptr;
      CK(cudaMalloc(&dst, n * bytes));
      std::vector<hvd_cuda_copy_t> copies(n);
      for (size_t i = 0; i < n; ++i) {
        copies[i] = {src[i], static_cast<char*>(dst) + i * bytes, bytes / sizeof(float)};
      }
      auto time = [&](auto body) {
        std::vector<double> t;
        for (int it = 0; it < warm + iters; ++it) {
          CK(cudaEventRecord(e0, s));
          body();
          CK(cudaEventRecord(e1, s));
          CK(cudaEventSynchronize(e1));
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (it >= warm) t.push_back(ms * 1e3);
        }
        return t;
      };
      const hvd_cuda_scale_t copy{HVD_FLOAT32, 0, 1, 1.0};
      const hvd_cuda_scale_t scale{HVD_FLOAT32, 0, 1, 0.125};
      Emit("hvd-kernel", "copy", n, bytes, time([&] {
             const int e = k->scale_copy(copies.data(), n, &copy, s);
             if (e != 0) {
               std::fprintf(stderr, "scale_copy: %s\n", k->error_string(e));
               std::exit(1);
             }
           }));
      Emit("cudaMemcpyAsync", "copy", n, bytes, time([&] {
             for (size_t i = 0; i < n; ++i) {
               CK(cudaMemcpyAsync(copies[i].dst, src[i], bytes, cudaMemcpyDeviceToDevice, s));
             }
           }));
      Emit("hvd-kernel", "scale", n, bytes, time([&] {
             const int e = k->scale_copy(copies.data(), n, &scale, s);
             if (e != 0) std::exit(1);
           }));
      for (void* p : src) CK(cudaFree(p));
      CK(cudaFree(dst));
    }
  }
  return 0;
}
