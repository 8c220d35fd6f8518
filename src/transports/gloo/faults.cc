// The Gloo transport's faults: Gloo's messages with the peer named, the
// notes ranks leave in the store, abort, async_error, last_error.
#include "comm.h"

namespace hvd_gloo_v4 {

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

// "a peer among ranks 1 (host a), 2 (host b)": every rank but this one
// (the first 8 named, then how many in all); "rank 1 (host a)" for one.
std::string AmongPeers(const Comm& c) {
  constexpr int kMaxNamed = 8;
  if (c.size == 2) return c.Who(1 - c.rank);
  std::string s = "a peer among ranks ";
  int n = 0;
  for (int r = 0; r < c.size && n < kMaxNamed; ++r) {
    if (r == c.rank) continue;
    s += (n++ ? ", " : "") + c.Who(r).substr(5);  // without "rank "
  }
  if (c.size - 1 > kMaxNamed) s += ", ... (" + std::to_string(c.size - 1) + " in all)";
  return s;
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
  return AmongPeers(c) + ": " + Clause(text);
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
  if (c.kv_get(c.kv, "init_failed", &value, &len, kNoteWaitS) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), value != nullptr ? len : 0);
  if (value != nullptr) c.kv_free(value);
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

// The closing handshake of init: one byte to and from every peer over the
// new pairs, within `secs`. Done on one rank, every rank has entered it, so
// its mesh is complete. Gloo's own barrier would do, but its failure names
// no peer ("Timed out waiting 2000ms for recv operation to complete"); here
// each peer has its own buffers, so the peers that said nothing in time are
// named, as is the peer of a failed connection. O(size) one-byte messages
// a rank, over the O(size) connections the mesh has made anyway. On
// failure the connections are closed before the buffers go (nothing may
// arrive into them).
std::string TimeoutMessage(const Comm& c, const Request& r, double secs, bool peer_kind) {
  if (peer_kind) {
    return "gloo: " + c.Who(r.peer) + " has not answered for " + Secs(secs) +
           " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)";
  }
  return "gloo: timed out after " + Secs(secs) + " s waiting " + (r.send ? "to send to " : "for ") +
         c.Who(r.peer);
}

// ---------------------------------------------------------------------------
// Point-to-point.

// "; rank r had failed: <what rank r noted when its communicator broke>", or
// "" if it noted nothing (it died or hangs, or there is no store). A rank
// notes before it closes its connections, so the note is there once the
// closing is seen here: the wait is short. Loop thread only.
std::string BrokenNote(const Comm& c, int r) {
  if (r < 0 || c.kv_get == nullptr || c.kv_free == nullptr) return "";
  constexpr double kNoteWaitS = 0.5;
  const std::string key = "broken/" + std::to_string(r);
  void* value = nullptr;
  size_t len = 0;
  if (c.kv_get(c.kv, key.c_str(), &value, &len, kNoteWaitS) != HVD_OK) return "";
  std::string note(static_cast<const char*>(value), len);
  if (value != nullptr) c.kv_free(value);
  return "; rank " + std::to_string(r) + " had failed: " + note;
}

// A failure of this call that breaks the communicator; returns the first.
// Loop thread only (it writes this rank's note to the store).
int Break(Comm& c, int status, const std::string& msg) {
  if (c.Fail(status, msg)) {
    c.Log(HVD_LOG_ERROR, msg);
    if (c.kv_set != nullptr && c.size > 1) {
      const std::string key = "broken/" + std::to_string(c.rank);
      (void)c.kv_set(c.kv, key.c_str(), msg.data(), msg.size());
    }
    c.Close();
  }
  return c.Failed();
}
const char* LastError(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return "gloo: no communicator";
  try {
    if (c->failed.load() != HVD_OK) c->Failed();  // e.g. an abort's reason
  } catch (...) {
  }
  return c->last_error.c_str();
}

int Abort(void* comm, int status, const char* reason) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  SigpipeBlock no_sigpipe;
  try {
    if (status == HVD_OK) status = HVD_ERR_ABORTED;
    const std::string msg =
        reason != nullptr && reason[0] != '\0'
            ? std::string(reason)
            : "gloo: communicator aborted (status " + std::to_string(status) + ")";
    if (c->Fail(status, msg)) c->Close();
    return HVD_OK;
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

int AsyncError(void* comm) noexcept {
  const Comm* c = static_cast<const Comm*>(comm);
  return c == nullptr ? HVD_ERR_INVALID_ARGUMENT : c->failed.load();
}

int SetTimeout(void* comm, double timeout_s, int32_t kind) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  c->limit_s = timeout_s;
  c->peer_limit = kind == HVD_TRANSPORT_LIMIT_PEER;
  return HVD_OK;
}
}  // namespace hvd_gloo_v4
