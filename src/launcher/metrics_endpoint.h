// hvdrun --metrics-port: the whole job's metrics for Prometheus, served by
// the launcher at http://ADDR:PORT/metrics from every rank's latest report
// in the store (key "metrics/<rank>", published by each rank every second).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "common/status.h"

namespace hvd::launcher {

class MetricsEndpoint {
 public:
  // read(rank, &text): the rank's latest report, false where it has none;
  // ranks(): how many ranks the job has now (an elastic job's change).
  using Reader = std::function<bool(int rank, std::string* text)>;
  MetricsEndpoint(std::function<int()> ranks, Reader read)
      : ranks_(std::move(ranks)), read_(std::move(read)) {}
  ~MetricsEndpoint() { Stop(); }
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Listens on addr:port (port 0: any) and serves from a thread of its own.
  Status Start(const std::string& addr, int port);
  void Stop();
  int port() const { return port_; }
  // Every rank's report, merged (what /metrics returns).
  std::string Render() const;

 private:
  void Serve();
  void Answer(int fd) const;

  std::function<int()> ranks_;
  Reader read_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hvd::launcher
