// A host process's fault handlers survive hvd: a JVM or Julia takes SIGSEGV
// on purpose (safepoints, null checks), and UCX's library takes over
// SIGSEGV, SIGBUS, SIGILL and SIGFPE as it loads unless UCX_ERROR_SIGNALS
// says otherwise (src/transport/loader.cc, KeepHostSignalHandlers). Each
// rank installs its own handlers, starts hvd (the test runs it over UCX, and
// over the default with ranks as two hosts, where every rank probes UCX),
// allreduces, and checks that its handlers are still the ones it installed.
// Exit 0 when kept; 1 naming the signal otherwise; 2 on an hvd error.
#include <signal.h>

#include <cstdio>

#include "hvd.h"

namespace {

void Mine(int) {}

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};

}  // namespace

int main() {
  struct sigaction sa = {};
  sa.sa_handler = Mine;
  for (int s : kSignals) sigaction(s, &sa, nullptr);
  if (hvd_init(nullptr) != HVD_OK) {
    std::fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
    return 2;
  }
  int rank = -1, size = 0;
  hvd_rank(&rank);
  hvd_size(&size);
  const char* transport = "?";
  hvd_context_transport(nullptr, &transport);
  float x = 1.0f;
  hvd_tensor_t t = {};
  t.data = &x;
  t.dtype = HVD_FLOAT32;
  t.ndim = 0;
  t.device = HVD_DEVICE_CPU;
  if (hvd_allreduce(nullptr, "x", &t, &x, HVD_SUM) != HVD_OK || x != static_cast<float>(size)) {
    std::fprintf(stderr, "rank %d: allreduce: %s (%g)\n", rank, hvd_last_error(), x);
    return 2;
  }
  int rc = 0;
  for (int s : kSignals) {
    struct sigaction cur = {};
    sigaction(s, nullptr, &cur);
    if (cur.sa_handler != Mine) {
      std::printf("rank %d (%s): the handler of signal %d was replaced\n", rank, transport, s);
      rc = 1;
    }
  }
  if (rc == 0) std::printf("rank %d (%s): handlers kept\n", rank, transport);
  hvd_shutdown();
  return rc;
}
