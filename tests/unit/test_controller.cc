// Negotiation: ordering, response cache, mismatches and stalls, with ranks as
// threads over in-memory collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "core/negotiation/controller.h"
#include "fake_fabric.h"

namespace hvd {
namespace {

OpRequest MakeAllreduce(const std::string& name, std::vector<int64_t> shape,
                        hvd_dtype_t dtype = HVD_FLOAT32) {
  OpRequest r;
  r.type = OpType::kAllreduce;
  r.reduce_op = HVD_SUM;
  TensorSpec t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  r.tensors.push_back(t);
  r.handle = MakeHandle("allreduce '" + name + "'");
  return r;
}

// Per rank: the sequence of (key, ok) responses over all cycles.
using Trace = std::vector<std::pair<std::string, hvd_status_t>>;

struct Harness {
  int n;
  int cache;
  StallConfig stall{0, 0};
  test::Fabric fabric;
  std::vector<Logger> logs;
  std::vector<std::unique_ptr<Controller>> ctl;
  std::vector<std::unique_ptr<test::FakeControlPlane>> cps;
  std::vector<Trace> traces;

  Harness(int n_, int cache_, StallConfig st = {0, 0})
      : n(n_), cache(cache_), stall(st), fabric(n_), logs(n_, Logger(HVD_LOG_ERROR, nullptr, nullptr)),
        traces(n_) {
    for (int r = 0; r < n; ++r) {
      ctl.push_back(std::make_unique<Controller>(r, n, cache, stall, &logs[r]));
      cps.push_back(std::make_unique<test::FakeControlPlane>(&fabric, r));
    }
  }

  // Runs `cycles` cycles on every rank; before cycle c, rank r adds
  // submissions[r][c] (if any).
  void Run(int cycles, const std::vector<std::vector<std::vector<OpRequest>>>& submissions) {
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r) {
      th.emplace_back([&, r] {
        for (int c = 0; c < cycles; ++c) {
          if (r < static_cast<int>(submissions.size()) &&
              c < static_cast<int>(submissions[r].size())) {
            for (const OpRequest& q : submissions[r][c]) ctl[r]->Add(q, Clock::now());
          }
          std::vector<Response> out;
          bool shutdown = false;
          Status s = ctl[r]->Cycle(cps[r].get(), false, Clock::now(), &out, &shutdown);
          ASSERT_TRUE(s.ok()) << s.message();
          for (const Response& resp : out) {
            traces[r].push_back({resp.key(), resp.error.code()});
            OpRequest req;
            if (ctl[r]->Take(resp, &req)) req.handle->Complete(resp.error);
          }
        }
      });
    }
    for (auto& t : th) t.join();
  }
};

TEST(Controller, SameOrderOnEveryRankDespiteShuffledSubmission) {
  for (int n : {2, 3, 4, 8}) {
    Harness h(n, 64);
    std::vector<std::vector<std::vector<OpRequest>>> subs(n);
    std::mt19937 rng(42);
    for (int r = 0; r < n; ++r) {
      std::vector<int> idx(40);
      for (int i = 0; i < 40; ++i) idx[i] = i;
      std::shuffle(idx.begin(), idx.end(), rng);
      subs[r].resize(5);
      // Spread the 40 names over 5 cycles in a rank-specific order.
      for (int i = 0; i < 40; ++i) {
        subs[r][i % 5].push_back(MakeAllreduce("t" + std::to_string(idx[i]), {3, 2}));
      }
    }
    h.Run(8, subs);
    ASSERT_EQ(h.traces[0].size(), 40u) << "n=" << n;
    std::set<std::string> names;
    for (const auto& e : h.traces[0]) {
      names.insert(e.first);
      EXPECT_EQ(e.second, HVD_OK);
    }
    EXPECT_EQ(names.size(), 40u);
    for (int r = 1; r < n; ++r) EXPECT_EQ(h.traces[r], h.traces[0]) << "rank " << r << " n=" << n;
  }
}

TEST(Controller, SteadyStateUsesTheCacheOnly) {
  Harness h(3, 16);
  auto step = [&](int tag) {
    std::vector<std::vector<std::vector<OpRequest>>> subs(3);
    for (int r = 0; r < 3; ++r) {
      subs[r].resize(1);
      for (int i = 0; i < 5; ++i) {
        int k = (i + r * 2) % 5;  // a different order on every rank
        subs[r][0].push_back(MakeAllreduce("g" + std::to_string(k), {k + 1}));
      }
    }
    (void)tag;
    h.Run(2, subs);
  };
  step(0);
  uint64_t full_after_first = h.ctl[0]->full_rounds();
  EXPECT_GE(full_after_first, 1u);
  EXPECT_EQ(h.ctl[0]->cache().used(), 5u);
  for (int s = 1; s < 4; ++s) step(s);
  EXPECT_EQ(h.ctl[0]->full_rounds(), full_after_first) << "cached steps must skip the full round";
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(h.traces[r].size(), 20u);
    EXPECT_EQ(h.traces[r], h.traces[0]);
  }
}

