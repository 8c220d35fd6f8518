// Error text and the first failure of a communicator, for every plugin.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>

#include "hvd.h"
#include "deadline.h"

namespace hvd::kit {

// Copies msg into init's error buffer (truncated, always terminated).
inline void WriteErr(char* err, size_t err_len, const std::string& msg) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(err_len - 1, msg.size());
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// The first failure of a communicator (a timeout, an I/O error, an abort):
// recorded once, from any thread; every later call returns it. `mu` also
// guards what a plugin keeps beside it (its pending requests, say).
struct Failure {
  std::mutex mu;
  std::atomic<int> status{HVD_OK};
  std::string msg;

  // Records status and msg unless a failure came first (false then); the
  // caller holds mu.
  bool RecordLocked(int st, const std::string& m) {
    if (status.load() != HVD_OK) return false;
    msg = m;
    status.store(st);
    return true;
  }
  // The failure as a call's outcome: its status, its text into *last_error.
  int Take(std::string* last_error) {
    std::lock_guard<std::mutex> lock(mu);
    *last_error = msg;
    return status.load();
  }
};

// The message of a wait that ran out: "<name>: rank 2 (host h) has not
// answered for 5 s (...)" when the limit is the peer timeout, else "<name>:
// timed out after 5 s waiting for rank 2 (host h)".
inline std::string TimeoutMessage(const char* name, const std::string& peer, bool send,
                                  double secs, bool peer_kind) {
  if (peer_kind) {
    return std::string(name) + ": " + peer + " has not answered for " + Secs(secs) +
           " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)";
  }
  return std::string(name) + ": timed out after " + Secs(secs) + " s waiting " +
         (send ? "to send to " : "for ") + peer;
}

// The message of an abort: its reason, else "<name>: communicator aborted
// (status N)".
inline std::string AbortMessage(const char* name, int status, const char* reason) {
  if (reason != nullptr && reason[0] != '\0') return reason;
  return std::string(name) + ": communicator aborted (status " + std::to_string(status) + ")";
}

}  // namespace hvd::kit
