// An application that initialises MPI itself, then uses hvd, then finalises
// MPI itself. Run under mpirun with one argument, the thread level it asks
// MPI for:
//   multiple    MPI_Init_thread(MULTIPLE); hvd from params.mpi_comm; the
//               application calls MPI while hvd operations are in flight
//   serialized  MPI_Init_thread(SERIALIZED); hvd_init picks the transport by
//               itself; one warning saying what the application must not do
//   funneled    MPI_Init_thread(FUNNELED): hvd_init fails with
//               HVD_ERR_UNSUPPORTED and says why
//   single      plain MPI_Init (Open MPI: MPI_THREAD_SINGLE): the same
// In every case MPI must still work after hvd is gone (hvd must not finalise
// MPI it did not initialise), and the application's MPI_Finalize ends it.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "hvd.h"
#include "mp_checks.h"

namespace {

using hvd::test::g_checks;
using hvd::test::g_failures;
using hvd::test::g_rank;

std::mutex g_log_mu;
std::vector<std::string> g_warnings;

// Keeps warnings and errors for the checks and shows everything (the test
// driver raises HVD_LOG_LEVEL to debug to see which transport connected).
void CaptureLog(int level, const char* msg, void*) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stderr, "[hvd %d] level %d: %s\n", g_rank, level, msg);
  if (level <= HVD_LOG_WARNING) g_warnings.emplace_back(msg);
}

// The application's own MPI: sum of rank + 1 over the world.
void CheckMpiWorks(int n, const char* when) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  CHECK_TRUE(initialized == 1 && finalized == 0, "%s: MPI initialised %d finalised %d", when,
             initialized, finalized);
  if (!initialized || finalized) return;
  long long mine = g_rank + 1, sum = 0;
  int rc = MPI_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  CHECK_TRUE(rc == MPI_SUCCESS && sum == static_cast<long long>(n) * (n + 1) / 2,
             "%s: application MPI_Allreduce rc %d sum %lld", when, rc, sum);
}

// hvd_mpi_threads_supported: 1 exactly when MPI runs at MULTIPLE.
void CheckThreadsSupported(int want) {
  int v = -1;
  hvd_status_t s = hvd_mpi_threads_supported(nullptr, &v);
  CHECK_TRUE(s == HVD_OK && v == want, "hvd_mpi_threads_supported -> %s, %d (want %d): %s",
             hvd_status_string(s), v, want, hvd_last_error());
}