TEST(Controller, ShapeChangeOnOneRankIsAMismatchOnAllAndTheCacheRecovers) {
  Harness h(2, 8);
  std::vector<std::vector<std::vector<OpRequest>>> subs(2);
  subs[0] = {{MakeAllreduce("w", {4})}};
  subs[1] = {{MakeAllreduce("w", {4})}};
  h.Run(2, subs);  // negotiated and cached
  subs[0] = {{MakeAllreduce("w", {4})}};
  subs[1] = {{MakeAllreduce("w", {5})}};  // rank 1 changed shape
  h.Run(4, subs);
  ASSERT_EQ(h.traces[0].size(), 2u);
  EXPECT_EQ(h.traces[0][1].second, HVD_ERR_MISMATCH);
  EXPECT_EQ(h.traces[1][1].second, HVD_ERR_MISMATCH);
  subs[0] = {{MakeAllreduce("w", {5})}};
  subs[1] = {{MakeAllreduce("w", {5})}};
  h.Run(3, subs);
  ASSERT_EQ(h.traces[0].size(), 3u);
  EXPECT_EQ(h.traces[0][2].second, HVD_OK);
  EXPECT_EQ(h.traces[1], h.traces[0]);
}

TEST(Controller, DtypeMismatchNamesBothRanks) {
  Harness h(2, 0);
  std::vector<std::vector<std::vector<OpRequest>>> subs(2);
  subs[0] = {{MakeAllreduce("x", {2}, HVD_FLOAT32)}};
  subs[1] = {{MakeAllreduce("x", {2}, HVD_INT32)}};
  std::vector<HandleRef> handles = {subs[0][0][0].handle, subs[1][0][0].handle};
  h.Run(2, subs);
  for (auto& hd : handles) {
    Status s = hd->status();
    EXPECT_EQ(s.code(), HVD_ERR_MISMATCH);
    EXPECT_NE(s.message().find("dtype"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("float32"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("int32"), std::string::npos) << s.message();
  }
}

OpRequest MakeGroup(const std::vector<std::pair<std::string, std::vector<int64_t>>>& members) {
  OpRequest r = MakeAllreduce(members.front().first, members.front().second);
  for (size_t i = 1; i < members.size(); ++i) {
    TensorSpec t = r.tensors.front();
    t.name = members[i].first;
    t.shape = members[i].second;
    r.tensors.push_back(t);
  }
  return r;
}

// Runs one request per rank through negotiation and returns every rank's
// handle status.
std::vector<Status> NegotiateOnce(std::vector<OpRequest> per_rank) {
  const int n = static_cast<int>(per_rank.size());
  Harness h(n, 4);
  std::vector<std::vector<std::vector<OpRequest>>> subs(n);
  std::vector<HandleRef> handles;
  for (int r = 0; r < n; ++r) {
    handles.push_back(per_rank[r].handle);
    subs[r] = {{per_rank[r]}};
  }
  h.Run(2, subs);
  std::vector<Status> out;
  for (auto& hd : handles) out.push_back(hd->status());
  return out;
}

TEST(Controller, GroupShapeMismatchNamesTheMemberAndBothShapes) {
  // The second member differs on rank 2; the group's first name is its key.
  auto good = [] { return MakeGroup({{"bad.8.a", {2, 3}}, {"bad.8.b", {4}}}); };
  std::vector<Status> got =
      NegotiateOnce({good(), good(), MakeGroup({{"bad.8.a", {2, 3}}, {"bad.8.b", {5}}})});
  const std::string want =
      "ranks disagree on the shape of 'bad.8.b' (tensor 2 of 2 in grouped allreduce 'bad.8.a'): "
      "rank 0 submitted float32[4], rank 2 submitted float32[5]";
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].code(), HVD_ERR_MISMATCH) << "rank " << r;
    EXPECT_EQ(got[r].message(), want) << "rank " << r;
  }
}

