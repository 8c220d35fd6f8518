// Sub-communicators: MPI_COMM_WORLD split by color (world rank % 2) into two
// groups, each an independent hvd world made from params.mpi_comm, plus a
// second context over the whole world in the same process, used at the same
// time. Checks every context's rank, size and topology and the exact values
// of its collectives, so traffic crossing between groups would show.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hvd.h"
#include "mp_checks.h"

namespace {

using hvd::test::g_checks;
using hvd::test::g_failures;
using hvd::test::g_rank;

hvd_context_t MakeContext(MPI_Comm* comm) {
  hvd_params_t params = HVD_PARAMS_INIT;
  params.mpi_comm = comm;
  params.mask |= HVD_PARAM_MPI_COMM;
  hvd_context_t ctx = nullptr;
  hvd_status_t s = hvd_context_create(&params, &ctx);
  CHECK_TRUE(s == HVD_OK, "hvd_context_create -> %s: %s", hvd_status_string(s), hvd_last_error());
  return s == HVD_OK ? ctx : nullptr;
}

void CheckTopology(hvd_context_t ctx, const char* what, int rank, int size) {
  int v[6] = {-9, -9, -9, -9, -9, -9};
  CHECK_OK(hvd_context_rank(ctx, &v[0]));
  CHECK_OK(hvd_context_size(ctx, &v[1]));
  CHECK_OK(hvd_context_local_rank(ctx, &v[2]));
  CHECK_OK(hvd_context_local_size(ctx, &v[3]));
  CHECK_OK(hvd_context_cross_rank(ctx, &v[4]));
  CHECK_OK(hvd_context_cross_size(ctx, &v[5]));
  // One host: the node is the whole communicator, one rank per cross group.
  CHECK_TRUE(v[0] == rank && v[1] == size && v[2] == rank && v[3] == size && v[4] == 0 && v[5] == 1,
             "%s: rank %d size %d local %d/%d cross %d/%d, want %d of %d, local %d/%d, cross 0/1",
             what, v[0], v[1], v[2], v[3], v[4], v[5], rank, size, rank, size);
  const char* transport = nullptr;
  CHECK_OK(hvd_context_transport(ctx, &transport));
  CHECK_TRUE(transport && std::strcmp(transport, "mpi") == 0, "%s: transport %s", what,
             transport ? transport : "(null)");
  int multiple = -1;
  hvd_status_t s = hvd_mpi_threads_supported(ctx, &multiple);
  CHECK_TRUE(s == HVD_OK && multiple == 1, "%s: hvd_mpi_threads_supported -> %s, %d", what,
             hvd_status_string(s), multiple);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  CHECK_TRUE(provided == MPI_THREAD_MULTIPLE, "MPI gave thread level %d", provided);

  const int color = g_rank % 2;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, g_rank, &sub);
  int sub_rank = -1, sub_size = -1;
  MPI_Comm_rank(sub, &sub_rank);
  MPI_Comm_size(sub, &sub_size);
  std::vector<int> members;  // world ranks of this group, in sub-rank order
  for (int r = color; r < n; r += 2) members.push_back(r);
  CHECK_TRUE(sub_size == static_cast<int>(members.size()) && members[sub_rank] == g_rank,
             "MPI_Comm_split: rank %d of %d", sub_rank, sub_size);

