// The submit path's per-tensor structures: interned names, in-place shapes
// and handle names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/loop/name_table.h"
#include "core/loop/request.h"

namespace hvd {
namespace {

TEST(NameTable, ANameIsInFlightUntilReleased) {
  NameTable t;
  const uint32_t a = t.Acquire("grad.w");
  ASSERT_NE(a, kNoNameId);
  EXPECT_TRUE(t.in_flight(a));
  EXPECT_EQ(t.Acquire("grad.w"), kNoNameId) << "a name in flight is taken twice";
  const uint32_t b = t.Acquire("grad.b");
  ASSERT_NE(b, kNoNameId);
  EXPECT_NE(a, b);
  t.Release(a);
  EXPECT_FALSE(t.in_flight(a));
  EXPECT_TRUE(t.in_flight(b));
  EXPECT_EQ(t.Acquire("grad.w"), a) << "the same name keeps its id";
  t.Release(kNoNameId);  // ignored
  EXPECT_EQ(t.size(), 2u);
}

TEST(NameTable, SweepsIdleNamesAndKeepsThoseInFlight) {
  NameTable t(/*max_idle=*/4);
  const uint32_t held = t.Acquire("held");
  for (int i = 0; i < 3; ++i) t.Release(t.Acquire("step." + std::to_string(i)));
  ASSERT_EQ(t.size(), 4u);
  // The fifth name sweeps the three idle ones; "held" stays, in flight.
  const uint32_t fresh = t.Acquire("step.3");
  ASSERT_NE(fresh, kNoNameId);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_TRUE(t.in_flight(held));
  EXPECT_EQ(t.Acquire("held"), kNoNameId);
  EXPECT_NE(fresh, held) << "a swept id went to a name while another still held it";
  // Swept names come back as new ones, not in flight.
  const uint32_t again = t.Acquire("step.0");
  ASSERT_NE(again, kNoNameId);
  EXPECT_NE(again, held);
  EXPECT_NE(again, fresh);
}

TEST(NameTable, ManyNamesInFlightGrowWithoutASweepPerName) {
  NameTable t(/*max_idle=*/8);
  std::vector<uint32_t> ids;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t id = t.Acquire("n" + std::to_string(i));
    ASSERT_NE(id, kNoNameId);
    ids.push_back(id);
  }
  EXPECT_EQ(t.size(), 1000u);
  for (uint32_t id : ids) EXPECT_TRUE(t.in_flight(id));
  for (uint32_t id : ids) t.Release(id);
  for (int i = 0; i < 1000; ++i) EXPECT_NE(t.Acquire("n" + std::to_string(i)), kNoNameId);
}

TEST(Shape, InPlaceAndOnTheHeapAlike) {
  for (size_t n : {size_t{0}, size_t{1}, Shape::kInline, Shape::kInline + 1, size_t{32}}) {
    std::vector<int64_t> v;
    for (size_t i = 0; i < n; ++i) v.push_back(static_cast<int64_t>(i * 3 + 1));
    Shape s = v;
    ASSERT_EQ(s.size(), n);
    EXPECT_EQ(s.empty(), n == 0);
    EXPECT_TRUE(s == v);
    EXPECT_EQ(s.vec(), v);
    Shape copy = s;
    EXPECT_TRUE(copy == s);
    Shape moved = std::move(copy);
    EXPECT_TRUE(moved == v);
    if (n > 0) {
      moved[n - 1] = -5;
      EXPECT_TRUE(moved != v);
      EXPECT_TRUE(s == v) << "a copy shares storage with its source";
    }
  }
}

TEST(Shape, ResizeAcrossTheInlineLimitKeepsTheDimensions) {
  Shape s = {2, 3, 4};
  s.resize(Shape::kInline + 2);
  ASSERT_EQ(s.size(), Shape::kInline + 2);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[2], 4);
  EXPECT_EQ(s[3], 0);
  EXPECT_EQ(s[Shape::kInline + 1], 0);
  s[Shape::kInline + 1] = 9;
  s.resize(2);
  EXPECT_TRUE(s == std::vector<int64_t>({2, 3}));
  s = {7};
  EXPECT_TRUE(s == std::vector<int64_t>({7}));
  s.resize(0);
  EXPECT_TRUE(s.empty());
}

// A handle names its operation and tensor whole at every name length: held
// in place up to the inline limit (95), on the heap past it, and the empty
// name too.
TEST(Handle, DescribesItsOpAndTheWholeNameAtAnyLength) {
  for (size_t len : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{94}, size_t{95},
                     size_t{96}, size_t{300}}) {
    std::string name;
    for (size_t i = 0; i < len; ++i) name += static_cast<char>('a' + i % 26);
    const Handle h("allreduce", name);
    EXPECT_EQ(h.description(), "allreduce '" + name + "'") << len;
  }
  const Handle whole(std::string("zeros for allreduce 'w' (joined)"));
  EXPECT_EQ(whole.description(), "zeros for allreduce 'w' (joined)");
}

}  // namespace
}  // namespace hvd
