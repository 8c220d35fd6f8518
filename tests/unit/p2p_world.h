// Threads as ranks over a transport plugin's table, loaded the way
// the core loads it (dlopen + hvd_transport_plugin), sharing an in-memory
// rendezvous store: the harness of the point-to-point plugin tests
// (test_gloo_p2p.cc, test_ucx_p2p.cc). A test file defines Plugin() (usually
// a static LoadPlugin("libhvd_transport_<name>.so")) and CheckMaxTag().
// Every wait is bounded: the plugin's by an explicit limit or a short
// env.timeout_s, the test's own by deadlines.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hvd_transport.h"
#include "mem_kv.h"

#ifndef HVD_PLUGIN_DIR
#error "HVD_PLUGIN_DIR must name the folder holding the transport plugins"
#endif

namespace p2p_world {

using hvd::test::MemKv;
using Clock = std::chrono::steady_clock;

// Limit of every wait that should succeed (far above what any takes).
constexpr double kWaitS = 30.0;

inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline std::string HostName() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

// The table of plugin `file` in HVD_PLUGIN_DIR, loaded as the core loads it.
inline const hvd_transport_t* LoadPlugin(const char* file) {
  const std::string path = std::string(HVD_PLUGIN_DIR) + "/" + file;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    ADD_FAILURE() << "dlopen " << path << ": " << dlerror();
    return nullptr;
  }
  auto fn = reinterpret_cast<hvd_transport_plugin_fn>(dlsym(lib, HVD_TRANSPORT_PLUGIN_SYMBOL));
  if (fn == nullptr) {
    ADD_FAILURE() << "no symbol " << HVD_TRANSPORT_PLUGIN_SYMBOL << " in " << path;
    return nullptr;
  }
  return fn();
}

// The plugin under test: each test file defines it (a static LoadPlugin).
const hvd_transport_t* Plugin();

// The checks the core's loader makes, for a point-to-point plugin named
// `name` promising exactly `caps`: the header, the required entries, every
// capability's entries present exactly where promised, and no native
// collectives (the core runs them all over point-to-point).
inline void CheckPointToPointTable(const hvd_transport_t* t, const char* name, uint64_t caps) {
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->abi_version, static_cast<uint32_t>(HVD_TRANSPORT_ABI));
  EXPECT_EQ(t->struct_size, sizeof(hvd_transport_t));
  ASSERT_NE(t->name, nullptr);
  EXPECT_STREQ(t->name, name);
  EXPECT_NE(t->init, nullptr);
  EXPECT_NE(t->finalize, nullptr);
  EXPECT_NE(t->last_error, nullptr);
  EXPECT_EQ(t->caps, caps);
  auto both = [&](uint64_t cap, bool present) { EXPECT_EQ((t->caps & cap) != 0, present) << cap; };
  both(HVD_TRANSPORT_CAP_P2P, t->isend && t->irecv && t->wait);
  both(HVD_TRANSPORT_CAP_P2P_TEST, t->test && t->progress);
  both(HVD_TRANSPORT_CAP_REGISTER_MEMORY, t->register_memory && t->deregister_memory);
  both(HVD_TRANSPORT_CAP_ABORT, t->abort && t->async_error);
  both(HVD_TRANSPORT_CAP_PEER_TIMEOUT, t->set_timeout != nullptr);
  EXPECT_EQ(t->allreduce, nullptr);
  EXPECT_EQ(t->allgatherv, nullptr);
  EXPECT_EQ(t->broadcast, nullptr);
  EXPECT_EQ(t->alltoallv, nullptr);
  EXPECT_EQ(t->reducescatter, nullptr);
  EXPECT_EQ(t->barrier, nullptr);
}

struct WorldOptions {
  double timeout_s = 60.0;
  double start_timeout_s = 30.0;
  // The plugins' log callback (env.log), if set.
  void (*log)(void* logger, int level, const char* msg) = nullptr;
  void* logger = nullptr;
};

inline hvd_transport_env_t MakeEnv(MemKv* kv, int rank, int size, const WorldOptions& opt) {
  hvd_transport_env_t env =
      hvd::test::ThreadRankEnv(kv, rank, size, opt.timeout_s, opt.start_timeout_s);
  env.log = opt.log;
  env.logger = opt.logger;
  return env;
}

// The plugin's tag range, checked at every init: each test file defines it.
void CheckMaxTag(uint32_t max_tag);

// Runs body(rank, comm) on `size` threads after init (whose info it checks);
// finalizes afterwards unless body returned true (it finalized itself).
inline void RunWorldEx(int size, const std::function<bool(int, void*)>& body,
                const WorldOptions& opt = WorldOptions()) {
  const hvd_transport_t* t = Plugin();
  ASSERT_NE(t, nullptr);
  MemKv kv;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      hvd_transport_env_t env = MakeEnv(&kv, r, size, opt);
      hvd_transport_info_t info;
      std::memset(&info, 0xAB, sizeof(info));  // the plugin must write every field
      info.struct_size = sizeof(info);
      void* comm = nullptr;
      char err[512] = {0};
      const int st = t->init(&env, &info, &comm, err, sizeof(err));
      if (st != HVD_OK) {
        ADD_FAILURE() << "rank " << r << " init failed (" << st << "): " << err;
        return;
      }
      CheckMaxTag(info.max_tag);
      EXPECT_EQ(info.mpi_thread_level, -1);
      for (size_t m : info.native_max_bytes) EXPECT_EQ(m, 0u);
      if (!body(r, comm)) t->finalize(comm);
    });
  }
  for (auto& th : threads) th.join();
}

inline void RunWorld(int size, const std::function<void(int, void*)>& body,
              const WorldOptions& opt = WorldOptions()) {
  RunWorldEx(
      size,
      [&](int r, void* comm) {
        body(r, comm);
        return false;
      },
      opt);
}

inline hvd_transport_buffer_t Host(void* data, size_t bytes) {
  hvd_transport_buffer_t b;
  std::memset(&b, 0, sizeof(b));
  b.data = data;
  b.bytes = bytes;
  b.memory_type = HVD_MEMORY_HOST;
  b.device = HVD_DEVICE_CPU;
  return b;
}

inline hvd_transport_request_t* Post(void* comm, bool send, int peer, uint32_t tag, void* data,
                              size_t bytes) {
  const hvd_transport_t* t = Plugin();
  const hvd_transport_buffer_t b = Host(data, bytes);
  hvd_transport_request_t* req = nullptr;
  const int st = send ? t->isend(comm, peer, tag, &b, &req) : t->irecv(comm, peer, tag, &b, &req);
  EXPECT_EQ(st, HVD_OK) << t->last_error(comm);
  EXPECT_TRUE(st != HVD_OK || req != nullptr);
  return req;
}

// Byte i of the message from `src` to `dst` with `tag`, number `seq`.
inline uint8_t Pattern(int src, int dst, uint32_t tag, int seq, size_t i) {
  uint32_t x = static_cast<uint32_t>(src * 131 + dst * 31 + seq * 7) ^ (tag * 2654435761u) ^
               static_cast<uint32_t>(i * 40503u);
  x ^= x >> 13;
  return static_cast<uint8_t>(x * 0x9E3779B1u >> 24);
}

inline std::vector<uint8_t> Message(int src, int dst, uint32_t tag, int seq, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = Pattern(src, dst, tag, seq, i);
  return v;
}

}  // namespace p2p_world
