// The flight recorder's ring, its steps, its requests for a dump and its
// JSON (the multi-rank behaviour: bindings/python/tests/test_mp_flight_recorder.py).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/observability/flight_recorder.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

OpRequest Request(const std::string& name, OpType type = OpType::kAllreduce) {
  OpRequest r;
  r.type = type;
  r.reduce_op = HVD_SUM;
  TensorSpec t;
  t.name = name;
  t.dtype = HVD_FLOAT32;
  t.shape = {4, 2};
  r.tensors.push_back(t);
  r.enqueued = Clock::now();
  return r;
}

FlightRecorder::Identity Me(int rank, int size) {
  FlightRecorder::Identity id;
  id.rank = rank;
  id.size = size;
  id.host = "h";
  id.transport = "local";
  return id;
}

TEST(FlightRecorder, OffRecordsNothingAndCannotDump) {
  FlightRecorder fr;
  fr.Configure(0, "/tmp", Me(0, 1));
  EXPECT_FALSE(fr.on());
  EXPECT_EQ(fr.Submitted(Request("a"), -1, 0), 0u);
  fr.Want("error");
  EXPECT_FALSE(fr.pending());
  EXPECT_EQ(fr.TakeWanted(), nullptr);
  const Status s = fr.Write(fr.Take(), "/tmp/never.json", "api", nullptr, nullptr);
  EXPECT_EQ(s.code(), HVD_ERR_UNSUPPORTED);
}

TEST(FlightRecorder, TheRingKeepsTheLastOperationsInOrder) {
  FlightRecorder fr;
  fr.Configure(3, "", Me(0, 2));
  uint64_t seq[5];
  for (int i = 0; i < 5; ++i) seq[i] = fr.Submitted(Request("t" + std::to_string(i)), -1, i);
  EXPECT_EQ(seq[0], 1u);
  EXPECT_EQ(seq[4], 5u);
  // A step of an overwritten record is dropped, not written into its successor.
  fr.Finished(seq[0], Clock::now(), Error(HVD_ERR_TIMEOUT, "old"));
  const auto t = Clock::now();
  fr.Negotiated(seq[3], t);
  fr.Started(seq[3], t, 96);
  fr.Finished(seq[3], t, Status::Ok());
  fr.Finished(seq[4], t, Error(HVD_ERR_TRANSPORT, "rank 1 died"));
  const FlightRecorder::Snapshot snap = fr.Take();
  EXPECT_EQ(snap.recorded, 5u);
  ASSERT_EQ(snap.entries.size(), 3u);
  EXPECT_EQ(snap.entries[0].name, "t2");
  EXPECT_EQ(snap.entries[0].finished, 0) << "the stale step landed on t2";
  EXPECT_EQ(snap.entries[1].name, "t3");
  EXPECT_EQ(snap.entries[1].unit_bytes, 96u);
  EXPECT_EQ(snap.entries[1].bytes, 32u);
  EXPECT_NE(snap.entries[1].negotiated, 0);
  EXPECT_EQ(snap.entries[1].status, HVD_OK);
  EXPECT_EQ(snap.entries[2].set_seq, 4u);
  EXPECT_EQ(snap.entries[2].status, HVD_ERR_TRANSPORT);
  EXPECT_EQ(snap.entries[2].error, "rank 1 died");
}

// Names of any length come back whole (a short one is kept in place, a long
// one apart), in a slot that held the other kind before; a group's bytes
// are all its tensors'.
TEST(FlightRecorder, NamesAndAGroupsBytesComeBackWhole) {
  FlightRecorder fr;
  fr.Configure(2, "", Me(0, 2));
  const std::string long_name(300, 'n');
  const std::string inline_max(56, 'i'), just_over(57, 'o');
  OpRequest group = Request("g0");
  TensorSpec second = group.tensors.front();
  second.name = "g1";
  second.dtype = HVD_FLOAT64;
  second.shape = {3};
  group.tensors.push_back(second);
  for (const OpRequest& r : {Request(long_name), Request(inline_max), Request(just_over),
                             Request("short"), group}) {
    fr.Submitted(r, -1, 0);
  }
  const FlightRecorder::Snapshot snap = fr.Take();
  ASSERT_EQ(snap.entries.size(), 2u);
  EXPECT_EQ(snap.entries[0].name, "short");  // in the slot "inline_max" had
  EXPECT_EQ(snap.entries[0].bytes, 32u);
  EXPECT_EQ(snap.entries[1].name, "g0");     // in the slot "just_over" had
  EXPECT_EQ(snap.entries[1].tensors, 2u);
  EXPECT_EQ(snap.entries[1].bytes, 32u + 24u);
  FlightRecorder fr2;
  fr2.Configure(4, "", Me(0, 1));
  for (const std::string& n : {long_name, inline_max, just_over}) fr2.Submitted(Request(n), -1, 0);
  const FlightRecorder::Snapshot s2 = fr2.Take();
  ASSERT_EQ(s2.entries.size(), 3u);
  EXPECT_EQ(s2.entries[0].name, long_name);
  EXPECT_EQ(s2.entries[1].name, inline_max);
  EXPECT_EQ(s2.entries[2].name, just_over);
}

