// Publishes a rank's metrics to the job's store for its launcher (hvdrun
// --metrics-port and --summary read key "metrics/<rank>"): a thread of its
// own renders and writes them every period, and once more when stopped.
// HVD_METRICS_PUBLISH (seconds; hvdrun sets it) turns it on.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/observability/logging.h"
#include "rendezvous/store.h"

namespace hvd {

class MetricsPublisher {
 public:
  // `store` must outlive Stop; `render` is called from the publisher's thread.
  MetricsPublisher(rdv::StoreClient* store, int rank, double period_s,
                   std::function<std::string()> render, Logger* log);
  ~MetricsPublisher() { Stop(); }
  MetricsPublisher(const MetricsPublisher&) = delete;
  MetricsPublisher& operator=(const MetricsPublisher&) = delete;
  // Ends the thread and publishes the final report (idempotent).
  void Stop();
  static std::string Key(int rank) { return "metrics/" + std::to_string(rank); }

 private:
  void Publish();
  void Run();

  rdv::StoreClient* store_;
  std::string key_;
  double period_s_;
  std::function<std::string()> render_;
  Logger* log_;
  bool failed_ = false;  // logged once
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // under mu_
  std::thread thread_;
};

}  // namespace hvd
