// The UCX transport's faults: UCP's callbacks, the failure settled once,
// messages naming the peer, the lanes of each endpoint; abort, async_error,
// last_error.
#include <cmath>

#include "comm.h"

namespace hvd_ucx_transport {

// ---------------------------------------------------------------------------
// UCP callbacks (called from ucp_worker_progress, on the loop thread).

void SendDone(void*, ucs_status_t status, void* user_data) {
  Request* r = static_cast<Request*>(user_data);
  r->status = status;
  r->done = true;
}

void RecvDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  Request* r = static_cast<Request*>(user_data);
  if (info != nullptr) r->info = *info;
  r->status = status;
  r->done = true;
}

void EpFailed(void* arg, ucp_ep_h, ucs_status_t status) {
  const PeerArg* p = static_cast<const PeerArg*>(arg);
  Comm* c = p->comm;
  // A peer that sent its goodbye and then closed: finalized, not a fault.
  // (UCX delivers the goodbye, sent before its flushing close, before it
  // reports the closed connection; this runs inside ucp_worker_progress.)
  const size_t r = static_cast<size_t>(p->rank);
  if (r < c->byes.size() && r < c->gone.size() && c->byes[r] != nullptr && c->byes[r]->done &&
      c->byes[r]->status == UCS_OK) {
    c->gone[r] = 1;
    return;
  }
  if (r < c->dead.size()) c->dead[r] = 1;
  try {
    // A lost connection, whatever UCX calls it (a peer that died shows as
    // "Endpoint timeout" over TCP): a transport failure, not a timeout.
    c->Fail(HVD_ERR_TRANSPORT,
            "ucx: " + c->Who(p->rank) + ": connection lost (UCX: " + ucs_status_string(status) +
                ")",
            false, p->rank);
  } catch (...) {
    c->failure.status.store(HVD_ERR_TRANSPORT);
  }
}

// A peer's goodbye (the receive posted at init, user_data its PeerArg). A
// peer leaving tells every other rank before it closes its endpoints: zero
// bytes when it finalizes cleanly, its abort message "<status> <text>" when
// its communicator broke (it failed or was aborted): the first cause as that
// rank knew it, which this rank's failure repeats. Over TCP the closing
// itself reaches the peers (EpFailed), but only those UCX sees it for, and
// over shared memory nothing does while the peer's process lives, so
// without the message a rank waiting on a healthy peer would sit out its
// whole timeout.
void ByeDone(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  const PeerArg* p = static_cast<const PeerArg*>(user_data);
  Comm* c = p->comm;
  const size_t r = static_cast<size_t>(p->rank);
  Request* bye = c->byes[r];
  if (info != nullptr) bye->info = *info;
  bye->status = status;
  bye->done = true;
  if (status != UCS_OK) return;  // cancelled at this rank's own finalize
  if (bye->info.length == 0) {
    c->gone[r] = 1;  // finalized: requests that wait on it fail
    return;
  }
  try {
    const char* text = c->bye_in.data() + r * kAbortBytes;
    const std::string message(text, strnlen(text, std::min(bye->info.length, kAbortBytes)));
    int st = HVD_ERR_TRANSPORT;
    std::string why = PeerAborted(*c, p->rank, message, &st);
    // This rank waits on another peer, silent nearly as long as the peer
    // timeout: its own wait would have timed out within kAfterS. What it saw
    // itself leads (a bystander cannot see whom this rank waits for; the
    // rank it waits on reporting is followed, it is further along the chain).
    const int w = c->waits_on;
    const double silent = std::chrono::duration<double>(Clock::now() - c->wait_start).count();
    const double limit = c->peer_s.load();
    if (w >= 0 && w != p->rank && limit > 0 && silent >= limit - hvd::kit::StoreProbe::kAfterS) {
      why = hvd::kit::TimeoutMessage("ucx", c->Who(w), false, std::round(silent * 10) / 10, true) + "; " + why;
      st = HVD_ERR_TIMEOUT;
    }
    c->Fail(st, why);
  } catch (...) {
    c->failure.status.store(HVD_ERR_TRANSPORT);
  }
}

// An abort message "<status> <text>" from peer p: its text, as p reported it
// (*status: its status where it is an error, else HVD_ERR_TRANSPORT). A
// peer whose own context aborted it (HVD_ERR_ABORTED: it shut down, or its
// job reset) is a lost connection here, with its reason.
std::string PeerAborted(const Comm& c, int p, const std::string& message, int* status) {
  const size_t sp = message.find(' ');
  *status = HVD_ERR_TRANSPORT;
  if (sp != std::string::npos) {
    char* end = nullptr;
    const long st = std::strtol(message.c_str(), &end, 10);
    if (end == message.c_str() + sp && st < 0 && st > -1000) *status = static_cast<int>(st);
  }
  const std::string text = sp == std::string::npos ? message : message.substr(sp + 1);
  const std::string lost = "ucx: " + c.Who(p) + ": connection lost";
  if (text.empty()) return lost + " (its communicator broke)";
  if (*status == HVD_ERR_ABORTED) {
    *status = HVD_ERR_TRANSPORT;
    return lost + " (it aborted: " + text + ")";
  }
  return text + " (as " + c.Who(p) + " reported)";
}

