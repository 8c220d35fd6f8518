// test_nccl_plugin PLUGIN: loads libhvd_transport_nccl.so with dlopen, as the
// core does, and checks its table exactly. Without a CUDA device:
// init fails with HVD_ERR_UNSUPPORTED naming this host and the missing
// device, and rank 0 leaves that message in the store for the other ranks.
// With a device (a GPU machine), those assertions are skipped (said so on
// stdout) and one rank runs every collective on device memory instead.
#include <dlfcn.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "hvd.h"
#include "hvd_transport.h"

namespace {

int failures = 0;
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
      ++failures;                                                        \
    }                                                                    \
  } while (0)
#define CHECK_EQ(a, b)                                                               \
  do {                                                                               \
    long long va_ = (long long)(a), vb_ = (long long)(b);                            \
    if (va_ != vb_) {                                                                \
      std::printf("FAIL %s:%d: %s == %s (%lld vs %lld)\n", __FILE__, __LINE__, #a, #b, \
                  va_, vb_);                                                         \
      ++failures;                                                                    \
    }                                                                                \
  } while (0)
#define CHECK_STREQ(a, b)                                                                  \
  do {                                                                                     \
    std::string sa_ = (a), sb_ = (b);                                                      \
    if (sa_ != sb_) {                                                                      \
      std::printf("FAIL %s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__, sa_.c_str(), sb_.c_str()); \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)
#define CHECK_HAS(text, part)                                                                 \
  do {                                                                                        \
    std::string t_ = (text), p_ = (part);                                                     \
    if (t_.find(p_) == std::string::npos) {                                                   \
      std::printf("FAIL %s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, t_.c_str(), \
                  p_.c_str());                                                                \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

// An in-memory store standing in for the core's (one process).
struct MemKv {
  std::map<std::string, std::string> kv;
};
int KvSet(void* kv, const char* key, const void* value, size_t len) {
  static_cast<MemKv*>(kv)->kv[key] = std::string(static_cast<const char*>(value), len);
  return HVD_OK;
}
int KvGet(void* kv, const char* key, void** value, size_t* len, double) {
  auto& m = static_cast<MemKv*>(kv)->kv;
  auto it = m.find(key);
  if (it == m.end()) return HVD_ERR_TIMEOUT;
  *value = std::malloc(it->second.size() + 1);
  std::memcpy(*value, it->second.data(), it->second.size());
  *len = it->second.size();
  return HVD_OK;
}
void KvFree(void* v) { std::free(v); }

hvd_transport_env_t Env(int rank, int size) {
  hvd_transport_env_t env;
  std::memset(&env, 0, sizeof(env));
  env.struct_size = sizeof(env);
  env.rank = env.cross_rank = rank;
  env.size = env.cross_size = size;
  env.local_rank = 0;
  env.local_size = 1;
  env.timeout_s = 30;
  env.start_timeout_s = 5;
  return env;
}
hvd_transport_info_t Info() {
  hvd_transport_info_t info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  return info;
}

void CheckTable(const hvd_transport_t* t) {
  CHECK_EQ(t->abi_version, HVD_TRANSPORT_ABI);
  CHECK_EQ(t->struct_size, sizeof(hvd_transport_t));
  CHECK(t->name != nullptr && std::string(t->name) == "nccl");
  const uint64_t want = HVD_TRANSPORT_CAP_CUDA_MEMORY | HVD_TRANSPORT_CAP_STREAM_ORDERED |
                        HVD_TRANSPORT_CAP_ABORT | HVD_TRANSPORT_CAP_PEER_TIMEOUT |
                        HVD_TRANSPORT_CAP_AVERAGE;
  CHECK_EQ(t->caps, want);
  CHECK(t->init != nullptr && t->finalize != nullptr && t->last_error != nullptr);
  // No point-to-point and no registration: caps promise none, entries NULL.
  CHECK(t->isend == nullptr && t->irecv == nullptr && t->wait == nullptr);
  CHECK(t->test == nullptr && t->progress == nullptr);
  CHECK(t->register_memory == nullptr && t->deregister_memory == nullptr);
  // Every native collective.
  CHECK(t->allreduce != nullptr && t->allgatherv != nullptr && t->broadcast != nullptr);
  CHECK(t->alltoallv != nullptr && t->reducescatter != nullptr && t->barrier != nullptr);
  // ABORT and PEER_TIMEOUT.
  CHECK(t->abort != nullptr && t->async_error != nullptr && t->set_timeout != nullptr);
}

std::string Host() {
  char h[256] = {0};
  gethostname(h, sizeof(h) - 1);
  return h;
}

void NoDevice(const hvd_transport_t* t) {
  const std::string host = Host();
  char err[512];
  void* comm = reinterpret_cast<void*>(1);
  hvd_transport_info_t info = Info();

  hvd_transport_env_t env = Env(1, 2);
  int rc = t->init(&env, &info, &comm, err, sizeof(err));
  CHECK_EQ(rc, HVD_ERR_UNSUPPORTED);
  CHECK(comm == nullptr);
  CHECK_HAS(err, "nccl: no CUDA device on host " + host + " (cudaGetDeviceCount: ");
  CHECK_HAS(err, "); the nccl transport needs one GPU per rank");
  std::printf("init without a device: %s\n", err);

  // The message is cut to err_len, NUL included.
  char small[16];
  std::memset(small, 'x', sizeof(small));
  comm = reinterpret_cast<void*>(1);
  rc = t->init(&env, &info, &comm, small, sizeof(small));
  CHECK_EQ(rc, HVD_ERR_UNSUPPORTED);
  CHECK(comm == nullptr);
  CHECK_EQ(std::strlen(small), sizeof(small) - 1);
  CHECK_STREQ(small, std::string("nccl: no CUDA device").substr(0, 15));

  // Rank 0 leaves its failure in the store for the ranks waiting for the id.
  MemKv kv;
  env = Env(0, 2);
  env.kv = &kv;
  env.kv_set = KvSet;
  env.kv_get = KvGet;
  env.kv_free = KvFree;
  rc = t->init(&env, &info, &comm, err, sizeof(err));
  CHECK_EQ(rc, HVD_ERR_UNSUPPORTED);
  CHECK(comm == nullptr);
  CHECK_EQ(kv.kv.size(), 1u);
  CHECK(kv.kv.count("nccl/unique_id") == 1);
  const std::string note = kv.kv["nccl/unique_id"];
  CHECK(!note.empty() && note[0] == 'E');
  CHECK_STREQ(note.empty() ? std::string() : note.substr(1), err);

  // One rank alone: still no device, so still refused (no store needed).
  env = Env(0, 1);
  rc = t->init(&env, &info, &comm, err, sizeof(err));
  CHECK_EQ(rc, HVD_ERR_UNSUPPORTED);
  CHECK_HAS(err, "no CUDA device on host " + host);
}

// One rank on device 0: every collective, refusals, abort. Runs only where a
// GPU is present (not on the machine this plugin was written on).
void OneRank(const hvd_transport_t* t) {
  char err[512] = {0};
  void* comm = nullptr;
  hvd_transport_info_t info = Info();
  hvd_transport_env_t env = Env(0, 1);
  int rc = t->init(&env, &info, &comm, err, sizeof(err));
  CHECK_EQ(rc, HVD_OK);
  if (rc != HVD_OK) {
    std::printf("init: %s\n", err);
    return;
  }
  CHECK_EQ(info.native_max_bytes[HVD_TRANSPORT_ALLREDUCE], SIZE_MAX);
  cudaStream_t user = nullptr;
  CHECK_EQ(cudaStreamCreate(&user), cudaSuccess);
  float* d = nullptr;
  CHECK_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float)), cudaSuccess);
  float h[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8] = {0};
  CHECK_EQ(cudaMemcpyAsync(d, h, sizeof(h), cudaMemcpyHostToDevice, user), cudaSuccess);
  hvd_transport_buffer_t b = {d, sizeof(h), HVD_MEMORY_CUDA, 0, user, nullptr};
  for (hvd_reduce_op_t op : {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT})
    CHECK_EQ(t->allreduce(comm, &b, 8, HVD_FLOAT32, op), HVD_OK);
  size_t counts[1] = {8};
  CHECK_EQ(t->reducescatter(comm, &b, counts, HVD_FLOAT32, HVD_SUM), HVD_OK);
  CHECK_EQ(t->broadcast(comm, &b, 0), HVD_OK);
  hvd_transport_buffer_t out = {d + 8, sizeof(h), HVD_MEMORY_CUDA, 0, user, nullptr};
  size_t bytes[1] = {sizeof(h)};
  CHECK_EQ(t->allgatherv(comm, &b, &out, bytes), HVD_OK);
  hvd_transport_buffer_t out2 = {d + 16, sizeof(h), HVD_MEMORY_CUDA, 0, user, nullptr};
  CHECK_EQ(t->alltoallv(comm, &out, bytes, &out2, bytes), HVD_OK);
  CHECK_EQ(t->barrier(comm), HVD_OK);
  // The result is ordered on the caller's stream.
  CHECK_EQ(cudaMemcpyAsync(back, d + 16, sizeof(back), cudaMemcpyDeviceToHost, user), cudaSuccess);
  CHECK_EQ(cudaStreamSynchronize(user), cudaSuccess);
  for (int i = 0; i < 8; ++i) CHECK(back[i] == h[i]);
  // Refusals leave the communicator usable.
  CHECK_EQ(t->allreduce(comm, &b, 4, HVD_UINT16, HVD_SUM), HVD_ERR_UNSUPPORTED);
  CHECK_HAS(t->last_error(comm), "dtype uint16");
  hvd_transport_buffer_t host = {h, sizeof(h), HVD_MEMORY_HOST, HVD_DEVICE_CPU, nullptr, nullptr};
  CHECK_EQ(t->allreduce(comm, &host, 8, HVD_FLOAT32, HVD_SUM), HVD_ERR_UNSUPPORTED);
  CHECK_HAS(t->last_error(comm), "host memory");
  CHECK_EQ(t->async_error(comm), HVD_OK);
  CHECK_EQ(t->allreduce(comm, &b, 8, HVD_FLOAT32, HVD_SUM), HVD_OK);
  // Abort: later calls fail with its status and reason.
  CHECK_EQ(t->abort(comm, HVD_ERR_ABORTED, "test abort"), HVD_OK);
  CHECK_EQ(t->async_error(comm), HVD_ERR_ABORTED);
  CHECK_EQ(t->allreduce(comm, &b, 8, HVD_FLOAT32, HVD_SUM), HVD_ERR_ABORTED);
  CHECK_HAS(t->last_error(comm), "aborted: test abort");
  t->finalize(comm);
  cudaFree(d);
  cudaStreamDestroy(user);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s libhvd_transport_nccl.so\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("FAIL: dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  auto fn = reinterpret_cast<hvd_transport_plugin_fn>(dlsym(lib, HVD_TRANSPORT_PLUGIN_SYMBOL));
  CHECK(fn != nullptr);
  CHECK(dlsym(lib, "hvd_transport_plugin_v1") == nullptr);
  CHECK(dlsym(lib, "hvd_transport_plugin_v3") == nullptr);
  const hvd_transport_t* t = fn != nullptr ? fn() : nullptr;
  CHECK(t != nullptr);
  if (t == nullptr) return 1;
  CheckTable(t);
  if (failures != 0) {  // not this plugin's table: calling into it proves nothing
    std::printf("%d check(s) of the table failed\n", failures);
    return 1;
  }

  // Bad arguments, before any device is touched.
  char err[256] = {0};
  void* comm = reinterpret_cast<void*>(1);
  hvd_transport_info_t info = Info();
  CHECK_EQ(t->init(nullptr, &info, &comm, err, sizeof(err)), HVD_ERR_INVALID_ARGUMENT);
  CHECK(comm == nullptr);
  CHECK_EQ(t->async_error(nullptr), HVD_ERR_INVALID_ARGUMENT);

  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev <= 0) {
    NoDevice(t);
  } else {
    std::printf("SKIP: the no-device assertions (this host has %d CUDA device(s)); "
                "running one rank's collectives on device 0 instead\n", ndev);
    OneRank(t);
  }
  dlclose(lib);
  if (failures != 0) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
