// The job's metrics in the launcher (--metrics-port, --summary): every
// rank's reports read from the store this hvdrun hosts.
#pragma once

#include <functional>
#include <memory>
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

 private:
  bool Read(int rank, std::string* text) const;
  const rdv::StoreServer* store_;
  int ranks_;
  LogFn log_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace hvd::launcher
