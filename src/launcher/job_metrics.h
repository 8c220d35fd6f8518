// The job's metrics in the launcher (--metrics-port, --summary): every
// rank's reports read from the store this hvdrun hosts.
#pragma once

#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "launcher/metrics_endpoint.h"
#include "rendezvous/store.h"

namespace hvd::launcher {

class JobMetrics {
 public:
  using LogFn = std::function<void(const std::string&)>;
  JobMetrics(const rdv::StoreServer* store, int ranks, LogFn log);
  // Starts the endpoint at addr:port (port < 0: none). False: it could not.
  bool Start(const std::string& addr, int port);
  // At the job's end: stops the endpoint, prints the summary when asked.
  void End(bool summary);
  // An elastic job's epoch, once formed, and its ranks: from then on only
  // that epoch's reports count (MetricsPublisher::Key), each sample
  // labelled epoch="<epoch>": a reset starts the ranks' counters at zero in
  // new series, so no series goes backwards, and a removed rank's vanish.
  void SetEpoch(int64_t epoch, int ranks);

 private:
  bool Read(int rank, std::string* text) const;
  int Ranks() const;
  const rdv::StoreServer* store_;
  LogFn log_;
  mutable std::mutex mu_;  // the endpoint's thread reads these
  int ranks_;
  int64_t epoch_ = -1;
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace hvd::launcher
