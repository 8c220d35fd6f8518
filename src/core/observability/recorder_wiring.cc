// The context's side of the flight recorder: its configuration at start,
// the snapshot with the set table, and the dumps the loop serves.
#include <unistd.h>

#include "core/context_impl.h"

namespace hvd {

void ContextImpl::StartRecorder() {
  FlightRecorder::Identity id;
  id.rank = cfg_.rank;
  id.size = cfg_.size;
  id.host = cfg_.hostname;
  if (id.host.empty()) {
    char buf[256] = {};
    if (::gethostname(buf, sizeof(buf) - 1) == 0) id.host = buf;
  }
  id.transport = transport_ ? transport_->name() : "";
  const size_t size = cfg_.flight_recorder_size > 0 ? static_cast<size_t>(cfg_.flight_recorder_size) : 0;
  recorder_.Configure(size, cfg_.flight_recorder_dir, std::move(id));
  if (recorder_.on() && !recorder_.dir().empty()) FlightRecorder::InstallSignalHandler();
}

Status ContextImpl::DumpFlightRecorder(const std::string& path, const char* reason) {
  FlightRecorder::Snapshot snap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snap = recorder_.Take();
    snap.sets.push_back({-1, root_->members});
    for (const auto& w : all_sets_) {
      auto set = w.lock();
      if (set && set->slot >= 0) snap.sets.push_back({set->slot, set->members});
    }
  }
  // The context's operations ran what the transport chooses for their size
  // (a process set's, the core's algorithms over its links: not said).
  auto algorithm = [](const void* user, int set_id, OpType type, uint64_t bytes) -> const char* {
    const auto* self = static_cast<const ContextImpl*>(user);
    if (set_id >= 0 || !self->transport_) return nullptr;
    int c = HVD_TRANSPORT_ALLREDUCE;
    switch (type) {
      case OpType::kAllgather:
      case OpType::kProcessSet: c = HVD_TRANSPORT_ALLGATHERV; break;
      case OpType::kBroadcast: c = HVD_TRANSPORT_BROADCAST; break;
      case OpType::kAlltoall: c = HVD_TRANSPORT_ALLTOALLV; break;
      case OpType::kReducescatter: c = HVD_TRANSPORT_REDUCESCATTER; break;
      case OpType::kBarrier:
      case OpType::kCloseSet: c = HVD_TRANSPORT_BARRIER; break;
      default: break;
    }
    return algo::AlgorithmName(self->transport_->Choose(c, static_cast<size_t>(bytes)));
  };
  return recorder_.Write(snap, path.empty() ? recorder_.DefaultPath() : path, reason, algorithm,
                         this);
}

void ContextImpl::ServeDumps(const char* forced) {
  const char* reason = recorder_.TakeWanted();
  if (reason == nullptr) reason = forced;
  if (reason == nullptr || recorder_.dir().empty()) return;
  const Status s = DumpFlightRecorder("", reason);
  if (s.ok()) {
    HVD_LOG(log_, HVD_LOG_INFO, "flight recorder (" << reason << "): wrote " << recorder_.DefaultPath());
  } else {
    HVD_LOG(log_, HVD_LOG_WARNING, "flight recorder (" << reason << "): " << s.message());
  }
}

}  // namespace hvd
