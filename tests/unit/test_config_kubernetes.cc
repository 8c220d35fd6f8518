// A Kubernetes operator's pod started without a launcher (docs/kubernetes.md):
// PyTorchJob's MASTER_ADDR/WORLD_SIZE/RANK, Trainer v2's PET_* variables, an
// Indexed Job's JOB_COMPLETION_INDEX, and where the store is.
#include <gtest/gtest.h>

#include <map>

#include "core/config/config.h"

namespace hvd {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

Config Resolve(std::map<std::string, std::string> env) {
  auto r = ResolveConfig(nullptr, Env(std::move(env)));
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : Config{};
}

TEST(ConfigKubernetes, PyTorchJobPodOneRankPerPod) {
  // What the training operator sets in worker pod 1 of 3 (numProcPerNode 1).
  Config c = Resolve({{"MASTER_ADDR", "digits-master-0"}, {"MASTER_PORT", "23456"},
                      {"WORLD_SIZE", "3"}, {"RANK", "1"}, {"PET_NNODES", "3"},
                      {"PET_NODE_RANK", "1"}, {"PET_NPROC_PER_NODE", "1"},
                      {"PET_MASTER_ADDR", "digits-master-0"}, {"PET_MASTER_PORT", "23456"}});
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 3);
  EXPECT_EQ(c.rendezvous_addr, "digits-master-0:23456");
  EXPECT_FALSE(c.host_store);
  EXPECT_EQ(Resolve({{"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}, {"WORLD_SIZE", "2"},
                     {"RANK", "0"}}).host_store, true);  // rank 0 hosts the store
}

TEST(ConfigKubernetes, TrainerV2PodFromPetVariables) {
  // Trainer v2 (a JobSet underneath) sets torchrun's arguments only.
  Config c = Resolve({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_NPROC_PER_NODE", "1"},
                      {"PET_MASTER_ADDR", "digits-node-0-0.digits"},
                      {"PET_MASTER_PORT", "29400"}, {"JOB_COMPLETION_INDEX", "1"}});
  EXPECT_EQ(c.rank_source, "kubernetes");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 2);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.local_size, 1);
  EXPECT_EQ(c.cross_rank, 1);
  EXPECT_EQ(c.cross_size, 2);
  EXPECT_EQ(c.rendezvous_addr, "digits-node-0-0.digits:29400");
}

TEST(ConfigKubernetes, IndexedJobOrJobSetWithWorldSize) {
  Config c = Resolve({{"JOB_COMPLETION_INDEX", "0"}, {"WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "digits-workers-0-0.digits"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(c.rank_source, "kubernetes");
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.size, 2);
  EXPECT_TRUE(c.host_store);
  EXPECT_EQ(c.rendezvous_addr, "digits-workers-0-0.digits:29500");
}

TEST(ConfigKubernetes, ExplicitStoreAndLaunchersComeFirst) {
  Config c = Resolve({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "0"},
                      {"HVD_RENDEZVOUS_ADDR", "store:1"}, {"PET_MASTER_ADDR", "m"},
                      {"PET_MASTER_PORT", "2"}});
  EXPECT_EQ(c.rendezvous_addr, "store:1");
  // torchrun inside the pod: its variables, not the pod's.
  Config t = Resolve({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_NPROC_PER_NODE", "2"},
                      {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                      {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"}});
  EXPECT_EQ(t.rank_source, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.local_rank, 1);
}

TEST(ConfigKubernetes, SeveralRanksPerPodNeedALauncher) {
  for (auto env : {std::map<std::string, std::string>{{"PET_NNODES", "2"},
                                                      {"PET_NODE_RANK", "0"},
                                                      {"PET_NPROC_PER_NODE", "4"}},
                   std::map<std::string, std::string>{{"WORLD_SIZE", "8"},
                                                      {"RANK", "1"},
                                                      {"PET_NPROC_PER_NODE", "4"}}}) {
    auto r = ResolveConfig(nullptr, Env(env));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("PET_NPROC_PER_NODE=4"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("torchrun --nproc-per-node=4"), std::string::npos);
  }
  auto bad = ResolveConfig(nullptr, Env({{"PET_NNODES", "1:4"}, {"PET_NODE_RANK", "0"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("PET_NNODES"), std::string::npos);
}

}  // namespace
}  // namespace hvd