  MPI_Comm world = MPI_COMM_WORLD;
  hvd_context_t group = MakeContext(&sub);
  hvd_context_t all = MakeContext(&world);
  if (group == nullptr || all == nullptr) {
    std::fprintf(stderr, "rank %d: cannot continue without contexts\n", g_rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CheckTopology(group, "group context", sub_rank, sub_size);
  CheckTopology(all, "world context", g_rank, n);

  // Both contexts at once: the group's allreduce (small and ring-sized) and
  // the world's, all in flight together, with the same names.
  const size_t kCounts[] = {100, 300000};
  std::vector<std::vector<int64_t>> gbuf, wbuf;
  std::vector<hvd_handle_t> handles;
  for (size_t count : kCounts) {
    gbuf.emplace_back(count);
    wbuf.emplace_back(count);
    for (size_t i = 0; i < count; ++i) {
      gbuf.back()[i] = (g_rank + 1) * 1000 + static_cast<int64_t>(i % 13);
      wbuf.back()[i] = (g_rank + 1) * 7 - static_cast<int64_t>(i % 5);
    }
  }
  std::vector<int64_t> shapes(2);
  for (size_t k = 0; k < 2; ++k) {
    shapes[k] = static_cast<int64_t>(kCounts[k]);
    std::string name = "split.sum." + std::to_string(k);
    hvd_tensor_t tg = {gbuf[k].data(), HVD_INT64, 1, &shapes[k], HVD_DEVICE_CPU, nullptr};
    hvd_tensor_t tw = {wbuf[k].data(), HVD_INT64, 1, &shapes[k], HVD_DEVICE_CPU, nullptr};
    hvd_handle_t hg = nullptr, hw = nullptr;
    CHECK_OK(hvd_allreduce_async(group, name.c_str(), &tg, gbuf[k].data(), HVD_SUM, 1, 1, &hg));
    CHECK_OK(hvd_allreduce_async(all, name.c_str(), &tw, wbuf[k].data(), HVD_SUM, 1, 1, &hw));
    handles.push_back(hg);
    handles.push_back(hw);
  }
  for (hvd_handle_t h : handles) {
    if (h == nullptr) continue;
    CHECK_OK(hvd_handle_wait(h, 120));
    hvd_handle_release(h);
  }
  int64_t member_sum = 0;
  for (int r : members) member_sum += r + 1;
  const int64_t world_sum = static_cast<int64_t>(n) * (n + 1) / 2;
  for (size_t k = 0; k < 2; ++k) {
    for (size_t i = 0; i < kCounts[k]; ++i) {
      const int64_t g_want = member_sum * 1000 + sub_size * static_cast<int64_t>(i % 13);
      const int64_t w_want = world_sum * 7 - n * static_cast<int64_t>(i % 5);
      if (gbuf[k][i] != g_want || wbuf[k][i] != w_want) {
        CHECK_TRUE(false, "allreduce %zu[%zu]: group %lld want %lld, world %lld want %lld", k, i,
                   static_cast<long long>(gbuf[k][i]), static_cast<long long>(g_want),
                   static_cast<long long>(wbuf[k][i]), static_cast<long long>(w_want));
        break;
      }
    }
  }

  // Allgather of world ranks: the group's members, in sub-rank order.
  {
    int32_t mine = g_rank;
    int64_t shape[1] = {1};
    hvd_tensor_t t = {&mine, HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    hvd_handle_t h = nullptr;
    CHECK_OK(hvd_allgather_async(group, "split.who", &t, &h));
    if (h != nullptr) {
      CHECK_OK(hvd_handle_wait(h, 60));
      const void* data = nullptr;
      size_t bytes = 0;
      CHECK_OK(hvd_handle_output(h, &data, &bytes));
      CHECK_TRUE(bytes == members.size() * sizeof(int32_t), "allgather bytes %zu", bytes);
      const int32_t* got = static_cast<const int32_t*>(data);
      for (size_t i = 0; data && i < members.size() && i * sizeof(int32_t) < bytes; ++i) {
        CHECK_TRUE(got[i] == members[i], "allgather[%zu] = %d, want %d", i, got[i], members[i]);
      }
      hvd_handle_release(h);
    }
  }
  // Broadcast from the group's rank 0 (world rank `color`).
  {
    std::vector<int32_t> v(1000, g_rank);
    int64_t shape[1] = {1000};
    hvd_tensor_t t = {v.data(), HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    CHECK_OK(hvd_broadcast(group, "split.bcast", &t, v.data(), 0));
    CHECK_TRUE(v[0] == color && v[999] == color, "broadcast: %d, want %d", v[0], color);
  }
  CHECK_OK(hvd_barrier(group));
  CHECK_OK(hvd_barrier(all));

  CHECK_OK(hvd_context_destroy(group));
  CHECK_OK(hvd_context_destroy(all));
  MPI_Comm_free(&sub);
  // MPI is the application's: still usable, finalised by it.
  long long one = 1, total = 0;
  int rc = MPI_Allreduce(&one, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK_TRUE(rc == MPI_SUCCESS && total == n, "MPI after hvd: rc %d, %lld", rc, total);
  MPI_Finalize();
  std::printf("split_comm rank %d of %d (group %d: rank %d of %d): %d checks, %d failed\n", g_rank, n,
              color, sub_rank, sub_size, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
