// In-memory collectives among N threads, for testing negotiation without a
// transport.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/negotiation/controller.h"

namespace hvd::test {

class Fabric {
 public:
  explicit Fabric(int n) : n_(n), bufs_(static_cast<size_t>(n)) {}

  // Every rank deposits `mine`; every rank gets all deposits in rank order.
  std::vector<std::vector<uint8_t>> Exchange(int rank, const std::vector<uint8_t>& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    // Wait for the previous exchange to be fully read.
    cv_.wait(lock, [&] { return readers_ == 0; });
    bufs_[rank] = mine;
    if (++arrived_ == n_) {
      result_ = bufs_;
      arrived_ = 0;
      readers_ = n_;
      ++gen_;
      cv_.notify_all();
    } else {
      uint64_t g = gen_;
      cv_.wait(lock, [&] { return gen_ != g; });
    }
    std::vector<std::vector<uint8_t>> out = result_;
    if (--readers_ == 0) cv_.notify_all();
    return out;
  }

 private:
  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<uint8_t>> bufs_, result_;
  int arrived_ = 0;
  int readers_ = 0;
  uint64_t gen_ = 0;
};

class FakeControlPlane : public ControlPlane {
 public:
  FakeControlPlane(Fabric* f, int rank) : f_(f), rank_(rank) {}
  Status AllreduceMinU8(uint8_t* buf, size_t n) override {
    auto all = f_->Exchange(rank_, std::vector<uint8_t>(buf, buf + n));
    for (const auto& v : all) {
      for (size_t i = 0; i < n; ++i) buf[i] = std::min(buf[i], v[i]);
    }
    ++allreduces;
    return Status::Ok();
  }
  Status AllgatherBytes(const std::vector<uint8_t>& mine,
                        std::vector<std::vector<uint8_t>>* all) override {
    *all = f_->Exchange(rank_, mine);
    ++allgathers;
    return Status::Ok();
  }
  int allreduces = 0;
  int allgathers = 0;

 private:
  Fabric* f_;
  int rank_;
};

}  // namespace hvd::test