TEST(Controller, GroupMembersMismatchListsBothGroups) {
  std::vector<Status> got = NegotiateOnce(
      {MakeGroup({{"g", {1}}, {"h", {1}}}), MakeGroup({{"g", {1}}, {"i", {1}}, {"j", {2}}})});
  const std::string want =
      "ranks disagree on the group members of 'g': rank 0 grouped ['g', 'h'], rank 1 grouped "
      "['g', 'i', 'j']";
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), HVD_ERR_MISMATCH) << "rank " << r;
    EXPECT_EQ(got[r].message(), want) << "rank " << r;
  }
}

TEST(Controller, SingleTensorShapeMismatchQuotesBothDescriptors) {
  std::vector<Status> got = NegotiateOnce({MakeAllreduce("w", {4}), MakeAllreduce("w", {5})});
  const std::string want =
      "ranks disagree on the shape of 'w': rank 0 submitted allreduce 'w' float32[4] sum, rank 1 "
      "submitted allreduce 'w' float32[5] sum";
  for (int r = 0; r < 2; ++r) EXPECT_EQ(got[r].message(), want) << "rank " << r;
}

TEST(Controller, SmallCacheEvictsDeterministically) {
  Harness h(2, 2);
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<std::vector<OpRequest>>> subs(2);
    for (int r = 0; r < 2; ++r) {
      subs[r].resize(1);
      for (int i = 0; i < 5; ++i) {
        subs[r][0].push_back(MakeAllreduce("e" + std::to_string(r ? 4 - i : i), {2}));
      }
    }
    h.Run(3, subs);
  }
  EXPECT_EQ(h.traces[0].size(), 20u);
  EXPECT_EQ(h.traces[1], h.traces[0]);
  EXPECT_LE(h.ctl[0]->cache().used(), 2u);
  EXPECT_GT(h.ctl[0]->cache().evictions(), 0u);
  EXPECT_EQ(h.ctl[0]->cache().evictions(), h.ctl[1]->cache().evictions());
}

