// One rank of a job on the simulated cluster (tests/cluster/cluster.sh).
// Uses only the public C API of libhvd.so.
//
//   cluster_probe topo LOCAL_SIZE CROSS_SIZE
//     Checks the job's topology and that the cluster's hosts are what they
//     claim: every rank allgathers its host name and the inodes of its
//     namespaces, then each rank checks that
//       - its local_size and cross_size are LOCAL_SIZE and CROSS_SIZE, and
//         agree with the table (local_size = ranks with its host name, local
//         ranks 0..local_size-1 once each per host, cross_size = hosts that
//         have a rank with its local rank);
//       - ranks with the same host name share the UTS, IPC, mount and network
//         namespaces, and ranks on different hosts share none of them: the
//         inputs of the library's host identity (host name, IPC namespace)
//         differ exactly between hosts;
//       - every rank shares the PID namespace (the cluster shares it);
//       - /dev/shm is per host: each rank creates a file there, and sees
//         exactly its host's local_size of them.
//     Prints "probe rank R: host H local L/LS cross C/CS shm files K: ok" and
//     exits 0, or prints each failure and exits 1.
//
//   cluster_probe loop OUTDIR [PAUSE_MS [STEPS]]
//     Allreduces (checked exactly) every PAUSE_MS (default 20) ms until one
//     fails or 60 s pass; with STEPS, until STEPS have completed (then shuts
//     down, prints "probe rank R: STEPS steps ok" and exits 0). Prints
//     "probe rank R: up" after the first, and with PAUSE_MS given
//     "probe rank R: step N done" after each. On a failure it writes
//       rank R (host H): failed after S s with <status>: <error>
//     (S: seconds since its last completed allreduce) to OUTDIR/rank-R.txt
//     and stdout, "FAILED_AT SUBMITTED_AT" (the wall clock, in seconds since
//     the epoch, when the failed allreduce returned and when it was
//     submitted: the hosts share this machine's clock, so a test measures
//     from the fault) and DETECTED_AT (when the library logged its first
//     error, 0 if it logged none: a rank idle between steps learns of a
//     fault in its background negotiation, before its next allreduce) to
//     OUTDIR/rank-R.time, appends "shutdown took T s" to
//     rank-R.txt once hvd_shutdown returns, and exits 4; exits 1 if nothing
//     failed within 60 s. Its stderr (the
//     library's log) goes to OUTDIR/rank-R.log. SIGPIPE is ignored (the
//     output of a cut-off host's rank goes nowhere); SIGTERM too, so
//     that what each rank reports is its own detection, not the launcher
//     stopping it (the test gives hvdrun a long grace period).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "hvd.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// loop's log sink: each line to stderr with its wall-clock time; the time of
// the first error kept in *user (a std::atomic<double>).
void LogWithTime(int level, const char* msg, void* user) {
  const double now = WallNow();
  auto* first_error = static_cast<std::atomic<double>*>(user);
  double none = 0;
  if (level == HVD_LOG_ERROR) first_error->compare_exchange_strong(none, now);
  std::fprintf(stderr, "[%.3f] %s\n", now, msg);
}

int g_rank = -1;
int g_failures = 0;

#define CHECK(cond, ...)                                            \
  do {                                                              \
    if (!(cond)) {                                                  \
      ++g_failures;                                                 \
      std::printf("probe rank %d: FAIL: ", g_rank);                 \
      std::printf(__VA_ARGS__);                                     \
      std::printf("\n");                                            \
      std::fflush(stdout);                                          \
    }                                                               \
  } while (0)

