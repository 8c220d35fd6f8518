// Byte counts beyond INT_MAX (MPI's counts are int): a broadcast of 2 GiB + 5
// bytes, an allgather whose result is 2.2 GiB, and an allreduce of 2^31 + 7
// uint8 elements, every byte checked. Needs about 3.5 GiB per rank, so the
// test driver runs it only with HVD_TEST_LARGE=1. Run under mpirun -np 2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hvd.h"

namespace {

int g_rank = -1;
int g_failures = 0;

void Fail(const std::string& what) {
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED %s: %s\n", g_rank, what.c_str(), hvd_last_error());
}

uint8_t Pattern(size_t i, int salt) { return static_cast<uint8_t>((i * 31 + static_cast<size_t>(salt)) % 251); }

}  // namespace

int main() {
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "init failed: %s\n", hvd_last_error());
    return 2;
  }
  int n = 0;
  hvd_rank(&g_rank);
  hvd_size(&n);
  const int root = n - 1;
  {
    const size_t bytes = (size_t{1} << 31) + 5;
    std::vector<uint8_t> v(bytes, 0);
    if (g_rank == root) {
      for (size_t i = 0; i < bytes; ++i) v[i] = Pattern(i, 7);
    }
    int64_t shape[1] = {static_cast<int64_t>(bytes)};
    hvd_tensor_t t = {v.data(), HVD_UINT8, 1, shape, HVD_DEVICE_CPU, nullptr};
    if (hvd_broadcast(nullptr, "large.bcast", &t, v.data(), root) != HVD_OK) Fail("broadcast");
    for (size_t i = 0; i < bytes; ++i) {
      if (v[i] != Pattern(i, 7)) {
        Fail("broadcast byte " + std::to_string(i));
        break;
      }
    }
  }
  {
    const size_t rows = (size_t{1} << 30) + 100 + static_cast<size_t>(g_rank) * 3;  // ~1 GiB each
    std::vector<uint8_t> v(rows);
    for (size_t i = 0; i < rows; ++i) v[i] = Pattern(i, g_rank);
    int64_t shape[1] = {static_cast<int64_t>(rows)};
    hvd_tensor_t t = {v.data(), HVD_UINT8, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h = nullptr;
    if (hvd_allgather_async(nullptr, "large.allgather", &t, &h) != HVD_OK || hvd_handle_wait(h, 600) != HVD_OK) {
      Fail("allgather");
    } else {
      const void* data = nullptr;
      size_t bytes = 0;
      hvd_handle_output(h, &data, &bytes);
      const uint8_t* out = static_cast<const uint8_t*>(data);
      size_t off = 0;
      for (int r = 0; r < n && g_failures == 0; ++r) {
        const size_t rr = (size_t{1} << 30) + 100 + static_cast<size_t>(r) * 3;
        for (size_t i = 0; i < rr; ++i) {
          if (off + i >= bytes || out[off + i] != Pattern(i, r)) {
            Fail("allgather byte " + std::to_string(off + i));
            break;
          }
        }
        off += rr;
      }
      if (off != bytes) Fail("allgather size " + std::to_string(bytes));
    }
    if (h != nullptr) hvd_handle_release(h);
  }
  {
    const size_t count = (size_t{1} << 31) + 7;  // elements: more than INT_MAX
    std::vector<uint8_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<uint8_t>(i % 7 + static_cast<size_t>(g_rank));
    int64_t shape[1] = {static_cast<int64_t>(count)};
    hvd_tensor_t t = {v.data(), HVD_UINT8, 1, shape, HVD_DEVICE_CPU, nullptr};
    if (hvd_allreduce(nullptr, "large.allreduce", &t, v.data(), HVD_MAX) != HVD_OK) Fail("allreduce");
    for (size_t i = 0; i < count; ++i) {
      if (v[i] != static_cast<uint8_t>(i % 7 + static_cast<size_t>(n - 1))) {
        Fail("allreduce element " + std::to_string(i));
        break;
      }
    }
  }
  hvd_shutdown();
  std::printf("large_counts rank %d of %d: %d failed\n", g_rank, n, g_failures);
  return g_failures == 0 ? 0 : 1;
}
