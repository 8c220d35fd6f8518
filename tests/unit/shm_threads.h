// Ranks as threads for the shared-memory tests: an in-memory shm::Exchange.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/shm/shm.h"

namespace hvd {
namespace test {

// Every rank's string per round, handed out once all ranks have given theirs.
class ThreadExchange : public shm::Exchange {
 public:
  struct Board {
    explicit Board(int n) : n(n) {}
    int n;
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::vector<std::string>> rounds;
    std::map<std::string, int> filled;
  };
  ThreadExchange(Board* b, int rank) : b_(b), rank_(rank) {}

  Status Allgather(const char* round, const std::string& mine,
                   std::vector<std::string>* all) override {
    std::unique_lock<std::mutex> lock(b_->mu);
    auto& v = b_->rounds[round];
    v.resize(static_cast<size_t>(b_->n));
    v[static_cast<size_t>(rank_)] = mine;
    ++b_->filled[round];
    b_->cv.notify_all();
    const bool done = b_->cv.wait_for(lock, std::chrono::seconds(20),
                                      [&] { return b_->filled[round] == b_->n; });
    if (!done) return Error(HVD_ERR_TIMEOUT, std::string("round ") + round + " timed out");
    *all = b_->rounds[round];
    return Status::Ok();
  }

 private:
  Board* b_;
  int rank_;
};

}  // namespace test
}  // namespace hvd
