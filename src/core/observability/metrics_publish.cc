#include "core/observability/metrics_publish.h"

#include <chrono>

namespace hvd {

MetricsPublisher::MetricsPublisher(rdv::StoreClient* store, std::string key, double period_s,
                                   std::function<std::string()> render, Logger* log)
    : store_(store), key_(std::move(key)), period_s_(period_s), render_(std::move(render)), log_(log) {
  thread_ = std::thread([this] { Run(); });
}

void MetricsPublisher::Run() {
  const auto period = std::chrono::duration<double>(period_s_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    Publish();
    lock.lock();
  }
}

void MetricsPublisher::Publish() {
  const std::string text = render_();
  const Status s = store_->Set(key_, rdv::Bytes(text.begin(), text.end()));
  if (!s.ok() && !failed_) {
    failed_ = true;  // the store may be gone at the job's end: said once
    HVD_LOG(*log_, HVD_LOG_DEBUG, "metrics: cannot publish to the store: " << s.message());
  }
}

void MetricsPublisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Publish();
}

}  // namespace hvd
