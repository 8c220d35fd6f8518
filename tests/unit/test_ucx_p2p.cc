// The UCX plugin's table (point-to-point, faults), loaded the way
// the core loads it (dlopen + hvd_transport_plugin), with N ranks as
// threads of this process sharing an in-memory rendezvous store; every rank
// has its own UCP context and worker, and UCX connects them (tcp over
// loopback: the plugin's peer error handling rules out UCX's shared-memory
// transports). Every wait here is bounded: the plugin's waits by an explicit
// limit or a short env.timeout_s, the test's own by deadlines.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <mutex>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hvd_transport.h"
#include "mem_kv.h"
#include "p2p_world.h"
#include "scoped_env.h"


namespace {
constexpr uint32_t kMaxTag = 0x7FFFFFFFu;
}  // namespace

const hvd_transport_t* p2p_world::Plugin() {
  static const hvd_transport_t* table = LoadPlugin("libhvd_transport_ucx.so");
  return table;
}

void p2p_world::CheckMaxTag(uint32_t max_tag) {
  EXPECT_EQ(max_tag, kMaxTag);
}

namespace {

using namespace p2p_world;  // NOLINT: the harness is this file's vocabulary
constexpr size_t kBig = (size_t{8} << 20) + 3;  // 8 MiB and a little: UCX's rendezvous protocol

std::string Who(int rank) { return "rank " + std::to_string(rank) + " (host " + HostName() + ")"; }

// Waits (bounded) until flag is set; false if it was not within kWaitS.
bool AwaitFlag(const std::atomic<bool>& flag) {
  const auto t0 = Clock::now();
  while (!flag.load() && SecondsSince(t0) < kWaitS) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return flag.load();
}

class UcxP2p : public ::testing::TestWithParam<int> {
 protected:
  int Ranks() const { return GetParam(); }
};

// ---------------------------------------------------------------------------

TEST(UcxP2pTable, PassesTheLoadersChecks) {
  CheckPointToPointTable(Plugin(), "ucx",
                         HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST |
                             HVD_TRANSPORT_CAP_ABORT | HVD_TRANSPORT_CAP_PEER_TIMEOUT |
                             HVD_TRANSPORT_CAP_ANY_THREAD);
}

// NULL communicator or request: HVD_ERR_INVALID_ARGUMENT, no crash.
TEST(UcxP2pTable, NullCommunicatorAndRequest) {
  const hvd_transport_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  uint8_t b = 0;
  const hvd_transport_buffer_t buf = Host(&b, 1);
  hvd_transport_request_t* req = nullptr;
  EXPECT_EQ(t->isend(nullptr, 1, 0, &buf, &req), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->irecv(nullptr, 1, 0, &buf, &req), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->wait(nullptr, nullptr, 1.0), HVD_ERR_INVALID_ARGUMENT);
  int done = 7;
  EXPECT_EQ(t->test(nullptr, nullptr, &done), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->progress(nullptr), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->abort(nullptr, HVD_ERR_ABORTED, "x"), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->async_error(nullptr), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t->set_timeout(nullptr, 1.0, HVD_TRANSPORT_LIMIT_PEER), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(t->last_error(nullptr)), "");
  t->finalize(nullptr);  // nothing to do, no crash
  char err[256] = {0};
  EXPECT_EQ(t->init(nullptr, nullptr, nullptr, err, sizeof(err)), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err), "");
}

TEST(UcxP2pTable, WorldOfOneAndBadRank) {
  const hvd_transport_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  MemKv kv;
  hvd_transport_env_t env = MakeEnv(&kv, 0, 1, WorldOptions());
  hvd_transport_info_t info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  void* comm = nullptr;
  char err[256] = {0};
  ASSERT_EQ(t->init(&env, &info, &comm, err, sizeof(err)), HVD_OK) << err;
  ASSERT_NE(comm, nullptr);
  uint8_t b = 0;
  const hvd_transport_buffer_t buf = Host(&b, 1);
  hvd_transport_request_t* req = nullptr;
  EXPECT_EQ(t->isend(comm, 0, 0, &buf, &req), HVD_ERR_INVALID_ARGUMENT);  // itself
  EXPECT_EQ(req, nullptr);
  EXPECT_NE(std::string(t->last_error(comm)).find("bad peer 0"), std::string::npos)
      << t->last_error(comm);
  EXPECT_EQ(t->async_error(comm), HVD_OK);
  t->finalize(comm);

  env = MakeEnv(&kv, 3, 2, WorldOptions());
  comm = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(t->init(&env, &info, &comm, err, sizeof(err)), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(err).find("bad rank 3 of size 2"), std::string::npos) << err;
}

