#include "launcher/job_metrics.h"

#include "launcher/job_summary.h"
#include "launcher/prom_text.h"

namespace hvd::launcher {

JobMetrics::JobMetrics(const rdv::StoreServer* store, int ranks, LogFn log)
    : store_(store), ranks_(ranks), log_(std::move(log)) {}

bool JobMetrics::Read(int rank, std::string* text) const {
  rdv::Bytes v;
  if (store_ == nullptr || !store_->TryGet("metrics/" + std::to_string(rank), &v)) return false;
  text->assign(v.begin(), v.end());
  return true;
}

bool JobMetrics::Start(const std::string& addr, int port) {
  if (port < 0) return true;
  if (store_ == nullptr) {
    log_("--metrics-port: this hvdrun does not host the job's store (another node does): "
         "no endpoint here");
    return true;
  }
  endpoint_ = std::make_unique<MetricsEndpoint>(
      ranks_, [this](int r, std::string* t) { return Read(r, t); });
  const Status s = endpoint_->Start(addr, port);
  if (!s.ok()) {
    log_("error: " + s.message());
    return false;
  }
  const bool v6 = addr.find(':') != std::string::npos;
  log_("metrics: http://" + (v6 ? "[" + addr + "]" : addr) + ":" +
       std::to_string(endpoint_->port()) + "/metrics");
  return true;
}

void JobMetrics::End(bool summary) {
  if (endpoint_) endpoint_->Stop();
  if (!summary) return;
  PromMerge merge;
  const int reporting =
      MergeReports(ranks_, [this](int r, std::string* text) { return Read(r, text); }, &merge);
  if (reporting == 0) {
    log_("summary: no rank reported metrics (did the ranks call hvd_init?)");
    return;
  }
  for (const std::string& line : JobSummary(merge, reporting, ranks_)) log_(line);
}

}  // namespace hvd::launcher
