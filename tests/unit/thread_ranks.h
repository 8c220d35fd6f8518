// Ranks as threads in one process: N contexts bootstrapped through an
// in-memory out-of-band allgather.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hvd.h"

namespace hvd::test {

class OobGroup {
 public:
  explicit OobGroup(int n) : n_(n) {}

  static int Allgather(const void* send, void* recv, size_t bytes, void* user) {
    auto* self = static_cast<std::pair<OobGroup*, int>*>(user);
    return self->first->Do(self->second, send, recv, bytes);
  }

 private:
  int Do(int rank, const void* send, void* recv, size_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return readers_ == 0; });
    if (buf_.size() != bytes * n_) buf_.assign(bytes * n_, 0);
    std::memcpy(buf_.data() + bytes * rank, send, bytes);
    if (++arrived_ == n_) {
      arrived_ = 0;
      readers_ = n_;
      ++gen_;
      cv_.notify_all();
    } else {
      uint64_t g = gen_;
      cv_.wait(lock, [&] { return gen_ != g; });
    }
    std::memcpy(recv, buf_.data(), bytes * n_);
    if (--readers_ == 0) cv_.notify_all();
    return 0;
  }

  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<unsigned char> buf_;
  int arrived_ = 0, readers_ = 0;
  uint64_t gen_ = 0;
};

// Parameters of rank r of n thread-ranks bootstrapped through `user`'s
// group (user: {&group, r}, alive while the context starts).
inline hvd_params_t ThreadRankParams(int r, int n, const char* transport,
                                     std::pair<OobGroup*, int>* user) {
  hvd_params_t p = HVD_PARAMS_INIT;
  p.rank = r;
  p.size = n;
  p.transport = transport;
  p.oob_allgather = &OobGroup::Allgather;
  p.oob_user = user;
  p.start_timeout_s = 30;
  p.transport_timeout_s = 30;
  p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE | HVD_PARAM_TRANSPORT | HVD_PARAM_OOB |
           HVD_PARAM_START_TIMEOUT | HVD_PARAM_TRANSPORT_TIMEOUT;
  return p;
}

// Runs fn(ctx, rank) on n thread-ranks. tweak(params) may set more fields.
inline void RunRanks(int n, const std::function<void(hvd_context_t, int)>& fn,
                     const std::function<void(hvd_params_t*)>& tweak = nullptr,
                     const char* transport = "gloo") {
  OobGroup group(n);
  std::vector<std::pair<OobGroup*, int>> users;
  for (int r = 0; r < n; ++r) users.emplace_back(&group, r);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      hvd_params_t p = ThreadRankParams(r, n, transport, &users[r]);
      if (tweak) tweak(&p);
      hvd_context_t ctx = nullptr;
      hvd_status_t s = hvd_context_create(&p, &ctx);
      ASSERT_EQ(s, HVD_OK) << "rank " << r << ": " << hvd_last_error();
      fn(ctx, r);
      EXPECT_EQ(hvd_context_destroy(ctx), HVD_OK);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace hvd::test
