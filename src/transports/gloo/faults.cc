// The Gloo transport's faults: Gloo's messages with the peer named, the
// notes ranks leave in the store, abort, async_error, last_error.
#include "comm.h"

namespace hvd_gloo_transport {

// ---------------------------------------------------------------------------
// Gloo's messages, peers named.

// Without Gloo's source location ("[./gloo/transport/tcp/pair.cc:589] ").
std::string WithoutLocation(const std::string& s) {
  const size_t end = s.find("] ");
  if (s.empty() || s[0] != '[' || end == std::string::npos || s.find(':') > end) return s;
  return s.substr(end + 2);
}

// "Read error : Connection reset by peer" -> "Read error: Connection reset by peer".
std::string Clause(const std::string& in) {
  std::string s;
  for (char ch : in) {
    if (ch == ' ' && (s.empty() || s.back() == ' ')) continue;
    if (ch == ':' && !s.empty() && s.back() == ' ') s.pop_back();
    s += ch;
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == ':')) s.pop_back();
  return s;
}

// The first address Gloo's text quotes ("[127.0.0.1]:40143", without a
// "$seq" after it): where it starts and its length; false if none.
bool FindAddress(const std::string& text, size_t* pos, size_t* len) {
  const size_t open = text.find('[');
  const size_t close = open == std::string::npos ? open : text.find("]:", open);
  size_t end = close == std::string::npos ? close : close + 2;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (close == std::string::npos || end == close + 2) return false;
  *pos = open;
  *len = end - open;
  return true;
}

// The message for a Gloo failure of request r. The failure is its pair's
// (one request per unbound buffer; Gloo's context-wide timeout is handled
// apart), so the address Gloo quotes ("[127.0.0.1]:40143") is r's peer's.
std::string DescribeFailure(const Comm& c, const Request& r, const std::string& what) {
  std::string text = WithoutLocation(what);
  size_t open = 0, len = 0;
  if (FindAddress(text, &open, &len)) {
    const std::string addr = text.substr(open, len);
    return "gloo: " + c.Who(r.peer, addr) + ": " + Clause(text.erase(open, len));
  }
  return std::string("gloo: ") + (r.send ? "sending to " : "receiving from ") + c.Who(r.peer) +
         ": " + Clause(text);
}

// The ranks whose published pair addresses (Kv::addresses) are at `addr`
// ("[ip]:port"): a rank's pairs listen on its device's one port in Gloo's
// TCP transport (on one port each in older versions), so this names the
// rank that listens there. Bytes that are no Gloo TCP address are skipped.
std::vector<int> RanksAt(const Kv& store, int size, const std::string& addr) {
  std::vector<int> ranks;
  for (const auto& [rank, bytes] : store.addresses) {
    const size_t n = static_cast<size_t>(size - 1);
    if (n == 0 || bytes.empty() || bytes.size() % n != 0) continue;
    const size_t each = bytes.size() / n;
    for (size_t k = 0; k < n; ++k) {
      try {
        const gloo::transport::tcp::Address a(
            std::vector<char>(bytes.begin() + k * each, bytes.begin() + (k + 1) * each));
        const std::string s = a.str();
        size_t pos = 0, len = 0;
        if (FindAddress(s, &pos, &len) && s.compare(pos, len, addr) == 0) {
          ranks.push_back(rank);
          break;
        }
      } catch (const std::exception&) {
        break;  // not Gloo's TCP address layout: this rank cannot be matched
      }
    }
  }
  return ranks;
}

