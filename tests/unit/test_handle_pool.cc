// The blocks a context's handles are made in (src/api/block_pool.h): a
// block given back is the next one taken of its size, other sizes keep
// their own, what is beyond the keep goes back to the heap, and handles made
// through the allocator outlive the pool's other owners.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "api/block_pool.h"

namespace hvd::api {
namespace {

TEST(BlockPool, AGivenBlockIsTheNextTakenOfItsSize) {
  BlockPool pool;
  void* a = pool.Take(512);
  void* b = pool.Take(96);
  pool.Give(a, 512);
  pool.Give(b, 96);
  EXPECT_EQ(pool.Take(96), b);
  EXPECT_EQ(pool.Take(512), a);
  void* c = pool.Take(512);  // none kept: a fresh one
  EXPECT_NE(c, a);
  pool.Give(a, 512);
  pool.Give(b, 96);
  pool.Give(c, 512);
}

TEST(BlockPool, ABurstComesBackWhole) {
  BlockPool pool;
  std::vector<void*> step;
  for (int i = 0; i < 1000; ++i) step.push_back(pool.Take(640));
  const std::set<void*> first(step.begin(), step.end());
  for (void* p : step) pool.Give(p, 640);
  step.clear();
  for (int i = 0; i < 1000; ++i) step.push_back(pool.Take(640));
  EXPECT_EQ(std::set<void*>(step.begin(), step.end()), first);
  for (void* p : step) pool.Give(p, 640);
}

TEST(BlockPool, MoreSizesThanBinsAndMoreBlocksThanItKeepsGoToTheHeap) {
  BlockPool pool;
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t size = 16; size <= 16 * 8; size += 16) blocks.emplace_back(pool.Take(size), size);
  for (int i = 0; i < static_cast<int>(BlockPool::kKeep) + 10; ++i) {
    blocks.emplace_back(pool.Take(32), 32);
  }
  for (auto& [p, size] : blocks) pool.Give(p, size);  // no leak under ASan/valgrind
}

struct Tracked {
  explicit Tracked(int* alive) : alive_(alive) { ++*alive_; }
  ~Tracked() { --*alive_; }
  int* alive_;
  char payload[200];
};

TEST(PoolAllocator, SharedObjectsOutliveThePoolsOtherOwners) {
  int alive = 0;
  std::vector<std::shared_ptr<Tracked>> kept;
  {
    auto pool = std::make_shared<BlockPool>();
    const PoolAllocator<Tracked> alloc(pool);
    for (int i = 0; i < 3; ++i) kept.push_back(std::allocate_shared<Tracked>(alloc, &alive));
    auto first = kept.front().get();
    kept.front().reset();
    kept.front() = std::allocate_shared<Tracked>(alloc, &alive);
    EXPECT_EQ(kept.front().get(), first);  // the block came back
  }  // the context's reference is gone; the objects hold the pool
  EXPECT_EQ(alive, 3);
  kept.clear();
  EXPECT_EQ(alive, 0);
}

}  // namespace
}  // namespace hvd::api
