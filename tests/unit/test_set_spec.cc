// A process-set request's specification alone: the groups it forms, the
// errors it gives, and a member's place in its set.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/sets/spec.h"
#include "hvd.h"

namespace hvd {
namespace {

// Every rank's spec as FinishProcessSet sees them: [kind, host, ...].
struct Specs {
  std::vector<std::vector<int32_t>> v;
  SetSpecs view() const {
    SetSpecs s;
    for (const auto& x : v) {
      s.spec.push_back(x.data());
      s.len.push_back(x.size());
    }
    return s;
  }
};

std::vector<int32_t> List(std::vector<int32_t> ranks) {
  std::vector<int32_t> s{kSpecList, /*host=*/7, static_cast<int32_t>(ranks.size())};
  s.insert(s.end(), ranks.begin(), ranks.end());
  return s;
}

std::vector<int32_t> Split(int32_t color, int32_t key) { return {kSpecSplit, 7, color, key}; }

TEST(SetSpec, ARankListIsOneGroup) {
  Specs s{{List({0, 2}), List({0, 2}), List({0, 2})}};
  auto g = GroupsOf(s.view(), "call");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g.value().size(), 1u);
  EXPECT_EQ(g.value()[0], (std::vector<int>{0, 2}));
}

TEST(SetSpec, ASplitGroupsByColorOrderedByKeyThenRank) {
  Specs s{{Split(1, 5), Split(0, 0), Split(1, 5), Split(HVD_UNDEFINED_COLOR, 0), Split(1, 0)}};
  auto g = GroupsOf(s.view(), "call");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g.value().size(), 2u);
  EXPECT_EQ(g.value()[0], (std::vector<int>{1}));
  EXPECT_EQ(g.value()[1], (std::vector<int>{4, 0, 2}));
}

TEST(SetSpec, ErrorsNameTheRankAndWhatItGave) {
  {
    Specs s{{List({0, 1}), Split(0, 0)}};
    auto g = GroupsOf(s.view(), "process set call 'p'");
    ASSERT_EQ(g.status().code(), HVD_ERR_MISMATCH);
    EXPECT_NE(g.status().message().find("rank 0 called hvd_process_set_create [0, 1], rank 1 "
                                        "called hvd_context_split (color 0, key 0)"),
              std::string::npos)
        << g.status().message();
  }
  {
    Specs s{{List({0, 1}), List({1})}};
    auto g = GroupsOf(s.view(), "call");
    EXPECT_EQ(g.status().code(), HVD_ERR_MISMATCH);
  }
  {
    Specs s{{List({1, 0}), List({1, 0})}};
    auto g = GroupsOf(s.view(), "call");
    ASSERT_EQ(g.status().code(), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(g.status().message().find("rank 0 passed the process-set rank list [1, 0]: it is "
                                        "not sorted ascending"),
              std::string::npos)
        << g.status().message();
  }
  {
    Specs s{{List({0, 5}), List({0, 5})}};
    EXPECT_EQ(GroupsOf(s.view(), "call").status().code(), HVD_ERR_INVALID_ARGUMENT);
  }
  {
    Specs s{{Split(-5, 0), Split(0, 0)}};
    EXPECT_EQ(GroupsOf(s.view(), "call").status().code(), HVD_ERR_INVALID_ARGUMENT);
  }
  {
    Specs s{{{kSpecList, 7, 3, 0}, List({0})}};
    EXPECT_EQ(GroupsOf(s.view(), "call").status().code(), HVD_ERR_INTERNAL);
  }
}

TEST(SetSpec, PlaceCountsHostsInTheSetsOrder) {
  // Context ranks 0..3: hosts A A B B; the set [0, 1, 2, 3] reordered.
  const std::vector<int32_t> hosts{1, 1, 2, 2};
  const std::vector<int> g{2, 0, 3, 1};
  SetPlace p = PlaceInGroup(g, hosts, /*me=*/2);  // context rank 3, host B
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_size, 2);
  EXPECT_EQ(p.cross_rank, 0);
  EXPECT_EQ(p.cross_size, 2);
  EXPECT_EQ(SetLabel(g), "set [2, 0, 3, 1]");
  const int32_t v[] = {0, 1};
  EXPECT_EQ(ListText(v, 2), "[0, 1]");
}

}  // namespace
}  // namespace hvd