uint64_t NsInode(const char* ns) {
  struct stat st;
  const std::string path = std::string("/proc/self/ns/") + ns;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// What one rank tells the others: fixed size, so an allgather of bytes.
struct Record {
  char host[64];
  uint64_t uts, ipc, mnt, net, pid;
  int32_t local_rank, local_size, cross_rank, cross_size;
};

bool Wait(hvd_handle_t h, const char* what) {
  const hvd_status_t st = hvd_handle_wait(h, 60);
  if (st != HVD_OK) {
    CHECK(false, "%s: %s: %s", what, hvd_status_string(st), hvd_last_error());
    return false;
  }
  return true;
}

int Topo(int want_local, int want_cross) {
  int size = 0;
  Record me;
  std::memset(&me, 0, sizeof(me));
  hvd_size(&size);
  hvd_local_rank(&me.local_rank);
  hvd_local_size(&me.local_size);
  hvd_cross_rank(&me.cross_rank);
  hvd_cross_size(&me.cross_size);
  gethostname(me.host, sizeof(me.host) - 1);
  me.uts = NsInode("uts");
  me.ipc = NsInode("ipc");
  me.mnt = NsInode("mnt");
  me.net = NsInode("net");
  me.pid = NsInode("pid");
  CHECK(me.local_size == want_local, "local_size %d, want %d", me.local_size, want_local);
  CHECK(me.cross_size == want_cross, "cross_size %d, want %d", me.cross_size, want_cross);

  int64_t shape[1] = {static_cast<int64_t>(sizeof(Record))};
  hvd_tensor_t t = {&me, HVD_UINT8, 1, shape, HVD_DEVICE_CPU, nullptr};
  hvd_handle_t h = nullptr;
  std::vector<Record> all(static_cast<size_t>(size));
  if (hvd_allgather_async(nullptr, "probe.records", &t, &h) != HVD_OK) {
    CHECK(false, "allgather: %s", hvd_last_error());
    return 1;
  }
  if (!Wait(h, "allgather")) return 1;
  const void* data = nullptr;
  size_t bytes = 0;
  hvd_handle_output(h, &data, &bytes);
  CHECK(bytes == all.size() * sizeof(Record), "allgather gave %zu bytes, want %zu", bytes,
        all.size() * sizeof(Record));
  if (bytes == all.size() * sizeof(Record)) std::memcpy(all.data(), data, bytes);
  hvd_handle_release(h);
  for (Record& r : all) r.host[sizeof(r.host) - 1] = '\0';

  std::set<std::string> hosts;
  int same_host = 0;
  std::set<int> cross_hosts;
  for (int j = 0; j < size; ++j) {
    const Record& o = all[static_cast<size_t>(j)];
    hosts.insert(o.host);
    const bool same = std::strcmp(o.host, me.host) == 0;
    if (same) ++same_host;
    CHECK((o.uts == me.uts) == same, "rank %d (%s): UTS namespace %s mine", j, o.host,
          same ? "differs from" : "is");
    CHECK((o.ipc == me.ipc) == same, "rank %d (%s): IPC namespace %s mine", j, o.host,
          same ? "differs from" : "is");
    CHECK((o.mnt == me.mnt) == same, "rank %d (%s): mount namespace %s mine", j, o.host,
          same ? "differs from" : "is");
    CHECK((o.net == me.net) == same, "rank %d (%s): network namespace %s mine", j, o.host,
          same ? "differs from" : "is");
    CHECK(o.pid == me.pid, "rank %d (%s): another PID namespace", j, o.host);
    if (same) CHECK(o.local_size == me.local_size, "rank %d on my host: local_size %d", j, o.local_size);
  }
  CHECK(me.local_size == same_host, "local_size %d, but %d ranks are on %s", me.local_size,
        same_host, me.host);
  for (const std::string& host : hosts) {
    std::set<int> locals;
    int n = 0;
    for (const Record& o : all) {
      if (host != o.host) continue;
      ++n;
      locals.insert(o.local_rank);
      if (o.local_rank == me.local_rank) cross_hosts.insert(o.cross_rank);
    }
    CHECK(static_cast<int>(locals.size()) == n && (locals.empty() || *locals.rbegin() == n - 1),
          "host %s: local ranks are not 0..%d", host.c_str(), n - 1);
  }
  CHECK(static_cast<int>(cross_hosts.size()) == me.cross_size,
        "cross_size %d, but %zu hosts have local rank %d", me.cross_size, cross_hosts.size(),
        me.local_rank);
  CHECK(me.cross_rank >= 0 && me.cross_rank < me.cross_size, "cross rank %d of %d", me.cross_rank,
        me.cross_size);

  // /dev/shm per host: rank 0 picks a tag, everyone leaves a file, counts.
  int64_t tag = 0;
  if (g_rank == 0) tag = static_cast<int64_t>(std::random_device{}() & 0x7fffffff);
  int64_t one[1] = {1};
  hvd_tensor_t tt = {&tag, HVD_INT64, 1, one, HVD_DEVICE_CPU, nullptr};
  CHECK(hvd_broadcast(nullptr, "probe.tag", &tt, &tag, 0) == HVD_OK, "broadcast: %s",
        hvd_last_error());
  const std::string prefix = "/dev/shm/hvd-cluster-probe-" + std::to_string(tag) + "-";
  const std::string mine = prefix + std::to_string(g_rank);
  { std::ofstream(mine.c_str()) << g_rank << "\n"; }
  CHECK(hvd_barrier(nullptr) == HVD_OK, "barrier: %s", hvd_last_error());
  int seen = 0;
  for (int j = 0; j < size; ++j) {
    struct stat st;
    if (stat((prefix + std::to_string(j)).c_str(), &st) == 0) {
      ++seen;
      CHECK(std::strcmp(all[static_cast<size_t>(j)].host, me.host) == 0,
            "/dev/shm shows rank %d's file, from host %s", j, all[static_cast<size_t>(j)].host);
    }
  }
  CHECK(seen == me.local_size, "/dev/shm holds %d ranks' files, want local_size %d", seen,
        me.local_size);
  CHECK(hvd_barrier(nullptr) == HVD_OK, "barrier: %s", hvd_last_error());
  unlink(mine.c_str());

  CHECK(hvd_shutdown() == HVD_OK, "shutdown: %s", hvd_last_error());
  std::printf("probe rank %d: host %s local %d/%d cross %d/%d shm files %d: %s\n", g_rank, me.host,
              me.local_rank, me.local_size, me.cross_rank, me.cross_size, seen,
              g_failures == 0 ? "ok" : "FAILED");
  return g_failures == 0 ? 0 : 1;
}

// pause_ms < 0: the default 20 ms, no per-step lines; steps <= 0: until a
// failure or 60 s.
int Loop(const std::string& outdir, int pause_ms, int steps, const std::atomic<double>& first_error) {
  // The library's log (stderr) to OUTDIR/rank-R.log: a cut-off host's output
  // never reaches the launcher.
  const std::string log = outdir + "/rank-" + std::to_string(g_rank) + ".log";
  if (std::freopen(log.c_str(), "a", stderr) == nullptr) std::perror(log.c_str());
  int size = 0;
  hvd_size(&size);
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  const auto start = Clock::now();
  auto last_ok = start;
  for (int step = 0; Since(start) < 60; ++step) {
    if (steps > 0 && step == steps) {
      const bool ok = hvd_shutdown() == HVD_OK;
      std::printf("probe rank %d: %d steps ok%s\n", g_rank, steps, ok ? "" : ", shutdown failed");
      return ok ? 0 : 1;
    }
    const double submitted = WallNow();
    std::vector<float> v(4096, static_cast<float>(g_rank + 1));
    int64_t shape[1] = {static_cast<int64_t>(v.size())};
    hvd_tensor_t t = {v.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    const std::string name = "probe.loop." + std::to_string(step);
    const hvd_status_t st = hvd_allreduce(nullptr, name.c_str(), &t, v.data(), HVD_SUM);
    if (st != HVD_OK) {
      char line[4096];
      std::snprintf(line, sizeof(line), "rank %d (host %s): failed after %.2f s with %s: %s\n",
                    g_rank, host, Since(last_ok), hvd_status_string(st), hvd_last_error());
      // The file first: on a cut-off host stdout may be a dead ssh channel.
      const std::string path = outdir + "/rank-" + std::to_string(g_rank) + ".txt";
      { std::ofstream(path.c_str()) << line; }
      char when[96];
      std::snprintf(when, sizeof(when), "%.3f %.3f %.3f\n", WallNow(), submitted, first_error.load());
      { std::ofstream(outdir + "/rank-" + std::to_string(g_rank) + ".time") << when; }
      std::fputs(line, stdout);
      std::fflush(stdout);
      const auto t0 = Clock::now();
      hvd_shutdown();
      std::ofstream(path.c_str(), std::ios::app) << "shutdown took " << Since(t0) << " s\n";
      return 4;
    }
    const float want = static_cast<float>(size) * static_cast<float>(size + 1) / 2;
    for (float x : v) {
      if (x != want) {
        std::printf("probe rank %d: step %d: got %g, want %g\n", g_rank, step, x, want);
        return 1;
      }
    }
    if (step == 0) std::printf("probe rank %d: up\n", g_rank);
    if (pause_ms >= 0) std::printf("probe rank %d: step %d done\n", g_rank, step);
    std::fflush(stdout);
    last_ok = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms >= 0 ? pause_ms : 20));
  }
  std::printf("probe rank %d: no failure within 60 s\n", g_rank);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!((mode == "topo" && argc == 4) || (mode == "loop" && argc >= 3 && argc <= 5))) {
    std::fprintf(stderr,
                 "usage: cluster_probe topo LOCAL_SIZE CROSS_SIZE | loop OUTDIR [PAUSE_MS [STEPS]]\n");
    return 2;
  }
  static std::atomic<double> first_error{0};
  hvd_params_t params = HVD_PARAMS_INIT;
  if (mode == "loop") {
    signal(SIGTERM, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);  // output to a dead ssh channel must not end it
    params.mask = HVD_PARAM_LOG_FN;
    params.log_fn = LogWithTime;
    params.log_user = &first_error;
  }
  if (hvd_init(&params) != HVD_OK) {
    std::printf("probe: hvd_init failed: %s\n", hvd_last_error());
    return 2;
  }
  hvd_rank(&g_rank);
  if (mode == "topo") return Topo(std::atoi(argv[2]), std::atoi(argv[3]));
  return Loop(argv[2], argc > 3 ? std::atoi(argv[3]) : -1, argc > 4 ? std::atoi(argv[4]) : 0,
              first_error);
}
