// Publishes a rank's metrics to the job's store for its launcher (hvdrun
// --metrics-port and --summary read key "metrics/<rank>", in an elastic job
// "metrics/e<epoch>/<rank>": see Key): a thread of its
// own renders and writes them every period, and once more when stopped.
// HVD_METRICS_PUBLISH (seconds; hvdrun sets it) turns it on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/observability/logging.h"
#include "rendezvous/store.h"

namespace hvd {

class MetricsPublisher {
 public:
  // `store` must outlive Stop; `render` is called from the publisher's thread.
  MetricsPublisher(rdv::StoreClient* store, std::string key, double period_s,
                   std::function<std::string()> render, Logger* log);
  // The same over a client of its own (the launcher's start-report store).
  MetricsPublisher(std::unique_ptr<rdv::StoreClient> own, std::string key, double period_s,
                   std::function<std::string()> render, Logger* log)
      : MetricsPublisher(own.get(), std::move(key), period_s, std::move(render), log) {
    own_ = std::move(own);
  }
  ~MetricsPublisher() { Stop(); }
  MetricsPublisher(const MetricsPublisher&) = delete;
  MetricsPublisher& operator=(const MetricsPublisher&) = delete;
  // Ends the thread and publishes the final report (idempotent).
  void Stop();
  // The key of a rank's report; an elastic epoch's (epoch >= 0) apart, so
  // that a rank of an epoch gone cannot overwrite the next one's.
  static std::string Key(int rank, int64_t epoch) {
    return epoch < 0 ? "metrics/" + std::to_string(rank)
                     : "metrics/e" + std::to_string(epoch) + "/" + std::to_string(rank);
  }

 private:
  void Publish();
  void Run();

  rdv::StoreClient* store_;
  std::unique_ptr<rdv::StoreClient> own_;  // store_, when it is this publisher's
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