// Bad arguments: HVD_ERR_INVALID_ARGUMENT (or UNSUPPORTED for device memory)
// with a message saying what was wrong; the communicator stays usable.
TEST_P(UcxP2p, BadArgumentsLeaveTheCommunicatorUsable) {
  const int size = Ranks();
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    uint8_t b = 0;
    const hvd_transport_buffer_t buf = Host(&b, 1);
    hvd_transport_request_t* req = nullptr;
    auto expect_bad = [&](int st, const std::string& want) {
      EXPECT_EQ(st, HVD_ERR_INVALID_ARGUMENT) << want;
      EXPECT_EQ(req, nullptr);
      const std::string msg = t->last_error(comm);
      EXPECT_NE(msg.find(want), std::string::npos) << "want '" << want << "' in: " << msg;
    };
    expect_bad(t->isend(comm, rank, 0, &buf, &req), "ucx isend: bad peer " + std::to_string(rank));
    expect_bad(t->irecv(comm, size, 0, &buf, &req), "ucx irecv: bad peer " + std::to_string(size));
    expect_bad(t->irecv(comm, -1, 0, &buf, &req), "ucx irecv: bad peer -1");
    expect_bad(t->isend(comm, right, kMaxTag + 1, &buf, &req),
               "or tag " + std::to_string(kMaxTag + 1));
    expect_bad(t->isend(comm, right, kMaxTag + 1, &buf, &req), "max tag 2147483647");
    expect_bad(t->irecv(comm, right, 0xFFFFFFFFu, &buf, &req), "or tag 4294967295");
    const hvd_transport_buffer_t null_data = Host(nullptr, 4);
    expect_bad(t->isend(comm, right, 0, &null_data, &req), "ucx isend: NULL");
    expect_bad(t->irecv(comm, right, 0, nullptr, &req), "ucx irecv: NULL");
    expect_bad(t->isend(comm, right, 0, &buf, nullptr), "ucx isend: NULL");
    expect_bad(t->wait(comm, nullptr, 1.0), "ucx wait: NULL request");
    hvd_transport_buffer_t device = Host(&b, 1);
    device.memory_type = HVD_MEMORY_CUDA;
    EXPECT_EQ(t->isend(comm, right, 0, &device, &req), HVD_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(t->last_error(comm)).find("only host memory"), std::string::npos);
    EXPECT_EQ(req, nullptr);
    EXPECT_EQ(t->async_error(comm), HVD_OK);
    // Still fine: one message around the ring at the largest tag.
    uint8_t out = static_cast<uint8_t>(rank), in = 0xFF;
    auto* r = Post(comm, false, left, kMaxTag, &in, 1);
    auto* s = Post(comm, true, right, kMaxTag, &out, 1);
    ASSERT_EQ(t->wait(comm, r, kWaitS), HVD_OK) << t->last_error(comm);
    ASSERT_EQ(t->wait(comm, s, kWaitS), HVD_OK) << t->last_error(comm);
    EXPECT_EQ(in, left);
  });
}

// Every rank sends to every other rank: for each size (zero bytes, a few,
// 8 MiB + 3) a message with a tag of its own, and kSame messages with one
// shared tag, of several sizes (which must arrive in the order sent). The
// receives of all tags are outstanding at once; half the ranks post their
// sends before their receives, and the senders post the tags in the reverse
// order of the receivers. Waits go in a shuffled order, each for exactly its
// own request. Receive buffers are pre-filled, so a zero-byte receive that
// wrote anything, or a message that landed in the wrong receive, shows.
TEST_P(UcxP2p, ManyMessagesInFlightToEveryPeer) {
  const int size = Ranks();
  const std::vector<size_t> sizes = {0, 1, 7, 4096, kBig};
  constexpr int kSame = 6;
  constexpr uint32_t kSameTag = 1000;
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    struct Op {
      hvd_transport_request_t* req;
      bool send;
      int peer;
      uint32_t tag;
      int seq;
      std::vector<uint8_t> data;
    };
    std::vector<Op> ops;
    auto plan = [&](bool send) {
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        const int src = send ? rank : peer, dst = send ? peer : rank;
        std::vector<size_t> ks(sizes.size());
        for (size_t k = 0; k < ks.size(); ++k) ks[k] = send ? ks.size() - 1 - k : k;
        for (size_t k : ks) {
          const uint32_t tag = static_cast<uint32_t>(10 + k);
          ops.push_back(
              {nullptr, send, peer, tag, 0,
               send ? Message(src, dst, tag, 0, sizes[k]) : std::vector<uint8_t>(sizes[k], 0xEE)});
        }
        for (int seq = 0; seq < kSame; ++seq) {
          // Alternating small and large, so a later small message could
          // overtake an earlier large one if matching were not in order.
          const size_t bytes = seq % 2 == 0 ? size_t{100000} + seq : size_t{3} + seq;
          ops.push_back(
              {nullptr, send, peer, kSameTag, seq,
               send ? Message(src, dst, kSameTag, seq, bytes) : std::vector<uint8_t>(bytes, 0xEE)});
        }
      }
    };
    const bool sends_first = rank % 2 == 0;
    plan(sends_first);
    plan(!sends_first);
    uint8_t guard = 0x5A;  // a zero-byte receive's buffer must stay as it is
    for (Op& op : ops) {
      if (op.data.empty() && !op.send) {
        op.req = Post(comm, false, op.peer, op.tag, &guard, 0);
      } else {
        op.req = Post(comm, op.send, op.peer, op.tag, op.data.data(), op.data.size());
      }
      ASSERT_NE(op.req, nullptr);
    }
    std::vector<size_t> order(ops.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(1234 + rank));
    for (size_t i : order) {
      ASSERT_EQ(t->wait(comm, ops[i].req, kWaitS), HVD_OK)
          << "rank " << rank << ": " << t->last_error(comm);
    }
    EXPECT_EQ(guard, 0x5A);
    for (const Op& op : ops) {
      if (op.send) continue;
      const std::vector<uint8_t> want = Message(op.peer, rank, op.tag, op.seq, op.data.size());
      ASSERT_TRUE(op.data == want) << "rank " << rank << " from " << op.peer << " tag " << op.tag
                                   << " seq " << op.seq << " bytes " << op.data.size();
    }
    EXPECT_EQ(t->async_error(comm), HVD_OK);
  });
}

