// The store bridge: the rendezvous store as a plugin sees it (env.kv and
// the kv_* callbacks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/observability/logging.h"

namespace hvd {

namespace rdv {
class StoreClient;
using Bytes = std::vector<uint8_t>;  // as in rendezvous/store.h
}

// ---- what the core hands to a plugin (hvd_transport_env_t) ----------------
//
// The callbacks are noexcept: a plugin is C, and an exception must never
// unwind through it. Any exception (std::bad_alloc included) becomes an hvd
// status (HVD_ERR_NO_MEMORY for bad_alloc, HVD_ERR_INTERNAL otherwise) and a
// logged error naming the call.

// The rendezvous store as a plugin sees it: keys under `prefix` (one per
// communicator), failures logged to `log` (may be null).
struct PluginKv {
  rdv::StoreClient* client = nullptr;
  std::string prefix;
  Logger* log = nullptr;
  // An elastic epoch's: when this key exists, the epoch failed while it was
  // forming (a member died), and every wait for a key ends at once with
  // HVD_ERR_MEMBERSHIP_CHANGED and the key's text. "": no such check.
  std::string abort_key;
  // Waits for key (the whole key, prefix included) at most timeout_s.
  Result<rdv::Bytes> Get(const std::string& key, double timeout_s) const;
};
// env.kv_set / kv_get / kv_free, with env.kv pointing at a PluginKv.
int PluginKvSet(void* kv, const char* key, const void* value, size_t len) noexcept;
int PluginKvGet(void* kv, const char* key, void** value, size_t* len, double timeout_s) noexcept;
void PluginKvFree(void* value) noexcept;

}  // namespace hvd
