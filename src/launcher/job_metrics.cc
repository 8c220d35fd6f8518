#include "launcher/job_metrics.h"

#include "core/observability/metrics_publish.h"
#include "launcher/job_summary.h"
#include "launcher/prom_text.h"

namespace hvd::launcher {

JobMetrics::JobMetrics(const rdv::StoreServer* store, int ranks, LogFn log)
    : store_(store), log_(std::move(log)), ranks_(ranks) {}

void JobMetrics::SetEpoch(int64_t epoch, int ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = epoch;
  ranks_ = ranks;
}

int JobMetrics::Ranks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_;
}

namespace {

// Adds label epoch="E" to every sample of a report (each has labels).
std::string WithEpoch(const std::string& text, int64_t epoch) {
  const std::string label = "{epoch=\"" + std::to_string(epoch) + "\",";
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const size_t brace = text.find('{', at);
    if (text[at] != '#' && brace < end) {
      out.append(text, at, brace - at);
      out += label;
      out.append(text, brace + 1, end - brace - 1);
    } else {
      out.append(text, at, end - at);
    }
    out += '\n';
    at = end + 1;
  }
  return out;
}

}  // namespace

bool JobMetrics::Read(int rank, std::string* text) const {
  int64_t epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch = epoch_;
  }
  rdv::Bytes v;
  if (store_ == nullptr || !store_->TryGet(MetricsPublisher::Key(rank, epoch), &v)) return false;
  text->assign(v.begin(), v.end());
  if (epoch >= 0) *text = WithEpoch(*text, epoch);
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
      [this] { return Ranks(); }, [this](int r, std::string* t) { return Read(r, t); });
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
  const int ranks = Ranks();
  const int reporting =
      MergeReports(ranks, [this](int r, std::string* text) { return Read(r, text); }, &merge);
  if (reporting == 0) {
    log_("summary: no rank reported metrics (did the ranks call hvd_init?)");
    return;
  }
  std::vector<std::string> lines = JobSummary(merge, reporting, ranks);
  if (epoch_ >= 0 && !lines.empty()) {
    lines.front().insert(lines.front().size() - 1, ", elastic epoch " + std::to_string(epoch_));
  }
  for (const std::string& line : lines) log_(line);
}

}  // namespace hvd::launcher
