// The rendezvous store as a plugin sees it: the core's callbacks, a wrapper
// whose every wait ends at one deadline, a set-up's exchange round and the
// ranks that never joined it, and the notes a rank leaves there when its
// communicator breaks.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
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

// "<name> init: rank R: ranks 1, 3 did not join within the start timeout
// (30 s)", and the store's own failure where it failed (store_status).
inline std::string NotJoined(const char* name, int rank, const std::vector<int>& missing,
                             double start_s, int store_status = HVD_OK) {
  std::string list;
  for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
  std::string msg = std::string(name) + " init: rank " + std::to_string(rank) + ": rank" +
                    (missing.size() > 1 ? "s " : " ") + list +
                    " did not join within the start timeout (" + Secs(start_s) + " s)";
  if (store_status != HVD_OK) {
    msg += "; the rendezvous store also failed (status " + std::to_string(store_status) + ")";
  }
  return msg;
}

// The ranks but `rank` whose key prefix<r> is not in the store (each looked
// for briefly): after a set-up's wait for a peer's key timed out, the ranks
// that never joined.
inline std::vector<int> Absent(const StoreCalls& store, const std::string& prefix, int rank,
                               int size) {
  constexpr double kLookS = 0.01;
  std::vector<int> absent;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const std::string key = prefix + std::to_string(r);
    void* v = nullptr;
    size_t len = 0;
    if (store.get(store.kv, key.c_str(), &v, &len, kLookS) != HVD_OK) {
      absent.push_back(r);
    } else if (v != nullptr) {
      store.free(v);
    }
  }
  return absent;
}

// One exchange of a set-up (its connection addresses): publishes `mine`
// under prefix<rank> and reads every other rank's within the store's
// deadline into *values (size entries, this rank's too). A rank whose value
// never came did not join: HVD_ERR_RENDEZVOUS with NotJoined's message.
// Throws StoreError when publishing fails.
inline int ExchangeRound(const Store& store, const char* name, const std::string& prefix,
                         int rank, int size, const std::string& mine, double start_s,
                         std::vector<std::string>* values, std::string* msg) {
  values->assign(static_cast<size_t>(size), std::string());
  (*values)[rank] = mine;
  store.Set(prefix + std::to_string(rank), mine.data(), mine.size());
  std::vector<int> missing;
  int store_status = HVD_OK;
  for (int j = 0; j < size; ++j) {
    if (j == rank) continue;
    try {
      (*values)[j] = store.Get(prefix + std::to_string(j));
    } catch (const StoreError& e) {
      missing.push_back(j);
      if (e.code != HVD_ERR_TIMEOUT) store_status = e.code;
    }
  }
  if (missing.empty()) return HVD_OK;
  *msg = NotJoined(name, rank, missing, start_s, store_status);
  return HVD_ERR_RENDEZVOUS;
}

// Notes why this rank's communicator broke under "broken/<rank>", before it
// closes its connections, so peers that only see the closing can say what
// was behind it (BrokenNote). Best effort; nothing for a world of one.
// Whether the store answers at once. A store this rank is cut off from (or
// whose host rank is stopped) would hold a set for the store client's whole
// reply margin (30 s); a short get's margin is short (about 2 s), so one is
// the probe: slower than a second, the store is out of reach.
inline bool StoreAnswers(const StoreCalls& store) {
  if (store.get == nullptr || store.free == nullptr) return false;
  constexpr double kProbeS = 0.05, kReachableS = 1.0;
  const auto t0 = std::chrono::steady_clock::now();
  void* value = nullptr;
  size_t len = 0;
  if (store.get(store.kv, "hvd-store-probe", &value, &len, kProbeS) == HVD_OK && value != nullptr) {
    store.free(value);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <= kReachableS;
}

// StoreAnswers on a thread of its own, so that its caller bounds its wait:
// a rank cut off from the store learns it only after the store client's
// reply margin (about 2 s), longer than the silence path may take. A watch
// starts it while a wait is going silent (Start), well before the peer
// timeout; the silence's verdict then reads the answer (Reachable) and
// leaves the store alone where it is out of reach (or has not answered).
// Start, Reachable and Join from any threads; Join (also the destructor)
// waits for a probe under way, so the store outlives it.
class StoreProbe {
 public:
  StoreProbe() = default;
  StoreProbe(const StoreProbe&) = delete;
  StoreProbe& operator=(const StoreProbe&) = delete;
  ~StoreProbe() { Join(); }

  // When a wait silent for silent_s (of a peer timeout of peer_s) should
  // start the probe: after kAfterS, and by kLeadS before the peer timeout
  // (the store client's reply margin, 2 s, and some), so the answer is there
  // when the timeout passes.
  static constexpr double kAfterS = 0.5, kLeadS = 2.5;
  static double StartAfter(double peer_s) { return std::max(kAfterS, peer_s - kLeadS); }

  // Begins a probe unless one runs or one answered within kFreshS. No-op
  // without a store, and after Join.
  void Start(const StoreCalls& store) {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ || joined_ || store.get == nullptr || store.free == nullptr) return;
    if (answered_ && Clock::now() - answered_at_ < std::chrono::duration<double>(kFreshS)) return;
    if (thread_.joinable()) thread_.join();  // a finished probe's thread
    running_ = true;
    try {
      thread_ = std::thread([this, store] {
        const bool ok = StoreAnswers(store);
        std::lock_guard<std::mutex> done(mu_);
        reachable_ = ok;
        answered_ = true;
        answered_at_ = Clock::now();
        running_ = false;
        cv_.notify_all();
      });
    } catch (const std::exception&) {
      running_ = false;  // no thread: no answer, the store is left alone
    }
  }
  // Whether the store answered the latest probe at once, waiting up to
  // wait_s for a probe under way; false where none answered in time.
  bool Reachable(double wait_s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [this] { return !running_; });
    return !running_ && answered_ && reachable_;
  }
  void Join() {
    std::thread t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      joined_ = true;
      t = std::move(thread_);
    }
    if (t.joinable()) t.join();
  }

 private:
  static constexpr double kFreshS = 5.0;  // an answer this recent stands
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool running_ = false, answered_ = false, reachable_ = false, joined_ = false;
  Clock::time_point answered_at_{};
};

inline void NoteBroken(const StoreCalls& store, int rank, int size, const std::string& msg) {
  if (store.set == nullptr || size <= 1 || !StoreAnswers(store)) return;
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