// The message for a failure of Gloo's full mesh, naming the peer: the rank
// listening at the address Gloo quotes, among the addresses the ranks
// published; else the rank whose addresses were read last (Gloo connects
// the pairs one at a time, each right after reading its peer's addresses);
// else every peer, as "a peer among ranks ...".
std::string MeshFailure(const Comm& c, const Kv& store, const std::string& what) {
  std::string text = WithoutLocation(what);
  size_t open = 0, len = 0;
  if (FindAddress(text, &open, &len)) {
    const std::string addr = text.substr(open, len);
    const std::vector<int> ranks = RanksAt(store, c.size, addr);
    if (ranks.size() == 1) return c.Who(ranks[0], addr) + ": " + Clause(text.erase(open, len));
  }
  if (store.last_rank >= 0 && store.last_rank != c.rank) {
    return "connecting to " + c.Who(store.last_rank) + ": " + Clause(text);
  }
  return hvd::kit::AmongPeers(c.hosts, c.rank, c.size) + ": " + Clause(text);
}

// A rank whose full mesh fails notes it under "init_failed" (one key, the
// last writer's note stays: any one is a cause), so that ranks whose own
// mesh completed and whose closing handshake then fails (a peer gave up and
// closed its connections) can say what was behind it. Gloo names in the
// handshake's failure only a connection (an address and a port of the
// peer's choosing), not the rank.
void NoteInitFailure(const Kv& store, int rank, const std::string& msg) {
  const std::string note = std::to_string(rank) + " " + msg;
  try {
    store.Set("init_failed", note.data(), note.size());
  } catch (const StoreError&) {
    // Best effort: the rank's own message is what it reports.
  }
}

// "; rank 3 (host h) could not connect: <its message>", or "" if no rank
// noted a failure within a short wait.
std::string InitFailureNote(const Comm& c) {
  constexpr double kNoteWaitS = 1.0;
  void* value = nullptr;
  size_t len = 0;
  if (c.store.get(c.store.kv, "init_failed", &value, &len, kNoteWaitS) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), value != nullptr ? len : 0);
  if (value != nullptr) c.store.free(value);
  const size_t sp = note.find(' ');
  int r = -1;
  try {
    r = sp == std::string::npos ? -1 : std::stoi(note.substr(0, sp));
  } catch (const std::exception&) {
    return "";
  }
  if (r < 0 || r >= c.size || r == c.rank) return "";
  std::string why = note.substr(sp + 1);
  if (why.compare(0, 11, "gloo init: ") == 0) why.erase(0, 11);
  return "; " + c.Who(r) + " could not connect: " + why;
}

// A failure of this call that breaks the communicator; returns the first.
// Loop thread only (it writes this rank's note to the store, unless `note`
// is false: the store is out of reach). Every peer is told (SendAborts)
// before the connections close.
int Break(Comm& c, int status, const std::string& msg, bool note) {
  if (c.Fail(status, msg)) {
    c.Log(HVD_LOG_ERROR, msg);
    if (note) hvd::kit::NoteBroken(c.store, c.rank, c.size, msg);
    SendAborts(c, status, msg);
    c.Close();
  }
  return c.Failed();
}

namespace {
std::string PeerAborted(const Comm& c, int p, const std::string& message, int* status);
}  // namespace

// Request r's pair failed (Gloo's `what`): the peer's own reason first
// where it gave one before closing (it broke on something else: a rank
// further on died): its abort message, which came before the closing on
// the same connection, else its note in the store; else the pair's
// failure, which names the peer (it died, or its host went away). A rank
// notes before it closes, so the note is there once the closing is seen:
// the wait is short. *status: the failure's status (the caller's guess,
// replaced by the peer's where it said why).
std::string PeerFailure(const Comm& c, const Request& r, const std::string& what, int* status) {
  constexpr double kNoteWaitS = 0.05;
  std::string aborted;
  if (AbortFrom(c, r.peer, &aborted)) return PeerAborted(c, r.peer, aborted, status);
  const std::string note = hvd::kit::NoteOf(c.store, r.peer, kNoteWaitS);
  if (!note.empty()) return note + " (as " + c.Who(r.peer) + " reported, closing its connections)";
  return DescribeFailure(c, r, what);
}

