// The plugins' shared-memory setup (algorithms/shm.cc) takes its
// switch from the plugin (Options::enabled), never from the environment:
// the plugin reads its settings once, in its init. Two ranks as threads
// with an in-memory exchange.
#include <stdlib.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/shm.h"
#include "scoped_env.h"

namespace hvd {
namespace {

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

  int Allgather(const char* round, const std::string& mine, std::vector<std::string>* all,
                std::string* err) override {
    std::unique_lock<std::mutex> lock(b_->mu);
    auto& v = b_->rounds[round];
    v.resize(static_cast<size_t>(b_->n));
    v[static_cast<size_t>(rank_)] = mine;
    ++b_->filled[round];
    b_->cv.notify_all();
    const bool done = b_->cv.wait_for(lock, std::chrono::seconds(20),
                                      [&] { return b_->filled[round] == b_->n; });
    if (!done) {
      *err = std::string("round ") + round + " timed out";
      return HVD_ERR_TIMEOUT;
    }
    *all = b_->rounds[round];
    return HVD_OK;
  }

 private:
  Board* b_;
  int rank_;
};

struct RankResult {
  int status = -100;
  bool mapped = false;
  std::string err;
  std::vector<std::string> log;
};

// Runs Setup on two ranks; enabled[r] is rank r's switch.
std::vector<RankResult> SetupTwoRanks(const bool enabled[2]) {
  ThreadExchange::Board board(2);
  std::vector<RankResult> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      shm::Options o;
      o.transport = "test";
      o.enabled = enabled[r];
      o.switch_name = "HVD_TEST_SHM";
      o.name_prefix = "/hvd-test-";
      o.rank = r;
      o.size = 2;
      o.timeout_s = 20;
      o.slot_bytes = 4096;
      o.log = [&out, r](int, const std::string& msg) { out[r].log.push_back(msg); };
      ThreadExchange ex(&board, r);
      std::unique_ptr<shm::Segment> seg;
      out[r].status = shm::Setup(ex, o, &seg, &out[r].err);
      out[r].mapped = seg != nullptr;
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

using hvd::test::ScopedEnv;

TEST(ShmSetup, TheSwitchComesFromTheOptionsNotTheEnvironment) {
  if (shm::HostIdentity().empty()) GTEST_SKIP() << "this host cannot tell its identity";
  // Switches named in the environment are the plugin's business: the setup
  // follows Options::enabled alone.
  ScopedEnv a("HVD_TEST_SHM", "0"), b("HVD_GLOO_SHM", "0"), c("HVD_MPI_SHM", "0");
  const bool on[2] = {true, true};
  std::vector<RankResult> res = SetupTwoRanks(on);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(res[r].status, HVD_OK) << res[r].err;
    EXPECT_TRUE(res[r].mapped);
  }
}

TEST(ShmSetup, OffOnOneRankIsOffOnEvery) {
  const bool on[2] = {true, false};
  std::vector<RankResult> res = SetupTwoRanks(on);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(res[r].status, HVD_OK) << res[r].err;
    EXPECT_FALSE(res[r].mapped);
    bool said = false;
    for (const std::string& l : res[r].log) {
      said = said || l.find("rank 1 set HVD_TEST_SHM=0") != std::string::npos;
    }
    EXPECT_TRUE(said) << "no log line names the switch";
  }
}

TEST(ShmSetup, SwitchValues) {
  EXPECT_TRUE(shm::SwitchOn(nullptr));
  EXPECT_TRUE(shm::SwitchOn(""));
  EXPECT_TRUE(shm::SwitchOn("1"));
  EXPECT_TRUE(shm::SwitchOn("on"));
  EXPECT_TRUE(shm::SwitchOn("yes"));
  for (const char* off : {"0", "false", "FALSE", "off", "Off", "no", "NO"}) {
    EXPECT_FALSE(shm::SwitchOn(off)) << off;
  }
}

}  // namespace
}  // namespace hvd