// A receive matches (peer, tag) exactly: receives for tags 1, 2, 3 from one
// peer are pending; the peer sends tag 3, then 2, then 1, each only after
// the previous one was received. Each wait returns while the receives
// posted before it are still pending.
TEST_P(UcxP2p, WaitCompletesExactlyItsOwnRequest) {
  const int size = Ranks();
  std::atomic<int> received{0};
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    const int last = size - 1;
    if (rank == 0) {
      uint32_t v[3] = {0, 0, 0};
      hvd_transport_request_t* r[3];
      for (int i = 0; i < 3; ++i) r[i] = Post(comm, false, last, 1 + i, &v[i], sizeof(v[i]));
      for (int i = 2; i >= 0; --i) {
        ASSERT_EQ(t->wait(comm, r[i], kWaitS), HVD_OK) << t->last_error(comm);
        EXPECT_EQ(v[i], 111u * (i + 1));
        for (int j = 0; j < i; ++j) EXPECT_EQ(v[j], 0u) << "tag " << j + 1 << " not sent yet";
        received.fetch_add(1);
      }
    } else if (rank == last) {
      for (int i = 2; i >= 0; --i) {
        uint32_t v = 111u * (i + 1);
        auto* s = Post(comm, true, 0, 1 + i, &v, sizeof(v));
        ASSERT_EQ(t->wait(comm, s, kWaitS), HVD_OK) << t->last_error(comm);
        const auto t0 = Clock::now();
        while (received.load() < 3 - i && SecondsSince(t0) < kWaitS) std::this_thread::yield();
        ASSERT_EQ(received.load(), 3 - i);
      }
    }
  });
}

// test never blocks: a receive nobody has sent to stays pending (and stays
// the caller's), completes once the message is sent, with the data; a large
// message (rendezvous) moves while only progress and test are called.
TEST_P(UcxP2p, TestAndProgressNeverBlock) {
  const int size = Ranks();
  std::atomic<int> phase{0};
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    const int last = size - 1;
    constexpr size_t kBig = 4u << 20;
    if (rank == 0) {
      uint32_t v = 0;
      auto* r = Post(comm, false, last, 3, &v, sizeof(v));
      int done = 1;
      const auto t0 = Clock::now();
      for (int i = 0; i < 100; ++i) {
        ASSERT_EQ(t->test(comm, r, &done), HVD_OK) << t->last_error(comm);
        ASSERT_EQ(done, 0) << "completed before anything was sent";
        ASSERT_EQ(t->progress(comm), HVD_OK);
      }
      EXPECT_LT(SecondsSince(t0), 1.0) << "test or progress blocked";
      phase.store(1);
      while (done == 0 && SecondsSince(t0) < kWaitS) {
        ASSERT_EQ(t->test(comm, r, &done), HVD_OK) << t->last_error(comm);
      }
      ASSERT_EQ(done, 1);
      EXPECT_EQ(v, 0xC0FFEEu);
      std::vector<uint8_t> big(kBig, 0);
      auto* b = Post(comm, false, last, 4, big.data(), big.size());
      done = 0;
      while (done == 0 && SecondsSince(t0) < kWaitS) {
        ASSERT_EQ(t->progress(comm), HVD_OK);
        ASSERT_EQ(t->test(comm, b, &done), HVD_OK) << t->last_error(comm);
      }
      ASSERT_EQ(done, 1);
      for (size_t i = 0; i < kBig; i += 4099) ASSERT_EQ(big[i], static_cast<uint8_t>(i * 7)) << i;
    } else if (rank == last) {
      const auto t0 = Clock::now();
      while (phase.load() == 0 && SecondsSince(t0) < kWaitS) std::this_thread::yield();
      uint32_t v = 0xC0FFEEu;
      auto* s = Post(comm, true, 0, 3, &v, sizeof(v));
      ASSERT_EQ(t->wait(comm, s, kWaitS), HVD_OK) << t->last_error(comm);
      std::vector<uint8_t> big(kBig);
      for (size_t i = 0; i < kBig; ++i) big[i] = static_cast<uint8_t>(i * 7);
      auto* b = Post(comm, true, 0, 4, big.data(), big.size());
      int done = 0;
      while (done == 0 && SecondsSince(t0) < kWaitS) {
        ASSERT_EQ(t->test(comm, b, &done), HVD_OK) << t->last_error(comm);
      }
      ASSERT_EQ(done, 1);
    }
  });
}

