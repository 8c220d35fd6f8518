#include "core/observability/start_report.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "rendezvous/store.h"

namespace hvd {

namespace {

// A launcher that is alive answers at once; this only bounds a dead one.
constexpr double kConnectTimeoutS = 2.0;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

void ReportStartStage(StartStage stage, const std::string& hostname, const Logger& log) {
  // Once per process and stage, whatever the number of contexts.
  static std::atomic<bool> done[2] = {false, false};
  const int idx = stage == StartStage::kStarted ? 0 : 1;
  if (done[idx].load()) return;
  const std::string addr = Env("HVD_START_REPORT_ADDR");
  if (addr.empty()) return;
  if (done[idx].exchange(true)) return;
  std::string rank = Env("OMPI_COMM_WORLD_RANK");
  if (rank.empty()) rank = Env("PMIX_RANK");
  const char* what = stage == StartStage::kStarted ? "start" : "ready";
  if (rank.empty()) {
    HVD_LOG(log, HVD_LOG_WARNING,
            "HVD_START_REPORT_ADDR is set but this process has no MPI rank "
            "(OMPI_COMM_WORLD_RANK, PMIX_RANK): hvdrun will not hear that it started");
    return;
  }
  std::string host;
  int port = 0;
  Status st = rdv::ParseHostPort(addr, &host, &port);
  if (st.ok()) {
    auto client = rdv::StoreClient::Connect(host, port, Env("HVD_START_REPORT_SECRET"),
                                            kConnectTimeoutS);
    if (client.ok()) {
      const std::string value = hostname + " " + std::to_string(getpid());
      st = (*client)->Set(std::string(what) + "/" + rank, rdv::Bytes(value.begin(), value.end()));
    } else {
      st = client.status();
    }
  }
  if (!st.ok()) {
    HVD_LOG(log, HVD_LOG_WARNING,
            "cannot tell hvdrun at " << addr << " that rank " << rank << " reached '" << what
                                     << "' (it may end the job at its start timeout): "
                                     << st.message());
  }
}

Result<std::unique_ptr<rdv::StoreClient>> ConnectStartReportStore() {
  const std::string addr = Env("HVD_START_REPORT_ADDR");
  if (addr.empty()) return std::unique_ptr<rdv::StoreClient>();
  std::string host;
  int port = 0;
  HVD_CHECK(rdv::ParseHostPort(addr, &host, &port));
  return rdv::StoreClient::Connect(host, port, Env("HVD_START_REPORT_SECRET"), kConnectTimeoutS);
}

}  // namespace hvd