namespace {

// An abort message "<status> <text>" from p: its text, as p reported it.
std::string PeerAborted(const Comm& c, int p, const std::string& message, int* status) {
  const size_t sp = message.find(' ');
  *status = HVD_ERR_TRANSPORT;
  try {
    if (sp != std::string::npos) *status = std::stoi(message.substr(0, sp));
  } catch (const std::exception&) {
  }
  if (*status >= 0) *status = HVD_ERR_TRANSPORT;
  const std::string text = sp == std::string::npos ? message : message.substr(sp + 1);
  return text + " (as " + c.Who(p) + " reported)";
}

}  // namespace

namespace {

// Whether rank p runs on this rank's host (the core's host table).
bool SameHost(const Comm& c, int p) {
  const size_t n = c.hosts.size();
  return p >= 0 && static_cast<size_t>(p) < n && static_cast<size_t>(c.rank) < n &&
         !c.hosts[static_cast<size_t>(p)].empty() &&
         c.hosts[static_cast<size_t>(p)] == c.hosts[static_cast<size_t>(c.rank)];
}

// Peer p's abort message, waited for up to `secs` (looked for every 10 ms).
bool AwaitAbort(const Comm& c, int p, double secs, std::string* text) {
  const Clock::time_point deadline = After(secs);
  for (;;) {
    if (AbortFrom(c, p, text)) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Millis(10));
  }
}

}  // namespace

// What the watch found, as this rank's failure (it breaks the
// communicator); the first failure's status, HVD_OK if nothing. Loop thread.
int Settle(Comm& c) {
  if (c.failure.status.load() == HVD_OK && (!c.watch || !c.watch->flagged.load())) return HVD_OK;
  Watch::Found found = Watch::kNothing;
  int peer = -1;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(c.failure.mu);
    if (c.failure.status.load() != HVD_OK) return c.failure.status.load();
    if (!c.watch || c.watch->found == Watch::kNothing) return HVD_OK;
    found = c.watch->found;
    peer = c.watch->found_peer;
    text = c.watch->found_text;
  }
  int status = HVD_ERR_TRANSPORT;
  std::string msg;
  if (found == Watch::kAborted) {
    msg = PeerAborted(c, peer, text, &status);
  } else if (found == Watch::kClosed) {
    Request r;
    r.peer = peer;
    msg = PeerFailure(c, r, text, &status);
  } else {
    // The ranks blocked behind the same stop time out together: their notes
    // name the stopped rank (SilentCause). A rank cut off from the store
    // (its watch's probe found no answer) notes nothing (the store would
    // hold it for the client's reply margin); a silent peer of its own host
    // is no cut link's victim, but likely blocked on a rank beyond it, and
    // says so within moments (its abort message); else the peer is named.
    constexpr double kChainS = 0.5;
    std::string via;
    const double secs = c.peer_s.load();
    const bool store = c.watch->store_probe.Reachable(kChainS);
    std::string aborted;
    if (!store && SameHost(c, peer) && AwaitAbort(c, peer, kChainS, &aborted)) {
      msg = PeerAborted(c, peer, aborted, &status);
      return Break(c, status, msg, false);
    }
    const int cause =
        store ? hvd::kit::SilentCause(c.store, c.hosts, c.rank, c.size, peer, kChainS, &via, true)
              : peer;
    msg = hvd::kit::SilentMessage("gloo", c.hosts, cause, secs, via);
    return Break(c, HVD_ERR_TIMEOUT, msg, store);
  }
  return Break(c, status, msg);
}

int Abort(void* comm, int status, const char* reason) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  SigpipeBlock no_sigpipe;
  try {
    if (status == HVD_OK) status = HVD_ERR_ABORTED;
    const std::string msg = hvd::kit::AbortMessage("gloo", status, reason);
    if (c->Fail(status, msg)) {
      // The note first: the abort message to a peer can queue behind data
      // that peer never receives (a send it never matched), and then the
      // closing reaches it first; the note still says why (PeerFailure).
      hvd::kit::NoteBroken(c->store, c->rank, c->size, msg);
      SendAborts(*c, status, msg);
      c->Close();
    }
    return HVD_OK;
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

}  // namespace hvd_gloo_transport