// A peer that leaves: test reports the lost connection naming it (done,
// request released), as wait does.
TEST(UcxP2pFaults, TestNamesAPeerThatLeft) {
  RunWorldEx(
      2,
      [&](int rank, void* comm) {
        const hvd_transport_t* t = Plugin();
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          t->finalize(comm);
          return true;
        }
        uint8_t b = 0;
        auto* r = Post(comm, false, 1, 1, &b, 1);
        int done = 0, st = HVD_OK;
        const auto t0 = Clock::now();
        while (done == 0 && SecondsSince(t0) < 10.0) st = t->test(comm, r, &done);
        EXPECT_EQ(done, 1);
        EXPECT_EQ(st, HVD_ERR_TRANSPORT) << t->last_error(comm);
        const std::string msg = t->last_error(comm);
        EXPECT_NE(msg.find(Who(1) + ": connection lost"), std::string::npos) << msg;
        EXPECT_NE(t->progress(comm), HVD_OK);  // broken
        return false;
      },
      WorldOptions());
}

// Zero-byte messages on their own (the plugin sends from and receives into
// a byte of its own), many in a row, both directions, one tag.
TEST_P(UcxP2p, ZeroByteMessages) {
  const int size = Ranks();
  RunWorld(size, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int i = 0; i < 200; ++i) {
      auto* r = Post(comm, false, left, 7, nullptr, 0);
      auto* s = Post(comm, true, right, 7, nullptr, 0);
      ASSERT_EQ(t->wait(comm, r, kWaitS), HVD_OK) << t->last_error(comm);
      ASSERT_EQ(t->wait(comm, s, kWaitS), HVD_OK) << t->last_error(comm);
    }
  });
}

// A message longer than the posted receive: a transport failure naming the
// sender and both lengths (UCX truncates; the plugin does not hide it).
TEST(UcxP2pFaults, LongerMessageThanTheReceiveFails) {
  RunWorld(2, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    std::vector<uint8_t> b(64, 1);
    if (rank == 0) {
      auto* r = Post(comm, false, 1, 4, b.data(), 16);
      const int st = t->wait(comm, r, kWaitS);
      EXPECT_NE(st, HVD_OK);
      const std::string msg = t->last_error(comm);
      EXPECT_NE(msg.find("ucx: receiving from " + Who(1)), std::string::npos) << msg;
      EXPECT_EQ(t->async_error(comm), st);
    } else {
      auto* s = Post(comm, true, 0, 4, b.data(), b.size());
      (void)t->wait(comm, s, 5.0);  // may fail once rank 0 closes
    }
  });
}

