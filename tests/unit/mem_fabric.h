// An in-memory point-to-point fabric with ranks as threads, for the
// collective algorithms' tests (test_algorithms.cc, test_reproducible.cc).
//
// The fabric copies a message when it is sent (so a send never waits for its
// receive, as a real transport's buffering allows) and checks, when the send
// is completed, that the algorithm left the source untouched meanwhile (the
// contract: buffers stay untouched until their request completes). A receive
// must be posted with the size of the matching send. Every wait is bounded.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "algorithms/links.h"
#include "common/status.h"

namespace hvd {
namespace test {

using algo::Req;

class Fabric {
 public:
  explicit Fabric(int n, size_t segment = size_t{1} << 20) : n_(n), segment_(segment) {}
  int n() const { return n_; }
  size_t segment() const { return segment_; }

  struct Request {
    bool send = false;
    int from = 0, to = 0;
    uint32_t tag = 0;
    uint64_t seq = 0;
    void* data = nullptr;
    size_t bytes = 0;
    std::vector<uint8_t> snapshot;  // sends: the source as it was at Isend
  };

  Status Isend(int me, int peer, uint32_t tag, const void* data, size_t bytes, Req* req) {
    auto* r = new Request();
    r->send = true;
    r->from = me;
    r->to = peer;
    r->data = const_cast<void*>(data);
    r->bytes = bytes;
    r->snapshot.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& q = queues_[std::make_tuple(me, peer, tag)];
      q.msgs.push_back(r->snapshot);
    }
    cv_.notify_all();
    *req = reinterpret_cast<Req>(r);
    return Status::Ok();
  }

  Status Irecv(int me, int peer, uint32_t tag, void* data, size_t bytes, Req* req) {
    auto* r = new Request();
    r->from = peer;
    r->to = me;
    r->tag = tag;
    r->data = data;
    r->bytes = bytes;
    std::lock_guard<std::mutex> lock(mu_);
    r->seq = queues_[std::make_tuple(peer, me, tag)].posted++;
    *req = reinterpret_cast<Req>(r);
    return Status::Ok();
  }

  Status Wait(Req req) {
    std::unique_ptr<Request> r(reinterpret_cast<Request*>(req));
    if (r->send) {
      if (r->bytes > 0 && std::memcmp(r->snapshot.data(), r->data, r->bytes) != 0) {
        return Error(HVD_ERR_INTERNAL, "rank " + std::to_string(r->from) +
                                           " changed a send buffer before its send completed");
      }
      return Status::Ok();
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto& q = queues_[std::make_tuple(r->from, r->to, r->tag)];
    const bool ok = cv_.wait_for(lock, std::chrono::seconds(20),
                                 [&] { return q.taken + q.msgs.size() > r->seq && q.taken == r->seq; });
    if (!ok) {
      return Error(HVD_ERR_TIMEOUT, "rank " + std::to_string(r->to) + " waited 20 s for rank " +
                                        std::to_string(r->from) + " (tag " + std::to_string(r->tag) + ")");
    }
    std::vector<uint8_t> m = std::move(q.msgs.front());
    q.msgs.pop_front();
    ++q.taken;
    cv_.notify_all();
    if (m.size() != r->bytes) {
      return Error(HVD_ERR_INTERNAL, "rank " + std::to_string(r->to) + " posted a receive of " +
                                         std::to_string(r->bytes) + " bytes for a message of " +
                                         std::to_string(m.size()) + " from rank " + std::to_string(r->from));
    }
    if (!m.empty()) std::memcpy(r->data, m.data(), m.size());
    return Status::Ok();
  }

  // Messages sent but never received: an algorithm's two sides disagreed.
  size_t Leftover() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (auto& kv : queues_) n += kv.second.msgs.size();
    return n;
  }

 private:
  struct Queue {
    std::deque<std::vector<uint8_t>> msgs;
    uint64_t posted = 0;  // receives posted
    uint64_t taken = 0;   // messages received
  };
  int n_;
  size_t segment_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, uint32_t>, Queue> queues_;
};

class FabricLinks : public algo::Links {
 public:
  FabricLinks(Fabric* f, int rank) : f_(f), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return f_->n(); }
  Status Isend(int peer, uint32_t tag, const void* data, size_t bytes, Req* req) override {
    EXPECT_NE(peer, rank_);
    EXPECT_LE(tag, 32767u);
    return f_->Isend(rank_, peer, tag, data, bytes, req);
  }
  Status Irecv(int peer, uint32_t tag, void* data, size_t bytes, Req* req) override {
    EXPECT_NE(peer, rank_);
    return f_->Irecv(rank_, peer, tag, data, bytes, req);
  }
  Status Wait(Req req) override { return f_->Wait(req); }
  size_t segment_bytes() const override { return f_->segment(); }

 private:
  Fabric* f_;
  int rank_;
};

// Runs body(links, rank) on n threads; returns each rank's status.
std::vector<Status> OnRanks(int n, const std::function<Status(algo::Links&, int)>& body, Fabric* fab) {
  std::vector<Status> st(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      FabricLinks l(fab, r);
      st[r] = body(l, r);
    });
  }
  for (auto& t : ts) t.join();
  return st;
}

}  // namespace test
}  // namespace hvd
