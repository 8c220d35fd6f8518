// The fusion planner alone: which allreduces share a batch, and the
// stand-in zeros of a joined rank.
#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/fusion/planner.h"

namespace hvd {
namespace {

OpRequest Allreduce(const std::string& name, int64_t n, hvd_dtype_t dtype = HVD_FLOAT32,
                    hvd_reduce_op_t op = HVD_SUM, double prescale = 1.0) {
  OpRequest r;
  r.type = OpType::kAllreduce;
  r.reduce_op = op;
  r.prescale = prescale;
  TensorSpec t;
  t.name = name;
  t.dtype = dtype;
  t.shape = {n};
  r.tensors.push_back(std::move(t));
  return r;
}

// Every rank's descriptor of `req`, on `devices` (one per rank).
Response ResponseOf(const OpRequest& req, const std::vector<int32_t>& devices) {
  Response resp;
  auto all = std::make_shared<std::vector<RequestDesc>>();
  for (int32_t d : devices) {
    RequestDesc desc = DescFromRequest(req);
    desc.device = d;
    all->push_back(desc);
  }
  resp.all = all;
  return resp;
}

TEST(FusionPlanner, BatchesAlikeAllreducesUpToTheThreshold) {
  std::vector<OpRequest> reqs{Allreduce("a", 4), Allreduce("b", 4), Allreduce("c", 4)};
  std::vector<Response> resps;
  for (const auto& r : reqs) resps.push_back(ResponseOf(r, {HVD_DEVICE_CPU, HVD_DEVICE_CPU}));
  FusionPlanner p;
  p.Begin(/*threshold=*/32, /*size=*/2);
  for (size_t i = 0; i < reqs.size(); ++i) p.AddAllreduce(&reqs[i], resps[i]);
  ASSERT_EQ(p.size(), 2u) << "16 + 16 bytes fit 32, the third opens a new batch";
  EXPECT_EQ(p[0].batch.size(), 2u);
  EXPECT_EQ(p[0].bytes, 32u);
  EXPECT_EQ(p[1].batch.size(), 1u);
  EXPECT_EQ(p[1].batch[0], &reqs[2]);
}

TEST(FusionPlanner, NoThresholdRunsEachAllreduceAlone) {
  std::vector<OpRequest> reqs{Allreduce("a", 1), Allreduce("b", 1)};
  FusionPlanner p;
  p.Begin(0, 1);
  for (auto& r : reqs) p.AddAllreduce(&r, ResponseOf(r, {HVD_DEVICE_CPU}));
  EXPECT_EQ(p.size(), 2u);
}

TEST(FusionPlanner, KindsNeverMix) {
  std::vector<OpRequest> reqs{Allreduce("f32", 2), Allreduce("f64", 2, HVD_FLOAT64),
                              Allreduce("max", 2, HVD_FLOAT32, HVD_MAX),
                              Allreduce("scaled", 2, HVD_FLOAT32, HVD_SUM, 0.5),
                              Allreduce("f32.2", 2)};
  std::vector<Response> resps;
  for (const auto& r : reqs) resps.push_back(ResponseOf(r, {HVD_DEVICE_CPU}));
  FusionPlanner p;
  p.Begin(1 << 20, 1);
  for (size_t i = 0; i < reqs.size(); ++i) p.AddAllreduce(&reqs[i], resps[i]);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].batch.size(), 2u) << "the two float32 sums share the first batch";
  EXPECT_EQ(p[0].batch[1], &reqs[4]);
}

TEST(FusionPlanner, DevicesAreComparedOnEveryRank) {
  // Ordinals differ across ranks: batches follow every rank's device.
  std::vector<OpRequest> reqs{Allreduce("a", 2), Allreduce("b", 2), Allreduce("c", 2)};
  std::vector<Response> resps{ResponseOf(reqs[0], {0, 1}), ResponseOf(reqs[1], {0, 2}),
                              ResponseOf(reqs[2], {0, 1})};
  FusionPlanner p;
  p.Begin(1 << 20, 2);
  for (size_t i = 0; i < reqs.size(); ++i) p.AddAllreduce(&reqs[i], resps[i]);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].batch.size(), 2u);
  EXPECT_EQ(p[0].batch[1], &reqs[2]);
}

TEST(FusionPlanner, SinglesKeepTheirPlaceAndStorageIsReused) {
  std::vector<OpRequest> reqs{Allreduce("a", 2), Allreduce("b", 2)};
  OpRequest bcast;
  bcast.type = OpType::kBroadcast;
  Response r0 = ResponseOf(reqs[0], {HVD_DEVICE_CPU});
  Response r1 = ResponseOf(reqs[1], {HVD_DEVICE_CPU});
  FusionPlanner p;
  for (int cycle = 0; cycle < 2; ++cycle) {
    p.Begin(1 << 20, 1);
    p.AddAllreduce(&reqs[0], r0);
    p.AddSingle(&bcast, &r0);
    p.AddAllreduce(&reqs[1], r1);
    ASSERT_EQ(p.size(), 2u) << "cycle " << cycle;
    EXPECT_EQ(p[0].batch.size(), 2u);
    EXPECT_EQ(p[1].single, &bcast);
    EXPECT_TRUE(p[1].batch.empty());
  }
}

TEST(FusionPlanner, JoinedRankContributesZerosOfTheAnnouncedShape) {
  OpRequest req = Allreduce("w", 3, HVD_FLOAT64);
  Response resp = ResponseOf(req, {HVD_DEVICE_CPU, HVD_DEVICE_CPU});
  resp.joined = {1};
  std::deque<std::vector<uint8_t>> zeros;
  OpRequest out;
  EXPECT_FALSE(MakeJoinedZeros(resp, 0, Clock::now(), &zeros, &out)) << "rank 0 did not join";
  ASSERT_TRUE(MakeJoinedZeros(resp, 1, Clock::now(), &zeros, &out));
  ASSERT_EQ(out.tensors.size(), 1u);
  EXPECT_EQ(out.tensors[0].name, "w");
  EXPECT_EQ(out.tensors[0].dtype, HVD_FLOAT64);
  ASSERT_EQ(zeros.size(), 1u);
  EXPECT_EQ(zeros[0], std::vector<uint8_t>(24, 0));
  EXPECT_EQ(out.tensors[0].input, zeros[0].data());
  ASSERT_TRUE(out.handle);
  EXPECT_EQ(RequestBytes(out), 24u);
}

}  // namespace
}  // namespace hvd