// A peer that never posts its send (or never receives an 8 MiB send): the
// wait returns HVD_ERR_TIMEOUT within the limit, in the transfer timeout's
// or (after set_timeout(kind peer)) the peer timeout's words, naming that
// rank and its host; the communicator is broken: later calls return the
// first error at once, and finalize returns promptly.
TEST_P(UcxP2p, MissingTransferTimesOutNamingThePeer) {
  const int size = Ranks();
  WorldOptions opt;
  opt.timeout_s = 1.0;
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    std::atomic<bool> done{false};
    RunWorldEx(
        size,
        [&](int rank, void* comm) {
          const hvd_transport_t* t = Plugin();
          const int silent = size - 1;
          if (rank != 0) {
            EXPECT_TRUE(AwaitFlag(done));
            return false;
          }
          std::vector<uint8_t> big(kBig, 3);
          uint8_t b = 0, extra = 0;
          double limit = 1.0, timeout_arg = -1;
          std::string want;
          bool send = false;
          if (variant == 0) {  // env.timeout_s
            want = "ucx: timed out after 1 s waiting for " + Who(silent);
          } else if (variant == 1) {
            EXPECT_EQ(t->set_timeout(comm, 0.5, HVD_TRANSPORT_LIMIT_PEER), HVD_OK);
            limit = 0.5;
            want = "ucx: " + Who(silent) +
                   " has not answered for 0.5 s (stopped or cut off?; peer timeout, "
                   "HVD_PEER_TIMEOUT)";
          } else if (variant == 2) {
            // Back to the transfer kind after a peer limit; an explicit
            // limit overrides both.
            EXPECT_EQ(t->set_timeout(comm, 5.0, HVD_TRANSPORT_LIMIT_PEER), HVD_OK);
            EXPECT_EQ(t->set_timeout(comm, 5.0, HVD_TRANSPORT_LIMIT_TRANSFER), HVD_OK);
            timeout_arg = 0.3;
            limit = 0.3;
            want = "ucx: timed out after 0.3 s waiting for " + Who(silent);
          } else {  // an 8 MiB send nobody receives
            send = true;
            EXPECT_EQ(t->set_timeout(comm, 0.7, HVD_TRANSPORT_LIMIT_TRANSFER), HVD_OK);
            limit = 0.7;
            want = "ucx: timed out after 0.7 s waiting to send to " + Who(silent);
          }
          auto* r = send ? Post(comm, true, silent, 5, big.data(), big.size())
                         : Post(comm, false, silent, 5, &b, 1);
          auto* never_waited = Post(comm, false, silent, 6, &extra, 1);  // finalize releases it
          (void)never_waited;
          const auto t0 = Clock::now();
          const int st = t->wait(comm, r, timeout_arg);
          const double took = SecondsSince(t0);
          EXPECT_EQ(st, HVD_ERR_TIMEOUT) << t->last_error(comm);
          EXPECT_GE(took, limit * 0.9);
          EXPECT_LT(took, limit + 1.5);
          const std::string msg = t->last_error(comm);
          EXPECT_EQ(msg, want);
          EXPECT_EQ(t->async_error(comm), HVD_ERR_TIMEOUT);
          // Broken: later calls fail at once with the first error.
          const auto t1 = Clock::now();
          hvd_transport_request_t* req = nullptr;
          const hvd_transport_buffer_t buf = Host(&b, 1);
          EXPECT_EQ(t->isend(comm, silent, 5, &buf, &req), HVD_ERR_TIMEOUT);
          EXPECT_EQ(req, nullptr);
          EXPECT_EQ(std::string(t->last_error(comm)), want);
          EXPECT_EQ(t->irecv(comm, 0 == silent ? 1 : silent, 9, &buf, &req), HVD_ERR_TIMEOUT);
          EXPECT_EQ(req, nullptr);
          EXPECT_EQ(std::string(t->last_error(comm)), want);
          EXPECT_LT(SecondsSince(t1), 0.5);
          const auto t2 = Clock::now();
          t->finalize(comm);
          EXPECT_LT(SecondsSince(t2), 2.5);
          done = true;
          return true;  // finalized
        },
        opt);
  }
}

