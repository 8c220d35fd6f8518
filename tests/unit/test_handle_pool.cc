// A context's handles (src/api/handle_pool.h) and the counted reference
// they are held by (HandleRef, src/core/loop/request.h): the last reference
// dropped gives a handle to its home exactly once; a released handle is the
// next one taken, cleared as new, its results given back at release; what is
// beyond the keep is deleted; and the pool outlives its context while
// handles live.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "api/handle_pool.h"

namespace hvd::api {
namespace {

struct CountingHome : hvd::HandleHome {
  void Recycle(hvd::Handle*) noexcept override { ++recycled; }
  int recycled = 0;
};

TEST(HandleRef, TheLastReferenceDroppedGivesTheHandleHomeOnce) {
  CountingHome home;
  auto owned = std::make_unique<hvd::Handle>("allreduce", "x");  // deleted here, not by a reference
  hvd::Handle& h = *owned;
  h.set_home(&home);
  {
    hvd::HandleRef a(&h);
    hvd::HandleRef b = a;             // copy: two
    hvd::HandleRef c = std::move(b);  // move: still two
    EXPECT_FALSE(b);
    EXPECT_EQ(c.get(), &h);
    hvd::HandleRef d;
    d = c;  // three
    d = d;  // self-assignment keeps it
    a.reset();
    c.reset();
    EXPECT_EQ(home.recycled, 0);
    EXPECT_EQ(d->description(), "allreduce 'x'");
  }
  EXPECT_EQ(home.recycled, 1);
}

TEST(HandleRef, AMoveAssignmentDropsTheReferenceItReplacesAtOnce) {
  CountingHome first_home, second_home;
  auto first = std::make_unique<hvd::Handle>("allreduce", "a");
  auto second = std::make_unique<hvd::Handle>("allreduce", "b");
  first->set_home(&first_home);
  second->set_home(&second_home);
  hvd::HandleRef held(first.get());
  hvd::HandleRef incoming(second.get());
  held = std::move(incoming);
  EXPECT_EQ(first_home.recycled, 1);  // not kept alive by the moved-from reference
  EXPECT_FALSE(incoming);
  EXPECT_EQ(held.get(), second.get());
  held = std::move(held);  // self-move keeps it
  EXPECT_EQ(held.get(), second.get());
  held.reset();
  EXPECT_EQ(second_home.recycled, 1);
}

TEST(HandleRef, ReferencesDroppedOnManyThreadsRecycleOnce) {
  CountingHome home;
  auto owned = std::make_unique<hvd::Handle>("allreduce", "x");
  hvd::Handle& h = *owned;
  h.set_home(&home);
  for (int round = 0; round < 50; ++round) {
    std::vector<hvd::HandleRef> refs(8, hvd::HandleRef(&h));
    std::vector<std::thread> threads;
    for (auto& r : refs) threads.emplace_back([r = std::move(r)]() mutable { r.reset(); });
    for (auto& t : threads) t.join();
  }
  EXPECT_EQ(home.recycled, 50);
}

// A handle with a result from `buffers`, completed, as an allgather's.
void GiveResult(HandleBox* b, const std::shared_ptr<hvd::BufferPool>& buffers) {
  b->output = buffers->Take(4096);
  b->output_pool = buffers;
  b->output_shape = {2, 3};
  b->recv_splits = {1, 1};
  b->SetWaitingOn("rank 1 has not submitted");
  b->Complete(hvd::Status::Ok());
}

TEST(HandlePool, AReleasedHandleIsTheNextTakenClearedAsNew) {
  std::unique_ptr<HandlePool, HandlePool::Dropper> pool(new HandlePool());
  auto buffers = std::make_shared<hvd::BufferPool>(1 << 20);
  HandleBox* b = pool->Take();
  b->Rename("allgather", "weights");
  {
    hvd::HandleRef user(b), core(b);
    GiveResult(b, buffers);
    EXPECT_TRUE(user->done());
    core.reset();
    EXPECT_EQ(pool->kept(), 0u);  // the user still holds it
  }
  EXPECT_EQ(pool->out(), 0u);
  EXPECT_EQ(pool->kept(), 1u);
  EXPECT_EQ(buffers->spare_bytes(), 4096u);  // the result went back at release
  EXPECT_EQ(b->wrapper.magic, kDeadMagic);

  HandleBox* again = pool->Take();
  ASSERT_EQ(again, b);
  again->Rename("allreduce", "bias");
  const hvd::HandleRef r(again);
  EXPECT_FALSE(r->done());
  EXPECT_EQ(r->status().code(), HVD_IN_PROGRESS);
  EXPECT_EQ(r->description(), "allreduce 'bias'");
  EXPECT_EQ(r->output.size(), 0u);
  EXPECT_TRUE(r->output_shape.empty());
  EXPECT_TRUE(r->recv_splits.empty());
  EXPECT_FALSE(r->output_pool);
  // Not done: a bounded wait says so, without the old waiting text.
  const hvd::Status s = r->Wait(0.001);
  EXPECT_EQ(s.code(), HVD_ERR_TIMEOUT);
  EXPECT_EQ(s.message().find("rank 1"), std::string::npos) << s.message();
  r->Complete(hvd::Error(HVD_ERR_ABORTED, "stopped"));
  EXPECT_EQ(r->Wait(-1).code(), HVD_ERR_ABORTED);
}

TEST(HandlePool, LongNamesAndDescriptionsSurviveReuse) {
  std::unique_ptr<HandlePool, HandlePool::Dropper> pool(new HandlePool());
  const std::string long_name(300, 'n');
  HandleBox* b = pool->Take();
  b->Rename("allreduce", long_name);
  hvd::HandleRef(b).reset();  // back to the pool
  HandleBox* c = pool->Take();
  ASSERT_EQ(c, b);
  c->Rename("broadcast", "short");
  hvd::HandleRef r(c);
  EXPECT_EQ(r->description(), "broadcast 'short'");
  r.reset();
  HandleBox* d = pool->Take();
  d->Rename(std::string("barrier"));
  r = hvd::HandleRef(d);
  EXPECT_EQ(r->description(), "barrier");
  r.reset();
  HandleBox* e = pool->Take();
  e->Rename("allreduce", long_name);
  r = hvd::HandleRef(e);
  EXPECT_EQ(r->description(), "allreduce '" + long_name + "'");
}

TEST(HandlePool, ABurstComesBackWholeAndWhatIsBeyondTheKeepIsDeleted) {
  std::unique_ptr<HandlePool, HandlePool::Dropper> pool(new HandlePool());
  std::vector<hvd::HandleRef> step;
  for (int i = 0; i < 1000; ++i) step.emplace_back(pool->Take());
  std::set<hvd::Handle*> first;
  for (auto& r : step) first.insert(r.get());
  step.clear();
  EXPECT_EQ(pool->kept(), 1000u);
  for (int i = 0; i < 1000; ++i) step.emplace_back(pool->Take());
  std::set<hvd::Handle*> second;
  for (auto& r : step) second.insert(r.get());
  EXPECT_EQ(second, first);
  for (size_t i = 1000; i < HandlePool::kKeep + 10; ++i) step.emplace_back(pool->Take());
  EXPECT_EQ(pool->out(), HandlePool::kKeep + 10);
  step.clear();  // no leak under ASan/valgrind
  EXPECT_EQ(pool->kept(), HandlePool::kKeep);
  EXPECT_EQ(pool->out(), 0u);
}

TEST(HandlePool, HandlesOutliveTheContextsPool) {
  auto buffers = std::make_shared<hvd::BufferPool>(1 << 20);
  std::vector<hvd::HandleRef> live;
  {
    std::unique_ptr<HandlePool, HandlePool::Dropper> pool(new HandlePool());
    hvd::HandleRef(pool->Take()).reset();  // one kept: deleted with the drop
    for (int i = 0; i < 3; ++i) {
      HandleBox* b = pool->Take();
      b->Rename("allgather", "t" + std::to_string(i));
      live.emplace_back(b);
    }
  }  // the context is gone
  for (auto& r : live) GiveResult(static_cast<HandleBox*>(r.get()), buffers);
  EXPECT_TRUE(live[2]->Wait(-1).ok());
  EXPECT_EQ(live[1]->description(), "allgather 't1'");
  live.clear();  // the last one deletes the pool (no leak under ASan/valgrind)
  EXPECT_EQ(buffers->spare_bytes(), 3u * 4096u);
}

}  // namespace
}  // namespace hvd::api
