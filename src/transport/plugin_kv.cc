// The store bridge: the rendezvous store as a plugin's env.kv_* callbacks.
#include "transport/plugin_kv.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "rendezvous/store.h"

namespace hvd {

// ---- plugin env callbacks ------------------------------------------------

namespace {

// Logs a failed callback; never throws (a message that cannot be built is
// dropped: the status still says what happened).
void LogCallbackFailure(Logger* log, const char* call, const char* key, const char* what) noexcept {
  if (log == nullptr) return;
  try {
    std::string msg = std::string("transport callback ") + call + "('" + (key ? key : "") +
                      "') failed: " + what;
    log->Write(HVD_LOG_ERROR, msg);
  } catch (...) {
    Logger::PluginLog(log, HVD_LOG_ERROR, call);
  }
}

// Runs f (returning an hvd status) with every exception it throws turned
// into a status and a logged line naming the call.
template <class F>
int Guarded(Logger* log, const char* call, const char* key, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    LogCallbackFailure(log, call, key, "out of memory");
    return HVD_ERR_NO_MEMORY;
  } catch (const std::exception& e) {
    LogCallbackFailure(log, call, key, e.what());
    return HVD_ERR_INTERNAL;
  } catch (...) {
    LogCallbackFailure(log, call, key, "unknown exception");
    return HVD_ERR_INTERNAL;
  }
}

}  // namespace

int PluginKvSet(void* kv, const char* key, const void* value, size_t len) noexcept {
  auto* s = static_cast<PluginKv*>(kv);
  if (s == nullptr || s->client == nullptr || key == nullptr || (value == nullptr && len > 0)) {
    return HVD_ERR_INVALID_ARGUMENT;
  }
  return Guarded(s->log, "kv_set", key, [&]() -> int {
    const auto* p = static_cast<const uint8_t*>(value);
    Status st = s->client->Set(s->prefix + key, rdv::Bytes(p, p + len));
    return st.code();
  });
}

Result<rdv::Bytes> PluginKv::Get(const std::string& key, double timeout_s) const {
  if (abort_key.empty()) return client->Get(key, timeout_s);
  // In slices, looking for the epoch's failure between them.
  constexpr double kSliceS = 0.2;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const double left =
        std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
    auto r = client->Get(key, std::max(0.001, std::min(kSliceS, left)));
    if (r.ok() || r.status().code() != HVD_ERR_TIMEOUT || left <= kSliceS) return r;
    auto failed = client->Check({abort_key});
    if (!failed.ok()) return failed.status();
    if ((*failed)[0]) {
      auto why = client->Get(abort_key, 1.0);
      return Error(HVD_ERR_MEMBERSHIP_CHANGED,
                   "the elastic epoch being formed lost a member: " +
                       (why.ok() ? std::string(why->begin(), why->end()) : std::string("(no reason)")));
    }
  }
}

int PluginKvGet(void* kv, const char* key, void** value, size_t* len, double timeout_s) noexcept {
  auto* s = static_cast<PluginKv*>(kv);
  if (s == nullptr || s->client == nullptr || key == nullptr || value == nullptr ||
      len == nullptr) {
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *value = nullptr;
  *len = 0;
  return Guarded(s->log, "kv_get", key, [&]() -> int {
    auto r = s->Get(s->prefix + key, timeout_s);
    if (!r.ok()) {
      if (r.status().code() == HVD_ERR_MEMBERSHIP_CHANGED && s->log != nullptr) {
        HVD_LOG(*s->log, HVD_LOG_WARNING, r.status().message());
      }
      return r.status().code();
    }
    void* out = std::malloc(r->empty() ? 1 : r->size());
    if (out == nullptr) {
      LogCallbackFailure(s->log, "kv_get", key, "out of memory");
      return HVD_ERR_NO_MEMORY;
    }
    if (!r->empty()) std::memcpy(out, r->data(), r->size());
    *value = out;
    *len = r->size();
    return HVD_OK;
  });
}

void PluginKvFree(void* value) noexcept { std::free(value); }

}  // namespace hvd
