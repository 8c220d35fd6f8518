// Failure diagnostics of a transport: the first failure breaks it (later
// calls fail with it), a failed wait names the peer and, on this host, the
// chain of ranks blocked behind it (the shared-memory segment's notes), and
// every segment this rank is in learns the reason at once.
#include <cstdio>
#include <mutex>
#include <string>

#include "transport/transport.h"

namespace hvd {

Status Transport::Check(int rc, const char* what) {
  if (rc == HVD_OK) return Status::Ok();
  const char* msg = table_.last_error(comm_);
  hvd_status_t code = rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT;
  Status s = Error(code, std::string(name_) + " " + what + " failed: " +
                             (msg && *msg ? msg : "no reason given"));
  Broke(s);
  // The ranks of this host waiting in shared memory for this one (a leader
  // whose cross-host step failed) fail with its reason, not with "it left".
  if (code != HVD_ERR_INVALID_ARGUMENT) WarnHost(code, s.message());
  return s;
}

// Rank r's host index in host_seg_ (its line there), or -1 where r is not
// on this rank's host or there is no such segment.
int Transport::HostIndex(int r) const {
  if (host_seg_ == nullptr || r < 0 || r >= size_) return -1;
  if (shm_) return r;
  if (hier_ && hier_->host_of[static_cast<size_t>(r)] == hier_->host_of[static_cast<size_t>(rank_)]) {
    return hier_->local_index[static_cast<size_t>(r)];
  }
  return -1;
}

// Why rank r, on this host, may be silent: it is blocked itself, waiting
// for another rank (and that one, if on this host too, for another...), as
// their lines in the host's segment say. "" if r is not on this host or is
// not blocked in a point-to-point wait (then it is stopped, slow, or in
// another step). Waits shorter than 0.1 s are passing, not a cause.
std::string Transport::BlockedChain(int r) const {
  std::string out;
  for (int hop = 0, cur = r; hop < size_; ++hop) {
    const int idx = HostIndex(cur);
    int next = -1;
    double secs = 0;
    if (idx < 0 || cur == rank_ || !host_seg_->WaitingOn(idx, &next, &secs) || secs < 0.1) break;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", secs);
    out += "; " + Who(cur) + " is itself blocked: " + Who(next) + " has not answered it for " + buf + " s";
    if (next == rank_) break;
    cur = next;
  }
  return out;
}

// A wait on `peer` failed (the plugin has broken its communicator). A peer
// on this host that stopped answering, or hung up, may itself be blocked on
// someone else, or have given up first: the host's segment says, and the
// report names the rank at the end of that chain. Either way the host's
// other ranks learn this rank's reason at once (WarnHost).
Status Transport::LinkFailure(int rc, int peer) {
  const char* msg = table_.last_error(comm_);
  hvd_status_t code = rc < 0 ? static_cast<hvd_status_t>(rc) : HVD_ERR_TRANSPORT;
  const std::string head = std::string(name_) + " " + op_ + " failed: ";
  std::string text = head + (msg && *msg ? msg : "no reason given");
  int by = -1, by_code = 0;
  std::string why;
  if (HostIndex(peer) >= 0 && peer != rank_) {
    if (host_seg_->AbortedBy(&by, &by_code, &why)) {
      const std::string first = host_seg_->Name(by);
      text = head + (first == Who(peer) ? first + " gave up first: "
                                        : Who(peer) + " stopped after " + first + " gave up: ") + why;
      if (by_code == HVD_ERR_TIMEOUT) code = HVD_ERR_TIMEOUT;
    } else {
      text += BlockedChain(peer);
    }
  }
  Status st = Error(code, text);
  Broke(st);
  WarnHost(code, text);
  return st;
}

// Writes a failure into every shared-memory segment this rank is in, so
// the ranks of its host blocked there (or about to blame it) see its reason.
void Transport::WarnHost(hvd_status_t code, const std::string& text) noexcept {
  try {
    if (shm_) shm_->Abort(code, text);
    std::lock_guard<std::mutex> lock(fail_mu_);
    for (shm::Segment* seg : subset_shm_) seg->Abort(code, text);
  } catch (...) {
  }
}

void Transport::Broke(const Status& s) noexcept {
  try {
    std::lock_guard<std::mutex> lock(fail_mu_);
    if (failure_.load() != HVD_OK) return;
    fail_msg_ = s.message();
    failure_.store(s.code());
  } catch (...) {
    failure_.store(s.code());
  }
}

Status Transport::Unusable() const {
  std::lock_guard<std::mutex> lock(fail_mu_);
  return Error(static_cast<hvd_status_t>(failure_.load()),
               fail_msg_ + " (communicator unusable after this failure)");
}

Status Transport::ShmChecked(const CoreGroup& g, const char* what, Status st) {
  return st.ok() ? st : ShmFailure(*g.shm, what, st, g.members);
}

Status Transport::ShmFailure(shm::Segment& seg, const char* what, const Status& e,
                             const std::vector<int>* members) {
  std::string msg = e.message();
  const std::vector<int>& missing = seg.missing();  // a timeout's
  if (e.code() == HVD_ERR_TIMEOUT && !missing.empty()) {
    // Under the peer timeout, a missing rank blocked itself (on a rank of
    // another host, cut off or stopped) is not the cause: the rank at the
    // end of its chain is, and comes first where no missing rank is silent
    // of its own ("rank 1 (host a) is itself blocked: rank 3 (host b) has
    // not answered it for 3.0 s ...").
    std::string who, chain;
    int silent = 0;
    for (int r : missing) {
      const int pr = members != nullptr ? (*members)[static_cast<size_t>(r)] : r;
      const std::string behind = BlockedChain(pr);
      if (!peer_limit_ || behind.empty()) {
        who += (who.empty() ? "" : ", ") + Who(pr);
        ++silent;
      }
      chain += behind;
    }
    if (peer_limit_) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", seg.timeout());
      const std::string why = " (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)";
      msg = std::string(what) + " (shm): " +
            (silent > 0 ? who + (silent == 1 ? " has" : " have") + " not answered for " + secs + " s" +
                              why + chain
                        : chain.substr(2) + why);
    } else {
      msg += chain;
    }
  }
  Status st = Error(e.code(), std::string(name_) + " " + what + " failed: " + msg);
  Broke(st);
  // Peers waiting in this segment (shm_ or a subset's, both in WarnHost's
  // list) and in this rank's other segments fail at once.
  WarnHost(e.code(), msg);
  // The communicator is broken for the core: the plugin's too (its finalize
  // then knows a peer may be gone, and nothing waits on it).
  if (table_.abort != nullptr) table_.abort(comm_, e.code(), msg.c_str());
  return st;
}

std::string Transport::Who(int r) const {
  std::string s = "rank " + std::to_string(r);
  if (r >= 0 && r < static_cast<int>(hosts_.size()) && !hosts_[r].empty()) s += " (host " + hosts_[r] + ")";
  return s;
}

}  // namespace hvd