// abort from another thread while this rank is blocked in wait (sleeping on
// the worker's event fd): the wait returns the abort's status within a
// second, with its reason; every other pending request (an 8 MiB send
// nobody receives among them) returns it at once, later calls fail with it,
// and a peer blocked on this rank fails too once it closes its connections.
TEST_P(UcxP2p, AbortFromAnotherThreadWakesABlockedWait) {
  const int size = Ranks();
  WorldOptions opt;
  opt.timeout_s = 20.0;
  const int peer = size - 1;
  std::atomic<bool> aborted_seen{false};
  RunWorldEx(
      size,
      [&](int rank, void* comm) {
        const hvd_transport_t* t = Plugin();
        if (rank == 0) {
          std::vector<uint8_t> big(kBig, 1), in(16);
          std::vector<hvd_transport_request_t*> reqs;
          reqs.push_back(Post(comm, false, peer, 3, in.data(), in.size()));   // never sent
          reqs.push_back(Post(comm, true, peer, 4, big.data(), big.size()));  // never received
          for (int p = 1; p < size; ++p) reqs.push_back(Post(comm, false, p, 9, in.data(), 1));
          Clock::time_point aborted_at;
          std::thread killer([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the wait sleeps
            aborted_at = Clock::now();
            EXPECT_EQ(t->abort(comm, HVD_ERR_ABORTED, "test: shutting down"), HVD_OK);
            EXPECT_EQ(t->abort(comm, HVD_ERR_TRANSPORT, "second abort is ignored"), HVD_OK);
          });
          const auto t_wait = Clock::now();
          const int st = t->wait(comm, reqs[0], opt.timeout_s);
          const auto woke = Clock::now();
          killer.join();
          EXPECT_EQ(st, HVD_ERR_ABORTED) << t->last_error(comm);
          EXPECT_GE(std::chrono::duration<double>(woke - t_wait).count(), 0.35);
          EXPECT_LT(std::chrono::duration<double>(woke - aborted_at).count(), 1.0);
          EXPECT_EQ(std::string(t->last_error(comm)), "test: shutting down");
          for (size_t i = 1; i < reqs.size(); ++i) {
            const auto t0 = Clock::now();
            EXPECT_EQ(t->wait(comm, reqs[i], opt.timeout_s), HVD_ERR_ABORTED) << i;
            EXPECT_LT(SecondsSince(t0), 1.0);
          }
          EXPECT_EQ(std::string(t->last_error(comm)), "test: shutting down");
          EXPECT_EQ(t->async_error(comm), HVD_ERR_ABORTED);
          hvd_transport_request_t* req = nullptr;
          const hvd_transport_buffer_t buf = Host(in.data(), 1);
          EXPECT_EQ(t->irecv(comm, peer, 1, &buf, &req), HVD_ERR_ABORTED);
          EXPECT_EQ(req, nullptr);
          aborted_seen = true;
          return false;
        }
        if (rank == peer) {
          // Blocked on rank 0, which aborts and force-closes its endpoints.
          uint8_t b = 0;
          auto* r = Post(comm, false, 0, 77, &b, 1);
          const auto t0 = Clock::now();
          const int st = t->wait(comm, r, opt.timeout_s);
          EXPECT_EQ(st, HVD_ERR_TRANSPORT) << t->last_error(comm);
          EXPECT_LT(SecondsSince(t0), 5.0) << t->last_error(comm);
          const std::string msg = t->last_error(comm);
          EXPECT_EQ(msg.rfind("ucx: " + Who(0) + ": connection lost", 0), 0u) << msg;
        }
        EXPECT_TRUE(AwaitFlag(aborted_seen));
        return false;
      },
      opt);
}

// abort before anything waits, with status HVD_OK: recorded as
// HVD_ERR_ABORTED with a message of the plugin's own.
TEST(UcxP2pFaults, AbortWithoutReason) {
  RunWorld(2, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    if (rank != 0) return;
    EXPECT_EQ(t->abort(comm, HVD_OK, nullptr), HVD_OK);
    EXPECT_EQ(t->async_error(comm), HVD_ERR_ABORTED);
    uint8_t b = 0;
    const hvd_transport_buffer_t buf = Host(&b, 1);
    hvd_transport_request_t* req = nullptr;
    EXPECT_EQ(t->isend(comm, 1, 1, &buf, &req), HVD_ERR_ABORTED);
    EXPECT_EQ(req, nullptr);
    EXPECT_NE(std::string(t->last_error(comm)).find("ucx: communicator aborted"), std::string::npos)
        << t->last_error(comm);
  });
}

// A peer that finalizes while this rank waits for it: the wait fails well
// before its limit, naming the peer's rank and host.
TEST_P(UcxP2p, PeerGoneFailsTheWaitNamingIt) {
  const int size = Ranks();
  WorldOptions opt;
  opt.timeout_s = 20.0;
  const int leaver = size - 1;
  RunWorldEx(
      size,
      [&](int rank, void* comm) {
        const hvd_transport_t* t = Plugin();
        if (rank == leaver) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          const auto t0 = Clock::now();
          t->finalize(comm);
          EXPECT_LT(SecondsSince(t0), 2.5);
          return true;
        }
        uint8_t b = 0;
        auto* r = Post(comm, false, leaver, 1, &b, 1);
        const auto t0 = Clock::now();
        const int st = t->wait(comm, r, opt.timeout_s);
        EXPECT_EQ(st, HVD_ERR_TRANSPORT) << t->last_error(comm);
        EXPECT_LT(SecondsSince(t0), 5.0);
        // Either this rank saw the leaver go, or a rank that saw it first
        // broke and told this one so (its goodbye), with the leaver in the
        // reason it gives: "ucx: rank 0 (...): connection lost (its
        // communicator broke); rank 0 had failed: ucx: rank N (...):
        // connection lost (it finalized and left ...)".
        const std::string msg = t->last_error(comm);
        EXPECT_EQ(msg.rfind("ucx: ", 0), 0u) << msg;
        EXPECT_NE(msg.find("ucx: " + Who(leaver) + ": connection lost (it finalized and left"),
                  std::string::npos)
            << msg;
        EXPECT_EQ(t->async_error(comm), HVD_ERR_TRANSPORT);
        return false;
      },
      opt);
}

