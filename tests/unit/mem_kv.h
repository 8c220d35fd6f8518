// An in-memory key-value store with the callbacks of hvd_transport_env_t
// (kv_set, kv_get, kv_free), for tests that run a transport plugin's ranks
// as threads of one process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <unistd.h>

#include "hvd.h"
#include "hvd_transport.h"

namespace hvd::test {

class MemKv {
 public:
  // Optional: rewrites a value as it is stored (to fake peers' answers).
  std::function<void(const std::string& key, std::string* value)> rewrite;

  static int Set(void* kv, const char* key, const void* value, size_t len) {
    auto* self = static_cast<MemKv*>(kv);
    {
      std::string v(static_cast<const char*>(value), len);
      if (self->rewrite) self->rewrite(key, &v);
      std::lock_guard<std::mutex> lock(self->mu_);
      self->map_[key] = std::move(v);
    }
    self->cv_.notify_all();
    return HVD_OK;
  }

  static int Get(void* kv, const char* key, void** value, size_t* len, double timeout_s) {
    using Clock = std::chrono::steady_clock;
    auto* self = static_cast<MemKv*>(kv);
    std::unique_lock<std::mutex> lock(self->mu_);
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0.0));
    auto it = self->map_.end();
    const bool found = self->cv_.wait_until(lock, deadline, [&] {
      it = self->map_.find(key);
      return it != self->map_.end();
    });
    if (!found) return HVD_ERR_TIMEOUT;
    *len = it->second.size();
    *value = std::malloc(it->second.size() + 1);
    if (*value == nullptr) return HVD_ERR_NO_MEMORY;
    std::memcpy(*value, it->second.data(), it->second.size());
    return HVD_OK;
  }

  static void Free(void* value) { std::free(value); }

  // The host table of `size` thread ranks (env.hosts, as the core passes
  // it): this host's name for each, but where SetHost named another. Valid
  // while the store lives; SetHost before the first call.
  const hvd_transport_host_t* Hosts(int size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (host_table_.size() != static_cast<size_t>(size)) {
      char host[256] = {0};
      if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
      host_names_.resize(static_cast<size_t>(size));
      host_table_.assign(static_cast<size_t>(size), hvd_transport_host_t{nullptr, nullptr});
      for (size_t r = 0; r < host_names_.size(); ++r) {
        if (host_names_[r].empty()) host_names_[r] = host;
        host_table_[r].name = host_names_[r].c_str();
      }
    }
    return host_table_.data();
  }
  void SetHost(int rank, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    if (host_names_.size() <= static_cast<size_t>(rank)) host_names_.resize(rank + 1);
    host_names_[static_cast<size_t>(rank)] = name;
    host_table_.clear();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;
  std::vector<std::string> host_names_;
  std::vector<hvd_transport_host_t> host_table_;
};

// The env of one thread rank of `size` on this host, over the store kv.
inline hvd_transport_env_t ThreadRankEnv(MemKv* kv, int rank, int size, double timeout_s,
                                            double start_timeout_s) {
  hvd_transport_env_t env;
  std::memset(&env, 0, sizeof(env));
  env.struct_size = sizeof(env);
  env.rank = rank;
  env.size = size;
  env.local_rank = rank;
  env.local_size = size;
  env.cross_size = 1;
  env.kv = kv;
  env.kv_set = &MemKv::Set;
  env.kv_get = &MemKv::Get;
  env.kv_free = &MemKv::Free;
  env.timeout_s = timeout_s;
  env.start_timeout_s = start_timeout_s;
  env.hosts = kv->Hosts(size);
  return env;
}

}  // namespace hvd::test
