#include "core/request.h"

#include <cmath>

namespace hvd {

const char* OpTypeName(OpType t) {
  switch (t) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kJoin: return "join";
  }
  return "unknown";
}

void Handle::Complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
  }
  cv_.notify_all();
}

bool Handle::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Status Handle::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!done_) return Status(HVD_IN_PROGRESS, description_ + " is in progress");
  return status_;
}

Status Handle::Wait(double timeout_s) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_s < 0 || !std::isfinite(timeout_s)) {
    cv_.wait(lock, [this] { return done_; });
  } else {
    auto limit = std::chrono::duration<double>(timeout_s);
    if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
      std::string msg = description_ + " did not complete within " + std::to_string(timeout_s) +
                        " s";
      if (!waiting_on_.empty()) msg += ": " + waiting_on_;
      return Status(HVD_ERR_TIMEOUT, msg);
    }
  }
  return status_;
}

void Handle::SetWaitingOn(std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_on_ = std::move(text);
}

}  // namespace hvd