TEST_P(UcxP2p, RankThatNeverJoinsFailsInitNamingIt) {
  const int size = Ranks();
  const hvd_transport_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  WorldOptions opt;
  opt.start_timeout_s = 1.5;
  const int absent = size - 1;
  MemKv kv;
  std::vector<std::thread> threads;
  for (int r = 0; r < absent; ++r) {
    threads.emplace_back([&, r] {
      hvd_transport_env_t env = MakeEnv(&kv, r, size, opt);
      hvd_transport_info_t info;
      std::memset(&info, 0, sizeof(info));
      info.struct_size = sizeof(info);
      void* comm = reinterpret_cast<void*>(0x1);
      char err[512] = {0};
      const auto t0 = Clock::now();
      const int st = t->init(&env, &info, &comm, err, sizeof(err));
      const double took = SecondsSince(t0);
      EXPECT_EQ(st, HVD_ERR_RENDEZVOUS) << err;
      EXPECT_EQ(comm, nullptr);
      const std::string want = "ucx init: rank " + std::to_string(r) + ": rank " +
                               std::to_string(absent) +
                               " did not join within the start timeout (1.5 s)";
      EXPECT_EQ(std::string(err), want);
      EXPECT_GE(took, opt.start_timeout_s * 0.9);
      EXPECT_LT(took, opt.start_timeout_s + 2.0);
      if (st == HVD_OK) t->finalize(comm);
    });
  }
  for (auto& th : threads) th.join();
}

// Finalize with requests still pending (receives never sent, an 8 MiB send
// never received), healthy or after a failure: no crash, no hang, and no
// write into a buffer after finalize (the buffers are checked afterwards).
TEST_P(UcxP2p, FinalizeWithPendingRequests) {
  const int size = Ranks();
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "healthy" : "after a timeout");
    std::atomic<int> posted{0};
    RunWorldEx(size, [&](int rank, void* comm) {
      const hvd_transport_t* t = Plugin();
      const int right = (rank + 1) % size;
      auto in = std::make_unique<std::vector<uint8_t>>(64, 0xEE);
      std::vector<uint8_t> big(kBig, 9);
      Post(comm, false, right, 42, in->data(), in->size());   // never sent
      Post(comm, true, right, 43, big.data(), big.size());    // never received
      Post(comm, false, right, 44, nullptr, 0);               // zero bytes, never sent
      posted.fetch_add(1);
      const auto t_wait = Clock::now();
      while (posted.load() < size && SecondsSince(t_wait) < kWaitS) std::this_thread::yield();
      if (variant == 1) {
        uint8_t b = 0;
        auto* r = Post(comm, false, right, 45, &b, 1);
        EXPECT_EQ(t->wait(comm, r, 0.2), HVD_ERR_TIMEOUT);
      }
      const auto t0 = Clock::now();
      t->finalize(comm);
      EXPECT_LT(SecondsSince(t0), 5.0);
      // Nothing arrived into the receive, and the send's buffer is intact.
      EXPECT_TRUE(std::all_of(in->begin(), in->end(), [](uint8_t v) { return v == 0xEE; }));
      EXPECT_TRUE(std::all_of(big.begin(), big.end(), [](uint8_t v) { return v == 9; }));
      return true;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxP2p, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param);
                         });

// Per-message cost, printed (not a pass/fail measure): round trips of small
// messages between two ranks.
// What this process writes to stdout and stderr (UCX's log goes to either)
// while f runs.
std::string CaptureOutput(const std::function<void()>& f) {
  std::string name = ::testing::TempDir() + "hvd-ucx-output-XXXXXX";
  std::vector<char> path(name.begin(), name.end());
  path.push_back('\0');
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return "";
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = dup(1), saved_err = dup(2);
  dup2(fd, 1);
  dup2(fd, 2);
  f();
  std::fflush(stdout);
  std::fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  std::string said;
  char chunk[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, chunk, sizeof(chunk))) > 0;) said.append(chunk, static_cast<size_t>(n));
  close(fd);
  unlink(path.data());
  return said;
}

