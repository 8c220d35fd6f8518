// Ranks as threads in one process, each with its own hvd::Context (the
// core's C++ interface: Query, Enqueue of OpRequests), bootstrapped through
// thread_ranks.h's in-memory out-of-band allgather.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/context.h"
#include "thread_ranks.h"

namespace hvd::test {

using RankEnv = std::map<std::string, std::string>;

// Runs fn(ctx, rank) on n thread-ranks over `transport`. Rank r reads its
// settings from env_of(r) first, then from the process environment (so
// ranks of one process can differ in a setting).
inline void RunContexts(int n, const std::function<void(Context&, int)>& fn,
                        const char* transport = "gloo",
                        const std::function<RankEnv(int)>& env_of = nullptr) {
  OobGroup group(n);
  std::vector<std::pair<OobGroup*, int>> users;
  for (int r = 0; r < n; ++r) users.emplace_back(&group, r);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const hvd_params_t p = ThreadRankParams(r, n, transport, &users[r]);
      const RankEnv mine = env_of ? env_of(r) : RankEnv();
      const EnvLookup env = [&mine](const char* name) -> const char* {
        auto it = mine.find(name);
        return it != mine.end() ? it->second.c_str() : std::getenv(name);
      };
      auto ctx = Context::Create(&p, env);
      ASSERT_TRUE(ctx.ok()) << "rank " << r << ": " << ctx.status().message();
      fn(**ctx, r);
      EXPECT_TRUE((*ctx)->Shutdown().ok());
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace hvd::test
