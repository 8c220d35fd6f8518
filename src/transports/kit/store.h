// The rendezvous store as a plugin sees it: the core's callbacks, a wrapper
// whose every wait ends at one deadline, the join round, and the notes a
// rank leaves there when its communicator breaks.
#pragma once

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvd.h"
#include "deadline.h"

namespace hvd::kit {

// The core's store callbacks (from the env; valid until finalize).
struct StoreCalls {
  void* kv = nullptr;
  int (*set)(void*, const char*, const void*, size_t) = nullptr;
  int (*get)(void*, const char*, void**, size_t*, double) = nullptr;
  void (*free)(void*) = nullptr;

  bool Usable() const { return set != nullptr && get != nullptr && free != nullptr; }
};

// A store call that failed: its status and message.
struct StoreError : std::runtime_error {
  StoreError(int code, const std::string& msg) : std::runtime_error(msg), code(code) {}
  int code;
};

// The store for a set-up: throws StoreError, every wait ends at one deadline.
class Store {
 public:
  Store(const StoreCalls& calls, double seconds) : calls_(calls), deadline_(After(seconds)) {}
  void Set(const std::string& key, const void* data, size_t len) const {
    const int st = calls_.set(calls_.kv, key.c_str(), data, len);
    if (st != HVD_OK) {
      throw StoreError(
          st, "rendezvous store: cannot set '" + key + "' (status " + std::to_string(st) + ")");
    }
  }
  std::string Get(const std::string& key) const {
    void* v = nullptr;
    size_t len = 0;
    const int st = calls_.get(calls_.kv, key.c_str(), &v, &len, SecondsLeft(deadline_));
    if (st != HVD_OK) {
      throw StoreError(st, "rendezvous store: key '" + key + "' not available (status " +
                               std::to_string(st) + ")");
    }
    std::string out(static_cast<const char*>(v), v != nullptr ? len : 0);
    if (v != nullptr) calls_.free(v);
    return out;
  }

 private:
  StoreCalls calls_;
  Clock::time_point deadline_;
};

// The join round of a set-up: publishes "joined/<rank>" (this host's name)
// and reads every other rank's within the store's deadline, so a rank that
// never starts is named and every rank's host is known for messages. Fills
// *hosts (size entries); on a missing rank returns HVD_ERR_RENDEZVOUS with
// "<name> init: rank R: ranks 1, 3 did not join within the start timeout
// (30 s)". Throws StoreError when publishing fails.
inline int JoinRound(const Store& store, const char* name, int rank, int size,
                     const std::string& host, double start_s, std::vector<std::string>* hosts,
                     std::string* msg) {
  hosts->assign(static_cast<size_t>(size), std::string());
  (*hosts)[rank] = host;
  store.Set("joined/" + std::to_string(rank), host.data(), host.size());
  std::string missing;
  int n_missing = 0, store_status = HVD_OK;
  for (int j = 0; j < size; ++j) {
    if (j == rank) continue;
    try {
      (*hosts)[j] = store.Get("joined/" + std::to_string(j));
    } catch (const StoreError& e) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(j);
      ++n_missing;
      if (e.code != HVD_ERR_TIMEOUT) store_status = e.code;
    }
  }
  if (n_missing == 0) return HVD_OK;
  *msg = std::string(name) + " init: rank " + std::to_string(rank) + ": rank" +
         (n_missing > 1 ? "s " : " ") + missing + " did not join within the start timeout (" +
         Secs(start_s) + " s)";
  if (store_status != HVD_OK) {
    *msg += "; the rendezvous store also failed (status " + std::to_string(store_status) + ")";
  }
  return HVD_ERR_RENDEZVOUS;
}

// Notes why this rank's communicator broke under "broken/<rank>", before it
// closes its connections, so peers that only see the closing can say what
// was behind it (BrokenNote). Best effort; nothing for a world of one.
inline void NoteBroken(const StoreCalls& store, int rank, int size, const std::string& msg) {
  if (store.set == nullptr || size <= 1) return;
  const std::string key = "broken/" + std::to_string(rank);
  (void)store.set(store.kv, key.c_str(), msg.data(), msg.size());
}

// "; rank r had failed: <what rank r noted when its communicator broke>", or
// "" if it noted nothing (it died or hangs, or there is no store). A rank
// notes before it closes its connections, so the note is there once the
// closing is seen here: the wait is short.
inline std::string BrokenNote(const StoreCalls& store, int r) {
  if (r < 0 || store.get == nullptr || store.free == nullptr) return "";
  constexpr double kNoteWaitS = 0.5;
  const std::string key = "broken/" + std::to_string(r);
  void* value = nullptr;
  size_t len = 0;
  if (store.get(store.kv, key.c_str(), &value, &len, kNoteWaitS) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), len);
  if (value != nullptr) store.free(value);
  return "; rank " + std::to_string(r) + " had failed: " + note;
}

}  // namespace hvd::kit