// The plugin's own UCX settings (tcp segments, shared memory's peer
// checks) are given only to transports UCX_TLS lets UCX load: UCX reports
// a setting no loaded transport takes as an "invalid configuration" on
// every rank's output. Each list still carries messages (4 MiB: several
// of the plugin's 1 MiB tcp segments, and UCX's rendezvous protocol).
TEST(UcxP2pConfig, NoInvalidConfigurationForAnyTransportList) {
  for (const char* tls : {"", "tcp,self", "^sm", "all", "tcp", "^tcp", "sm,self"}) {
    SCOPED_TRACE(std::string("UCX_TLS=") + tls);
    hvd::test::ScopedEnv env("UCX_TLS", tls[0] != '\0' ? tls : nullptr);
    const std::string said = CaptureOutput([&] {
      RunWorld(2, [&](int rank, void* comm) {
        const hvd_transport_t* t = Plugin();
        std::vector<uint8_t> buf(size_t{4} << 20);
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(rank == 0 ? i * 7 : 0);
        ASSERT_EQ(t->wait(comm, Post(comm, rank == 0, 1 - rank, 5, buf.data(), buf.size()), kWaitS),
                  HVD_OK)
            << t->last_error(comm);
        if (rank == 1) {
          for (size_t i = 0; i < buf.size(); ++i) {
            ASSERT_EQ(buf[i], static_cast<uint8_t>(i * 7)) << "byte " << i;
          }
        }
      });
    });
    EXPECT_EQ(said.find("invalid configuration"), std::string::npos) << said;
  }
}

// Messages nobody receives (rank 1 sends two, rank 0 never posts their
// receives: a mismatched program, or sends that arrive after a failed
// collective cancelled its receives) are dropped at finalize without UCX's
// "unexpected tag-receive descriptor ... was not matched" on the output.
TEST(UcxP2pFaults, UnreceivedMessagesLeaveNoWarningAtFinalize) {
  const std::string said = CaptureOutput([&] {
    RunWorld(2, [&](int rank, void* comm) {
      const hvd_transport_t* t = Plugin();
      std::vector<uint8_t> small(64, 1), medium(size_t{4} << 10, 2), token(1, 3);
      if (rank == 1) {
        for (std::vector<uint8_t>* b : {&small, &medium}) {
          ASSERT_EQ(t->wait(comm, Post(comm, true, 0, 7, b->data(), b->size()), kWaitS), HVD_OK)
              << t->last_error(comm);
        }
      }
      // Both unreceived sends went out before this exchange.
      ASSERT_EQ(t->wait(comm, Post(comm, rank == 1, 1 - rank, 8, token.data(), 1), kWaitS), HVD_OK)
          << t->last_error(comm);
    });
  });
  EXPECT_EQ(said.find("unexpected tag-receive"), std::string::npos) << said;
  EXPECT_EQ(said.find("was not matched"), std::string::npos) << said;
}

// HVD_UCX_SPIN_US: a number of microseconds is taken (a wait that sleeps at
// once still completes), anything else is refused with a warning naming it.
TEST(UcxP2pConfig, SpinSettingTakenOrRefusedByName) {
  struct Said {
    std::mutex mu;
    std::string text;
    static void Log(void* self, int, const char* msg) {
      auto* s = static_cast<Said*>(self);
      std::lock_guard<std::mutex> lock(s->mu);
      s->text += std::string(msg) + "\n";
    }
  };
  for (const char* v : {"0", "200", "fast", "-3", "12us"}) {
    SCOPED_TRACE(std::string("HVD_UCX_SPIN_US=") + v);
    hvd::test::ScopedEnv env("HVD_UCX_SPIN_US", v);
    Said said;
    WorldOptions opt;
    opt.log = &Said::Log;
    opt.logger = &said;
    RunWorld(
        2,
        [&](int rank, void* comm) {
          const hvd_transport_t* t = Plugin();
          uint32_t x = rank == 0 ? 0xC0FFEEu : 0;
          ASSERT_EQ(t->wait(comm, Post(comm, rank == 0, 1 - rank, 3, &x, sizeof(x)), kWaitS), HVD_OK)
              << t->last_error(comm);
          EXPECT_EQ(x, 0xC0FFEEu);
        },
        opt);
    const bool number = std::string(v) == "0" || std::string(v) == "200";
    EXPECT_EQ(said.text.find(std::string("HVD_UCX_SPIN_US='") + v + "'") != std::string::npos,
              !number)
        << said.text;
  }
}

TEST(UcxP2pCost, PingPong) {
  constexpr int kTrips = 2000;
  RunWorld(2, [&](int rank, void* comm) {
    const hvd_transport_t* t = Plugin();
    const int other = 1 - rank;
    for (size_t bytes : {size_t{0}, size_t{8}, size_t{4096}}) {
      std::vector<uint8_t> buf(std::max<size_t>(bytes, 1));
      const auto t0 = Clock::now();
      for (int i = 0; i < kTrips; ++i) {
        for (bool send : {rank == 0, rank != 0}) {
          ASSERT_EQ(t->wait(comm, Post(comm, send, other, 1, buf.data(), bytes), kWaitS), HVD_OK)
              << t->last_error(comm);
        }
      }
      if (rank == 0) {
        std::printf("[ cost     ] %zu-byte round trip: %.1f us\n", bytes,
                    SecondsSince(t0) * 1e6 / kTrips);
      }
    }
  });
}

}  // namespace