TEST(Controller, StalledTensorErrorsNamingTheMissingRank) {
  Harness h(3, 4, StallConfig{0.05, 0.2});
  std::vector<std::vector<std::vector<OpRequest>>> subs(3);
  subs[0] = {{MakeAllreduce("late", {1})}};
  subs[1] = {{MakeAllreduce("late", {1})}};
  subs[2] = {{}};  // rank 2 never submits "late"
  auto handle0 = subs[0][0][0].handle;
  auto handle1 = subs[1][0][0].handle;
  // Every rank runs the same number of cycles (collectives stay matched),
  // 5 ms apart: about 0.6 s, three times the stall shutdown time.
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] {
      for (int c = 0; c < 120; ++c) {
        if (c == 0) {
          for (const OpRequest& q : subs[r][0]) h.ctl[r]->Add(q, Clock::now());
        }
        std::vector<Response> out;
        bool sd = false;
        ASSERT_TRUE(h.ctl[r]->Cycle(h.cps[r].get(), false, Clock::now(), &out, &sd).ok());
        for (const Response& resp : out) {
          OpRequest req;
          if (h.ctl[r]->Take(resp, &req)) req.handle->Complete(resp.error);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  for (auto& t : th) t.join();
  for (auto& hd : {handle0, handle1}) {
    Status s = hd->status();
    EXPECT_EQ(s.code(), HVD_ERR_TIMEOUT) << s.message();
    EXPECT_NE(s.message().find("ranks [2] never submitted"), std::string::npos) << s.message();
  }
  EXPECT_EQ(h.ctl[0]->pending(), 0u);
}

// Stall rounds every second find out who a cached request waits for (the
// MIN vector only says "not everyone"), long before the stall warning is
// due, and log nothing: the warning still waits for its own time.
TEST(Controller, InspectionNamesMissingRanksWithoutAStallWarning) {
  struct Sink {
    std::mutex mu;
    std::vector<std::string> lines;
    static void Log(int, const char* msg, void* user) {
      auto* s = static_cast<Sink*>(user);
      std::lock_guard<std::mutex> g(s->mu);
      s->lines.push_back(msg);
    }
  } sink;
  Harness h(3, 4, StallConfig{60, 0});
  h.logs[0] = Logger(HVD_LOG_WARNING, &Sink::Log, &sink);
  std::vector<std::vector<std::vector<OpRequest>>> subs(3);
  for (int r = 0; r < 3; ++r) subs[r] = {{MakeAllreduce("c", {1})}};
  h.Run(2, subs);  // negotiated and cached
  ASSERT_EQ(h.ctl[0]->cache().used(), 1u);
  subs[0] = {{MakeAllreduce("c", {1})}};
  subs[1] = {{MakeAllreduce("c", {1})}};
  subs[2] = {{}};  // rank 2 does not submit it this time
  auto handle0 = subs[0][0][0].handle;
  auto handle1 = subs[1][0][0].handle;
  const uint64_t full_before = h.ctl[0]->full_rounds();
  const auto start = Clock::now();
  std::vector<std::thread> th;
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] {
      for (const OpRequest& q : subs[r][0]) h.ctl[r]->Add(q, Clock::now());
      for (int c = 0; c < 150; ++c) {  // about 1.5 s
        std::vector<Response> out;
        bool sd = false;
        ASSERT_TRUE(h.ctl[r]->Cycle(h.cps[r].get(), false, Clock::now(), &out, &sd).ok());
        EXPECT_TRUE(out.empty());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  for (auto& t : th) t.join();
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& hd : {handle0, handle1}) {
    Status s = hd->Wait(0);
    EXPECT_EQ(s.code(), HVD_ERR_TIMEOUT);
    EXPECT_EQ(s.message(), "allreduce 'c' did not complete within 0 s: ranks [2] have not submitted 'c'");
  }
  // The first round once the request is 1 s old, then at most one a second.
  const uint64_t rounds = h.ctl[0]->full_rounds() - full_before;
  EXPECT_GE(rounds, 1u);
  EXPECT_LE(static_cast<double>(rounds), took) << rounds << " stall rounds in " << took << " s";
  EXPECT_TRUE(sink.lines.empty()) << sink.lines.front();
}

OpRequest MakeJoin() {
  OpRequest r;
  r.type = OpType::kJoin;
  TensorSpec t;
  t.name = "join";
  r.tensors.push_back(t);
  r.handle = MakeHandle("join");
  return r;
}

TEST(Controller, JoinedRankStandsInForAllreduceUntilEveryoneJoins) {
  Harness h(3, 8);
  // Step 1 on all ranks: "a" gets cached.
  std::vector<std::vector<std::vector<OpRequest>>> subs(3);
  for (int r = 0; r < 3; ++r) subs[r] = {{MakeAllreduce("a", {2})}};
  h.Run(2, subs);
  // Rank 2 runs out of data and joins; ranks 0 and 1 go on with "a" (cached)
  // and "b" (new), then a broadcast (not allowed while a rank has joined).
  OpRequest bcast = MakeAllreduce("c", {2});
  bcast.type = OpType::kBroadcast;
  OpRequest bcast1 = bcast;
  bcast1.handle = MakeHandle("c");
  OpRequest join2 = MakeJoin();
  subs[0] = {{}, {MakeAllreduce("a", {2}), MakeAllreduce("b", {3})}, {bcast}};
  subs[1] = {{}, {MakeAllreduce("b", {3}), MakeAllreduce("a", {2})}, {bcast1}};
  subs[2] = {{join2}};
  h.Run(5, subs);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(h.traces[r].size(), 4u) << "rank " << r;
    EXPECT_EQ(h.traces[r], h.traces[0]);
  }
  EXPECT_FALSE(join2.handle->done());
  EXPECT_EQ(bcast.handle->status().code(), HVD_ERR_UNSUPPORTED);
  EXPECT_NE(bcast.handle->status().message().find("ranks [2]"), std::string::npos);
  EXPECT_TRUE(h.ctl[0]->joined(2));
  // Now ranks 0 and 1 join too: the join completes everywhere.
  OpRequest j0 = MakeJoin(), j1 = MakeJoin();
  subs[0] = {{j0}};
  subs[1] = {{j1}};
  subs[2] = {{}};
  h.Run(3, subs);
  EXPECT_EQ(j0.handle->status().code(), HVD_OK);
  EXPECT_EQ(j1.handle->status().code(), HVD_OK);
  EXPECT_EQ(join2.handle->status().code(), HVD_OK);
  EXPECT_FALSE(h.ctl[0]->joined(2));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(h.traces[r], h.traces[0]);
}

TEST(Controller, RankZerosAutotuneProposalReachesEveryRankInTheSameCycle) {
  Harness h(4, 8);
  h.ctl[0]->set_proposal(7);  // every other rank keeps the default 255 ("no proposal")
  h.Run(1, {});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(h.ctl[r]->decided(), 7) << "rank " << r;
  h.ctl[0]->set_proposal(255);
  h.Run(1, {});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(h.ctl[r]->decided(), 255) << "rank " << r;
}

// The cache's steady-state check compares a request with a cached descriptor
// field by field; it must agree with building the descriptor and comparing.
TEST(Controller, DescribesRequestAgreesWithDescriptorEquality) {
  OpRequest base = MakeAllreduce("g", {3, 2});
  TensorSpec second = base.tensors[0];
  second.name = "g.b";
  second.shape = {7};
  base.tensors.push_back(second);
  const RequestDesc d = DescFromRequest(base);
  std::vector<std::function<void(OpRequest&)>> changes = {
      [](OpRequest&) {},
      [](OpRequest& r) { r.type = OpType::kBroadcast; },
      [](OpRequest& r) { r.reduce_op = HVD_MAX; },
      [](OpRequest& r) { r.tensors[0].dtype = HVD_FLOAT64; },
      [](OpRequest& r) { r.tensors[0].device = 0; },
      [](OpRequest& r) { r.root = 1; },
      [](OpRequest& r) { r.prescale = 0.5; },
      [](OpRequest& r) { r.postscale = -1.0; },
      [](OpRequest& r) { r.tensors[0].shape = {2, 3}; },
      [](OpRequest& r) { r.tensors[1].shape = {7, 1}; },
      [](OpRequest& r) { r.tensors[1].name = "g.c"; },
      [](OpRequest& r) { r.tensors.pop_back(); },
      [](OpRequest& r) { r.splits = {1, 2}; },
      [](OpRequest& r) { r.tensors[0].name = "h"; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    OpRequest r = base;
    changes[i](r);
    EXPECT_EQ(DescribesRequest(d, r), DescFromRequest(r) == d) << "change " << i;
  }
  // Signed zeros are different scale factors (bitwise, as the descriptor compares).
  OpRequest pz = base, nz = base;
  pz.prescale = 0.0;
  nz.prescale = -0.0;
  EXPECT_FALSE(DescribesRequest(DescFromRequest(pz), nz));
}

}  // namespace
}  // namespace hvd
