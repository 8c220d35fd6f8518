#include "core/loop/request.h"

#include <cmath>
#include <cstdio>
#include <new>

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
    case OpType::kProcessSet: return "process set creation";
    case OpType::kCloseSet: return "process set destruction";
  }
  return "unknown";
}

bool ByteBuffer::Resize(size_t n) {
  if (n > cap_) {
    p_.reset(new (std::nothrow) uint8_t[n]);
    cap_ = p_ ? n : 0;
    if (!p_) {
      size_ = 0;
      return false;
    }
  }
  size_ = n;
  return true;
}

ByteBuffer BufferPool::Take(size_t n) {
  ByteBuffer b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->capacity() >= n && (best == spare_.end() || it->capacity() < best->capacity())) best = it;
    }
    if (best != spare_.end()) {
      spare_bytes_ -= best->capacity();
      b = std::move(*best);
      spare_.erase(best);
    }
  }
  b.Resize(n);
  return b;
}

void BufferPool::Give(ByteBuffer b) {
  if (b.capacity() == 0 || b.capacity() > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  while (!spare_.empty() && spare_bytes_ + b.capacity() > max_bytes_) {
    spare_bytes_ -= spare_.front().capacity();
    spare_.pop_front();
  }
  spare_bytes_ += b.capacity();
  spare_.push_back(std::move(b));
}

size_t BufferPool::spare_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spare_bytes_;
}

Handle::~Handle() { ReleaseResults(); }

void Handle::ReleaseResults() noexcept {
  if (output_pool) output_pool->Give(std::move(output));
  if (device_pool) {
    if (cuda_fence && device_output.data != nullptr) {
      // Released in stream order: work the caller queued on the result's
      // stream before releasing may still read the block; the next user
      // waits for it (else, at worst, the host waits here).
      auto f = CudaFence::Record(cuda_fence->shared_runtime(), cuda_fence->device(),
                                 cuda_fence->stream());
      if (f.ok()) {
        device_output.fence = std::move(f).value();
      } else {
        (void)cuda_fence->Synchronize();
      }
    }
    device_pool->Give(device_output);
  }
}

// Under no lock: the last reference is gone, so no other thread sees it.
void Handle::Clear() noexcept {
  claimed_.store(0, std::memory_order_relaxed);
  finished_.store(false, std::memory_order_relaxed);
  if (!status_.ok() || !status_.message().empty()) status_ = Status();
  if (!waiting_on_.empty()) waiting_on_.clear();
  // Most handles (an allreduce's, a broadcast's) had no result of their own.
  if (output.capacity() == 0 && !output_pool && output_shape.empty() && recv_splits.empty() &&
      output_device == HVD_DEVICE_CPU && device_output.data == nullptr && device_bytes == 0 &&
      !device_pool && !cuda_fence && !host_copied_) {
    return;
  }
  ReleaseResults();
  output = ByteBuffer();
  output_pool.reset();
  output_shape.clear();
  recv_splits.clear();
  output_device = HVD_DEVICE_CPU;
  device_output = DeviceBlock();
  device_bytes = 0;
  device_pool.reset();
  cuda_fence.reset();
  host_copied_ = false;
}

Result<const ByteBuffer*> Handle::HostOutput() {
  std::lock_guard<std::mutex> lock(host_mu_);
  if (output_device == HVD_DEVICE_CPU || host_copied_ || device_bytes == 0) return &output;
  if (cuda_fence) {
    Status s = cuda_fence->Synchronize();  // the result queued on its stream is in place
    if (!s.ok()) return s.Wrap("waiting for the result of " + description());
  }
  if (!device_pool) return Error(HVD_ERR_INTERNAL, "a device result without its pool");
  if (output_pool) {
    output = output_pool->Take(device_bytes);
  }
  if (!output.Resize(device_bytes)) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(device_bytes) +
                                        " bytes of host memory for the result of " +
                                        description());
  }
  Status s = device_pool->CopyToHost(output.data(), device_output, device_bytes);
  if (!s.ok()) return s.Wrap("copying the result of " + description() + " to host memory");
  host_copied_ = true;
  return &output;
}

void Handle::Complete(Status status) {
  uint8_t expected = 0;
  if (!claimed_.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
  status_ = std::move(status);
  finished_.store(true, std::memory_order_seq_cst);
  // A waiter registers (waiters_, seq_cst) under mu_ before it reads
  // finished_ and sleeps: either this load sees it, and the lock below
  // waits until it sleeps on cv_, or its read of finished_ sees true.
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
}

bool Handle::done() const { return finished_.load(std::memory_order_acquire); }

Status Handle::status() const {
  if (done()) return status_;
  return Status(HVD_IN_PROGRESS, description() + " is in progress");
}

Status Handle::Wait(double timeout_s) const {
  // Waits shorter than this never run the cycle here: a cycle may wait for
  // a peer to enter the negotiation (up to its heartbeat), which a short
  // poll should not.
  constexpr double kDriveMinWaitS = 0.01;
  if (done()) return status_;
  using SteadyClock = std::chrono::steady_clock;
  const bool forever = timeout_s < 0 || !std::isfinite(timeout_s);
  const SteadyClock::time_point deadline =
      forever ? SteadyClock::time_point::max()
              : SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                         std::chrono::duration<double>(timeout_s));
  if (signal_ && timeout_s != 0 && !done()) {
    bool drove = false;
    {
      std::unique_lock<std::mutex> lock(signal_->mu);
      signal_->caller_waits = true;
      if (signal_->driver != nullptr && (forever || timeout_s >= kDriveMinWaitS)) {
        drove = signal_->driver->Drive(lock, *this, deadline);
      }
    }
    if (!drove) signal_->cv.notify_all();
    if (done()) return status_;  // the cycle this thread ran completed it
  }
  std::unique_lock<std::mutex> lock(mu_);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  auto finished = [this] { return finished_.load(std::memory_order_seq_cst); };
  bool in_time = true;
  if (forever) {
    cv_.wait(lock, finished);
  } else {
    in_time = cv_.wait_until(lock, deadline, finished);
  }
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  if (!in_time) {
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%g", timeout_s);
    std::string msg = description() + " did not complete within " + secs + " s";
    if (!waiting_on_.empty()) msg += ": " + waiting_on_;
    return Status(HVD_ERR_TIMEOUT, msg);
  }
  return status_;
}

void Handle::SetWaitingOn(std::string text) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_on_ = std::move(text);
}

}  // namespace hvd