// Acts on the failure once, on the loop thread: a lost peer's note is added
// to the message, this rank's reason goes to the store (unless it was an
// abort) and the log, and the endpoints are closed. Returns the failure.
int Settle(Comm& c) {
  if (!c.settled && c.failure.status.load() != HVD_OK) {
    c.settled = true;
    int peer = -1;
    bool aborted = false;
    {
      std::lock_guard<std::mutex> lock(c.failure.mu);
      peer = c.lost_peer;
      aborted = c.aborted;
    }
    if (peer >= 0) {
      // A rank notes before it closes, so a note is there once the closing
      // is seen: a short wait (a peer that died notes nothing). The peer's
      // own reason is the first cause: it leads.
      constexpr double kNoteWaitS = 0.05;
      const std::string note = c.store_cut ? "" : hvd::kit::NoteOf(c.store, peer, kNoteWaitS);
      std::lock_guard<std::mutex> lock(c.failure.mu);
      if (!note.empty()) c.failure.msg = note + " (as " + c.Who(peer) + " reported: " + c.failure.msg + ")";
    }
    if (!aborted) {
      std::string msg;
      {
        std::lock_guard<std::mutex> lock(c.failure.mu);
        msg = c.failure.msg;
      }
      c.Log(HVD_LOG_ERROR, msg);
      if (!c.store_cut) hvd::kit::NoteBroken(c.store, c.rank, c.size, msg);
    }
    CloseEndpoints(c);
  }
  return c.Failed();
}

// A failure of this call that breaks the communicator; returns the first.
int Break(Comm& c, int status, const std::string& msg, int peer) {
  c.Fail(status, msg, false, peer);
  return Settle(c);
}

std::string Outcome(const Comm& c, const Request& r) {
  if (r.status == UCS_OK) {
    if (!r.send && r.info.length != r.bytes) {
      return "ucx: receiving from " + c.Who(r.peer) + ": message of " +
             std::to_string(r.info.length) + " bytes, expected " + std::to_string(r.bytes);
    }
    return "";
  }
  return std::string("ucx: ") + (r.send ? "sending to " : "receiving from ") + c.Who(r.peer) +
         ": " + ucs_status_string(r.status);
}

// Releases a request (its UCX request too); loop thread only.

// The transports an endpoint's lanes use, as UCX prints them ("sysv/memory",
// "tcp/eth0", "rc_mlx5/mlx5_0:1"), '+'-joined; "" if UCX printed none.
std::string Lanes(ucp_ep_h ep) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == nullptr) return "";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string out;
  const std::string all(text != nullptr ? text : "", len);
  std::free(text);
  // "#                 lane[0]:  3:sysv/memory.0 md[2]  -> md[2]/sysv/..."
  for (size_t at = all.find("lane["); at != std::string::npos; at = all.find("lane[", at + 1)) {
    const size_t colon = all.find(':', all.find("]:", at) + 2);
    if (colon == std::string::npos) break;
    const size_t end = all.find_first_of(" \n", colon + 1);
    std::string tl = all.substr(colon + 1, end == std::string::npos ? end : end - colon - 1);
    const size_t dot = tl.rfind('.');
    if (dot != std::string::npos && tl.find('/') != std::string::npos && dot > tl.find('/')) {
      tl.resize(dot);  // the device index
    }
    if (tl.empty() || ("+" + out + "+").find("+" + tl + "+") != std::string::npos) continue;
    out += (out.empty() ? "" : "+") + tl;
  }
  return out;
}

// "sysv/memory to ranks 1, 2; tcp/eth0 to rank 3": what each endpoint runs on.
std::string LanesByPeer(const Comm& c) {
  std::vector<std::pair<std::string, std::string>> groups;  // lanes, ranks
  for (size_t j = 0; j < c.eps.size(); ++j) {
    if (c.eps[j] == nullptr) continue;
    std::string lanes = Lanes(c.eps[j]);
    if (lanes.empty()) lanes = "?";
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const std::pair<std::string, std::string>& x) { return x.first == lanes; });
    if (g == groups.end()) {
      groups.emplace_back(lanes, std::to_string(j));
    } else {
      g->second += ", " + std::to_string(j);
    }
  }
  std::string out;
  for (const auto& g : groups) {
    out += (out.empty() ? "" : "; ") + g.first +
           (g.second.find(',') == std::string::npos ? " to rank " : " to ranks ") + g.second;
  }
  return out;
}

int Abort(void* comm, int status, const char* reason) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  try {
    if (status == HVD_OK) status = HVD_ERR_ABORTED;
    c->Fail(status, hvd::kit::AbortMessage("ucx", status, reason), true);
    // Wakes a wait sleeping on the event fd (safe from any thread); the
    // loop thread closes the endpoints when it sees the failure.
    if (c->worker != nullptr) (void)ucp_worker_signal(c->worker);
    return HVD_OK;
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

}  // namespace hvd_ucx_transport
