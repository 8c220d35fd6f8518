// A silent peer, for every point-to-point plugin: when did bytes last move
// to or from each peer (Progress), and, once a wait has seen none for the
// peer timeout, which rank is the cause (SilentCause). A rank waiting on a
// peer that is itself blocked behind a stopped rank sees the same silence
// as the stopped rank's own neighbours; each rank that times out notes in
// the store whom it waits on ("waits/<rank>"), and follows those notes from
// its own peer to the rank that noted nothing: the one that stopped.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "deadline.h"
#include "errors.h"
#include "peers.h"
#include "store.h"

namespace hvd::kit {

// Per peer, the last time a message to or from it completed; the loop
// thread writes, a watch thread reads.
class Progress {
 public:
  void Resize(int size) {
    stamps_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(size));
    size_ = size;
    for (int i = 0; i < size; ++i) stamps_[i].store(0);
  }
  void Moved(int peer) {
    if (peer >= 0 && peer < size_) stamps_[peer].store(Now());
  }
  // Seconds since a message with `peer` completed or since `since` (a wait's
  // start, Now()'s unit), whichever is later.
  double SilentFor(int peer, int64_t since) const {
    int64_t last = since;
    if (peer >= 0 && peer < size_) last = std::max(last, stamps_[peer].load());
    return static_cast<double>(Now() - last) * 1e-9;
  }
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  }

 private:
  std::unique_ptr<std::atomic<int64_t>[]> stamps_;
  int size_ = 0;
};

// The rank behind a silence: notes "waits/<rank>" = peer, then follows the
// other ranks' notes from `peer` for at most `secs` in all, to the first
// rank that noted nothing (stopped, or cut off). *via: the ranks passed on
// the way ("rank 3 (host h) waits on it"), empty if `peer` is the cause.
// `answers`: the store answered a probe just now (StoreProbe), so it is
// not asked again. Loop thread only (the store).
inline int SilentCause(const StoreCalls& store, const std::vector<std::string>& hosts, int rank,
                       int size, int peer, double secs, std::string* via, bool answers = false) {
  via->clear();
  if (!store.Usable() || size <= 2) return peer;
  if (!answers && !StoreAnswers(store)) return peer;  // cut off from it: the silent peer is all we know
  const std::string me = std::to_string(peer);
  (void)store.set(store.kv, ("waits/" + std::to_string(rank)).c_str(), me.data(), me.size());
  const Clock::time_point deadline = After(secs);
  std::vector<bool> seen(static_cast<size_t>(size), false);
  seen[static_cast<size_t>(rank)] = true;
  int cur = peer;
  for (int hop = 0; hop < size && !seen[static_cast<size_t>(cur)]; ++hop) {
    seen[static_cast<size_t>(cur)] = true;
    void* value = nullptr;
    size_t len = 0;
    const std::string key = "waits/" + std::to_string(cur);
    if (store.get(store.kv, key.c_str(), &value, &len, std::max(0.001, SecondsLeft(deadline))) !=
        HVD_OK) {
      return cur;
    }
    const std::string note(static_cast<const char*>(value), value != nullptr ? len : 0);
    if (value != nullptr) store.free(value);
    int next = -1;
    try {
      next = std::stoi(note);
    } catch (const std::exception&) {
      return cur;
    }
    if (next < 0 || next >= size || seen[static_cast<size_t>(next)]) return cur;
    *via += (via->empty() ? "" : ", ") + Who(hosts, cur) + " waits on " + Who(hosts, next);
    cur = next;
  }
  return cur;
}

// What rank r noted under "broken/<r>" when its communicator broke, or ""
// if nothing came within `secs` (it died, hangs, or there is no store).
inline std::string NoteOf(const StoreCalls& store, int r, double secs) {
  if (r < 0 || !store.Usable()) return "";
  const std::string key = "broken/" + std::to_string(r);
  void* value = nullptr;
  size_t len = 0;
  if (store.get(store.kv, key.c_str(), &value, &len, secs) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), value != nullptr ? len : 0);
  if (value != nullptr) store.free(value);
  return note;
}

// The message of a silence: "<name>: rank 2 (host h) has not answered for
// 3 s (...; peer timeout, HVD_PEER_TIMEOUT); rank 3 (host h) waits on rank
// 2 (host h)", `via` as SilentCause gave it.
inline std::string SilentMessage(const char* name, const std::vector<std::string>& hosts,
                                 int cause, double secs, const std::string& via) {
  return TimeoutMessage(name, Who(hosts, cause), false, secs, true) +
         (via.empty() ? std::string() : "; " + via);
}

}  // namespace hvd::kit