void CheckAllreduces(int n) {
  // Small (MPI_Iallreduce) and large (the ring) float32 sums.
  for (size_t count : {size_t{1000}, size_t{300000}}) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(g_rank * 10 + static_cast<int>(i % 7));
    int64_t shape[1] = {static_cast<int64_t>(count)};
    hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    std::string name = "app.sum." + std::to_string(count);
    CHECK_OK(hvd_allreduce(nullptr, name.c_str(), &t, v.data(), HVD_SUM));
    for (size_t i = 0; i < count; ++i) {
      float want = static_cast<float>(10 * n * (n - 1) / 2 + n * static_cast<int>(i % 7));
      if (v[i] != want) {
        CHECK_TRUE(false, "%s[%zu] = %g, want %g", name.c_str(), i, v[i], want);
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string level = argc > 1 ? argv[1] : "";
  int want = -1;
  if (level == "multiple") want = MPI_THREAD_MULTIPLE;
  if (level == "serialized") want = MPI_THREAD_SERIALIZED;
  if (level == "funneled") want = MPI_THREAD_FUNNELED;
  if (level == "single") want = MPI_THREAD_SINGLE;
  if (want < 0) {
    std::fprintf(stderr, "usage: %s multiple|serialized|funneled|single\n", argv[0]);
    return 2;
  }
  int provided = -1;
  if (level == "single") {
    MPI_Init(&argc, &argv);
    MPI_Query_thread(&provided);
  } else {
    MPI_Init_thread(&argc, &argv, want, &provided);
  }
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  // Open MPI gives what was asked for; anything else would test another case.
  CHECK_TRUE(provided == want, "asked MPI for level %d, got %d", want, provided);

  MPI_Comm world = MPI_COMM_WORLD;
  hvd_params_t params = HVD_PARAMS_INIT;
  params.log_fn = CaptureLog;
  params.log_user = nullptr;
  params.mask |= HVD_PARAM_LOG_FN;
  if (level == "multiple" || level == "funneled") {
    params.mpi_comm = &world;
    params.mask |= HVD_PARAM_MPI_COMM;
  }
  hvd_status_t s = hvd_init(&params);

  if (provided < MPI_THREAD_SERIALIZED) {
    const char* name = provided == MPI_THREAD_FUNNELED ? "MPI_THREAD_FUNNELED" : "MPI_THREAD_SINGLE";
    CHECK_TRUE(s == HVD_ERR_UNSUPPORTED, "hvd_init at %s -> %s (want HVD_ERR_UNSUPPORTED)", name,
               hvd_status_string(s));
    const std::string err = hvd_last_error();
    CHECK_TRUE(err.find(name) != std::string::npos && err.find("MPI_THREAD_MULTIPLE") != std::string::npos &&
                   err.find("background thread") != std::string::npos,
               "hvd_init's message does not explain the thread level: %s", err.c_str());
    if (s == HVD_OK) hvd_shutdown();
  } else {
    CHECK_TRUE(s == HVD_OK, "hvd_init -> %s: %s", hvd_status_string(s), hvd_last_error());
    if (s == HVD_OK) {
      const char* transport = nullptr;
      CHECK_OK(hvd_context_transport(nullptr, &transport));
      CHECK_TRUE(transport != nullptr && std::strcmp(transport, "mpi") == 0, "transport %s",
                 transport ? transport : "(null)");
      int r = -1, size = -1;
      CHECK_OK(hvd_rank(&r));
      CHECK_OK(hvd_size(&size));
      CHECK_TRUE(r == g_rank && size == n, "hvd rank %d of %d, MPI rank %d of %d", r, size, g_rank, n);
      CheckThreadsSupported(provided == MPI_THREAD_MULTIPLE ? 1 : 0);
      CheckAllreduces(n);
      if (provided == MPI_THREAD_MULTIPLE) {
        // The application's own MPI while an hvd operation is in flight.
        std::vector<double> v(200000, g_rank + 1.0);
        int64_t shape[1] = {200000};
        hvd_tensor_t t = {v.data(), HVD_FLOAT64, 1, shape, HVD_DEVICE_CPU, nullptr};
        hvd_handle_t h = nullptr;
        CHECK_OK(hvd_allreduce_async(nullptr, "app.concurrent", &t, v.data(), HVD_SUM, 1.0, 1.0, &h));
        for (int i = 0; i < 20; ++i) CheckMpiWorks(n, "while hvd works");
        if (h != nullptr) {
          CHECK_OK(hvd_handle_wait(h, 60));
          hvd_handle_release(h);
        }
        const double want_v = n * (n + 1) / 2.0;
        CHECK_TRUE(v[0] == want_v && v[199999] == want_v, "concurrent allreduce: %g, want %g", v[0], want_v);
      }
      CHECK_OK(hvd_shutdown());
    }
    // Exactly one warning below MULTIPLE, naming the level and the rule.
    std::lock_guard<std::mutex> lock(g_log_mu);
    if (provided == MPI_THREAD_MULTIPLE) {
      CHECK_TRUE(g_warnings.empty(), "unexpected warning: %s", g_warnings.empty() ? "" : g_warnings[0].c_str());
    } else {
      CHECK_TRUE(g_warnings.size() == 1, "%zu warnings, want 1", g_warnings.size());
      const std::string w = g_warnings.empty() ? "" : g_warnings[0];
      CHECK_TRUE(w.find("MPI_THREAD_SERIALIZED") != std::string::npos &&
                     w.find("must not call MPI") != std::string::npos,
                 "warning does not say what works: %s", w.c_str());
    }
  }

  // hvd must have left MPI alone: still initialised, not finalised, working.
  CheckMpiWorks(n, "after hvd");
  MPI_Finalize();
  int finalized = 0;
  MPI_Finalized(&finalized);
  CHECK_TRUE(finalized == 1, "MPI_Finalize did not finalise");
  std::printf("app_init %s rank %d of %d: %d checks, %d failed\n", level.c_str(), g_rank, n, g_checks,
              g_failures);
  return g_failures == 0 ? 0 : 1;
}
