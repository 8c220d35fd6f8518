// The Gloo transport's set-up and teardown: the TCP device, the join round,
// the full mesh, the closing handshake; finalize.
#include "comm.h"

namespace hvd_gloo_transport {

// The closing handshake of init: one byte to and from every peer over the
// new pairs, within `secs`. Done on one rank, every rank has entered it, so
// its mesh is complete. Gloo's own barrier would do, but its failure names
// no peer ("Timed out waiting 2000ms for recv operation to complete"); here
// each peer has its own buffers, so the peers that said nothing in time are
// named, as is the peer of a failed connection. O(size) one-byte messages
// a rank, over the O(size) connections the mesh has made anyway. On
// failure the connections are closed before the buffers go (nothing may
// arrive into them).
int Handshake(Comm& c, double secs, std::string* msg) {
  const size_t n = static_cast<size_t>(c.size);
  std::vector<char> out(n, 1), in(n, 0);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends(n), recvs(n);
  std::vector<int> silent;
  std::string failure;
  int status = HVD_OK;
  try {
    for (int j = 0; j < c.size; ++j) {
      if (j == c.rank) continue;
      recvs[j] = c.ctx->createUnboundBuffer(&in[j], 1);
      recvs[j]->recv(j, kHandshakeSlot, 0, 1);
      sends[j] = c.ctx->createUnboundBuffer(&out[j], 1);
      sends[j]->send(j, kHandshakeSlot, 0, 1);
    }
  } catch (const std::exception& e) {
    c.Close();
    *msg = "posting its messages: " + WithoutLocation(e.what());
    return HVD_ERR_TRANSPORT;
  }
  const Clock::time_point deadline = After(secs);
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    for (auto* ub : {recvs[j].get(), sends[j].get()}) {
      const Millis left(std::max<int64_t>(
          1, std::chrono::duration_cast<Millis>(deadline - Clock::now()).count()));
      try {
        if (ub == recvs[j].get() ? ub->waitRecv(left) : ub->waitSend(left)) continue;
        failure = "aborted";
      } catch (const std::exception& e) {
        const std::string what = e.what();
        if (what.find("Timed out waiting") != std::string::npos) {
          silent.push_back(j);
        } else if (failure.empty()) {
          Request r;
          r.peer = j;
          r.send = ub == sends[j].get();
          failure = DescribeFailure(c, r, what).substr(6);  // without "gloo: "
          status = LooksLikeTimeout(what.c_str()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
        }
      }
      break;  // one failure a peer is enough
    }
  }
  if (silent.empty() && failure.empty()) return HVD_OK;
  c.Close();
  if (!failure.empty()) {
    *msg = failure;
    return status == HVD_OK ? HVD_ERR_TRANSPORT : status;
  }
  constexpr size_t kMaxNamed = 8;
  *msg = "nothing within " + Secs(secs) + " s from ";
  for (size_t i = 0; i < silent.size() && i < kMaxNamed; ++i) {
    *msg += (i ? ", " : "") + c.Who(silent[i]);
  }
  if (silent.size() > kMaxNamed) *msg += ", ... (" + std::to_string(silent.size()) + " ranks in all)";
  *msg += " (connected, then stopped or cut off?; start timeout, HVD_START_TIMEOUT)";
  return HVD_ERR_TIMEOUT;
}

// ---------------------------------------------------------------------------
// Init.

// Creates the TCP device, whose event-loop thread is started by Gloo's
// CreateDevice and inherits the creating thread's scheduling policy, CPU
// affinity and signal mask. The device is therefore made on a short-lived
// thread of this one (same affinity and mask) that first switches itself to
// SCHED_BATCH, which takes away the woken loop's preemption of the thread it
// wakes beside (the spin in the header comment) and nothing of its share of
// the CPU: nice stays as it was. HVD_GLOO_LOOP_SCHED=normal keeps the
// caller's policy. Measured (2 ranks on 2 CPUs, every byte over Gloo's TCP):
// a 4-byte allreduce 480-690 us -> 100-140 us, 1 MiB 4.8 ms -> 0.4-0.7 ms.
int MakeDevice(Comm& c, const gloo::transport::tcp::attr& attr, const std::string& where,
               std::string* msg) {
  const char* want = std::getenv("HVD_GLOO_LOOP_SCHED");
  const std::string policy = want == nullptr || want[0] == '\0' ? "batch" : want;
  if (policy != "batch" && policy != "normal") {
    *msg = "gloo init: HVD_GLOO_LOOP_SCHED='" + policy + "': expected batch or normal";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  std::string error, note;
  try {
    std::thread maker([&] {
#ifdef SCHED_BATCH
      if (policy == "batch") {
        sched_param sp{};
        sp.sched_priority = 0;
        const int rc = pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
        note = rc == 0 ? "gloo: event loop under SCHED_BATCH"
                       : std::string("gloo: event loop left at the caller's policy: "
                                     "SCHED_BATCH refused: ") +
                             std::strerror(rc);
      }
#else
      if (policy == "batch") note = "gloo: event loop left at the caller's policy: no SCHED_BATCH";
#endif
      try {
        c.device = gloo::transport::tcp::CreateDevice(attr);
      } catch (const std::exception& e) {
        error = e.what();
      } catch (...) {
        error = "unknown exception";
      }
    });
    maker.join();
  } catch (const std::exception& e) {  // no thread could be started
    error = std::string("starting a thread: ") + e.what();
  }
  if (!error.empty() || c.device == nullptr) {
    *msg = "gloo init: cannot create a TCP device on " + where + ": " +
           (error.empty() ? std::string("no device") : error);
    return HVD_ERR_TRANSPORT;
  }
  if (!note.empty()) c.Log(HVD_LOG_DEBUG, note);
  return HVD_OK;
}

// Where to listen: the interface or address given, loopback when every rank
// is on this host, else this host's name (`host`; "" if unknown).
int ListenOn(const Settings& s, const std::string& host, gloo::transport::tcp::attr* attr,
             std::string* where, std::string* msg) {
  if (!s.network_interface.empty()) {
    attr->iface = s.network_interface;
    *where = "interface " + attr->iface;
  } else if (!s.local_address.empty()) {
    attr->hostname = s.local_address;
    *where = "address " + attr->hostname;
  } else if (s.local_size == s.size) {
    attr->hostname = "127.0.0.1";
    *where = "address 127.0.0.1 (single host)";
  } else if (!host.empty()) {
    attr->hostname = host;
    *where = "host name " + attr->hostname;
  } else {
    *msg = "gloo init: gethostname failed and no interface or address was given";
    return HVD_ERR_TRANSPORT;
  }
  return HVD_OK;
}

// Full mesh. Everyone has joined, so this normally takes milliseconds;
// Gloo waits up to 5x the context timeout for a pair, hence the /5.
int ConnectMesh(Comm& c, const Settings& s, const std::string& where, std::string* msg) {
  Kv store(s.store, s.start_s);
  c.ctx = std::make_shared<gloo::rendezvous::Context>(c.rank, c.size);
  c.ctx->setTimeout(std::max(Millis(200), ToMillis(s.start_s / 5.0)));
  try {
    c.ctx->connectFullMesh(store, c.device);
  } catch (const StoreError& e) {
    // A key that never came: a rank that never joined (no address of its
    // own in the store), or one that stopped (or lost the store) between
    // publishing its addresses and ours being read.
    const std::vector<int> absent =
        e.code == HVD_ERR_TIMEOUT ? hvd::kit::Absent(s.store, "gloo/", c.rank, c.size)
                                  : std::vector<int>();
    if (!absent.empty()) {
      *msg = hvd::kit::NotJoined("gloo", c.rank, absent, s.start_s) + " (connecting the full mesh)";
    } else {
      *msg = "gloo init: connecting the full mesh: " +
             (store.waiting_for >= 0 ? "waiting for " + c.Who(store.waiting_for) + "'s addresses: "
                                     : std::string()) +
             e.what();
    }
    NoteInitFailure(store, c.rank, *msg);
    return HVD_ERR_RENDEZVOUS;
  } catch (const std::exception& e) {
    *msg = "gloo init: connecting the full mesh over " + where + ": " +
           MeshFailure(c, store, e.what());
    NoteInitFailure(store, c.rank, *msg);
    return LooksLikeTimeout(e.what()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
  }
  return HVD_OK;
}

// The set-up's steps: where to listen, the TCP device, the full mesh, the
// closing handshake.
int Setup(const Settings& s, std::unique_ptr<Comm>* out, std::string* msg) {
  auto c = std::make_unique<Comm>();
  c->Adopt(s);
  if (c->size == 1) {
    *out = std::move(c);
    return HVD_OK;
  }
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
  const std::string host = name;
  gloo::transport::tcp::attr attr;
  std::string where;
  int status = ListenOn(s, host, &attr, &where, msg);
  if (status == HVD_OK) status = MakeDevice(*c, attr, where, msg);
  if (status != HVD_OK) return status;
  // The host names are the core's host table's (c->hosts).
  status = ConnectMesh(*c, s, where, msg);
  if (status != HVD_OK) return status;
  // Every rank's mesh is complete before any rank's init returns. Gloo's
  // connect completes on the connecting side before the accepting side has
  // read the handshake, so a rank that returned and finalized at once could
  // still break a peer's set-up ("Connection closed by peer", or a third
  // rank's connect timing out). Seen in test_gloo_p2p under load, where one
  // of three ranks has no traffic and finalizes right after init. A peer
  // that connected and then never answers is also seen only here. The
  // watch's receives go first (PostWatch says why).
  PostWatch(*c);
  const int hs = Handshake(*c, s.start_s, msg);
  if (hs != HVD_OK) {
    *msg = "gloo init: the ranks' closing handshake over " + where + ": " + *msg + InitFailureNote(*c);
    return hs;
  }
  c->ctx->setTimeout(ToMillis(s.timeout_s));
  StartWatch(*c);
  c->Log(HVD_LOG_DEBUG, "gloo: rank " + std::to_string(c->rank) + " of " + std::to_string(c->size) +
                            " connected over " + where + " (" + c->device->str() + ")");
  *out = std::move(c);
  return HVD_OK;
}

// ---------------------------------------------------------------------------
// The rest.

void Finalize(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  SigpipeBlock no_sigpipe;
  StopWatch(*c);
  try {
    if (c->pending.head != nullptr) c->Close();  // hard close first: nothing writes into them
    while (c->pending.head != nullptr) {
      Request* r = c->pending.head;
      c->Unlink(r);
      delete r;
    }
    c->ctx.reset();  // a soft close where not closed already: peers see end-of-stream
    c->device.reset();
    c->watch.reset();  // its buffers hold Gloo's context: the pairs go with them, before their memory
  } catch (...) {
  }
  delete c;
}

}  // namespace hvd_gloo_transport