TEST(FlightRecorder, AWantedDumpIsTakenOnce) {
  FlightRecorder fr;
  fr.Configure(4, "/tmp/x", Me(3, 4));
  EXPECT_EQ(fr.DefaultPath(), "/tmp/x/rank-3.json");
  EXPECT_FALSE(fr.pending());
  fr.Want("error");
  EXPECT_TRUE(fr.pending());
  EXPECT_STREQ(fr.TakeWanted(), "error");
  EXPECT_FALSE(fr.pending());
  EXPECT_EQ(fr.TakeWanted(), nullptr);
}

TEST(FlightRecorder, TheFileIsJsonWithEveryField) {
  FlightRecorder fr;
  fr.Configure(8, "", Me(1, 4));
  const uint64_t a = fr.Submitted(Request("grad \"w\"\n"), -1, 0);
  const uint64_t b = fr.Submitted(Request("g", OpType::kAllgather), 0, 0);
  const auto t = Clock::now();
  fr.Negotiated(a, t);
  fr.Started(a, t, 32);
  fr.Finished(a, t, Status::Ok());
  fr.Finished(b, t, Error(HVD_ERR_TIMEOUT, "rank 2 has not answered"));
  fr.Stopped(Error(HVD_ERR_TIMEOUT, "first"), t);
  fr.Stopped(Error(HVD_ERR_TRANSPORT, "second"), t);  // the first reason stays
  FlightRecorder::Snapshot snap = fr.Take();
  snap.sets.push_back({-1, {0, 1, 2, 3}});
  snap.sets.push_back({0, {1, 3}});
  auto algorithm = [](const void*, int set_id, OpType, uint64_t) -> const char* {
    return set_id < 0 ? "ring" : nullptr;
  };
  const std::string j = fr.Json(snap, "api", algorithm, nullptr);
  EXPECT_NE(j.find("\"format\": \"hvd-flight-recorder\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"rank\": 1, \"size\": 4"), std::string::npos) << j;
  EXPECT_NE(j.find("\"name\": \"grad \\\"w\\\"\\u000a\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"algorithm\": \"ring\", \"peers\": [0, 2], \"state\": \"ok\""),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"op\": \"allgather\", \"dtype\": \"float32\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"peers\": [3], \"state\": \"error\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"error\": \"rank 2 has not answered\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"error\": \"first\""), std::string::npos) << j;
  EXPECT_EQ(j.find("second"), std::string::npos) << j;
  EXPECT_NE(j.find("\"sets\": [{\"id\": -1, \"ranks\": [0, 1, 2, 3]}, {\"id\": 0, \"ranks\": [1, 3]}]"),
            std::string::npos)
      << j;

  const std::string path = "/tmp/hvd-fr-unit-" + std::to_string(::getpid()) + "/sub/r.json";
  ASSERT_TRUE(fr.Write(snap, path, "api", algorithm, nullptr).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().substr(0, 40), j.substr(0, 40));
  std::remove(path.c_str());
  ::rmdir(path.substr(0, path.rfind('/')).c_str());
  ::rmdir(path.substr(0, path.rfind("/sub/")).c_str());
  const Status bad = fr.Write(snap, "/dev/null/r.json", "api", nullptr, nullptr);
  EXPECT_EQ(bad.code(), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("/dev/null"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace hvd
