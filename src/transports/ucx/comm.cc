// The UCX transport's set-up and teardown: the join round, the UCP context
// and worker, the endpoints, the hello and the goodbyes; finalize.
#include "comm.h"

namespace hvd_ucx_transport {

// ---------------------------------------------------------------------------
// Closing: loop thread only.

// Frees the requests of reqs that are done and drops them from it.
void TakeClosed(std::vector<void*>* reqs) {
  for (size_t i = 0; i < reqs->size();) {
    if (ucp_request_check_status((*reqs)[i]) != UCS_INPROGRESS) {
      ucp_request_free((*reqs)[i]);
      (*reqs)[i] = reqs->back();
      reqs->pop_back();
    } else {
      ++i;
    }
  }
}

// Progresses the worker until every request of reqs (a close, a send without
// a callback) is done or bound_s passes; frees them all (those still pending
// are left to UCX) and empties reqs.
void ProgressUntilDone(Comm& c, std::vector<void*>* reqs, double bound_s) {
  const Clock::time_point deadline = After(bound_s);
  while (!reqs->empty() && Clock::now() < deadline) {
    ucp_worker_progress(c.worker);
    TakeClosed(reqs);
  }
  for (void* r : *reqs) ucp_request_free(r);  // left to UCX
  reqs->clear();
}

// Tells every peer this rank leaves (see ByeDone): `broke` sends the abort
// message of a failed communicator ("<status> <first failure>"), else the
// zero-byte goodbye of a clean finalize. Best effort and bounded: a peer
// that cannot take it learns from the closing (TCP), UCX's keepalive or its
// own timeout.
void SayGoodbye(Comm& c, bool broke) {
  if (broke) {
    std::lock_guard<std::mutex> lock(c.failure.mu);
    c.abort_out = std::to_string(c.failure.status.load()) + " " + c.failure.msg;
    if (c.abort_out.size() > kAbortBytes) c.abort_out.resize(kAbortBytes);
  }
  std::vector<void*> sends;
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  for (size_t j = 0; j < c.eps.size(); ++j) {
    if (c.eps[j] == nullptr || j >= c.byes.size() || c.byes[j] == nullptr) continue;
    const ucs_status_ptr_t sp = ucp_tag_send_nbx(
        c.eps[j], c.abort_out.data(), broke ? c.abort_out.size() : 0, Tag(kByeTag, c.rank), &p);
    if (UCS_PTR_IS_PTR(sp)) sends.push_back(sp);
  }
  ProgressUntilDone(c, &sends, kGoodbyeWaitS);  // the closing cancels what is left
}

// Progresses the closed worker until it has been idle for kDrainIdleS (at
// most kDrainMaxS) before it is destroyed. UCX 1.13 aborts the process in
// ucp_worker_destroy (assertion "got REP message" in
// ucp_request_send_state_ff, from uct_tcp_ep_pending_purge) when a wire-up
// reply is still queued on a tcp endpoint whose connection the closing just
// broke: seen when ranks finalize with a rendezvous send (8 MiB) pending.
// Progressing lets UCX fail and drop those messages itself. On a loaded
// machine a peer's wire-up can lag 50 ms (the abort was still seen then).
//
// Then the small messages no receive took (a peer's sends that arrived
// after this rank's collective failed and cancelled its receives, or a
// mismatched program's) are taken into a scratch buffer and dropped: UCX
// would report each at worker destroy ("unexpected tag-receive descriptor
// ... was not matched"), a warning that says nothing to the user. Only up
// to kDropMax bytes, which UCX sends eagerly (whole, in the unexpected
// queue; its rendezvous starts at 8,256 bytes over shared memory and 1 MiB
// over tcp with the plugin's segments): a receive that matched a
// rendezvous message whose sender is gone would stay on the endpoint, and
// UCX 1.13 asserts on that at worker destroy (seen in unit.test_ucx_p2p).
// Larger ones keep UCX's warning. Within the same time bound; a receive
// that does not complete within it is cancelled and its scratch left
// allocated (UCX may still write it).
void Drain(Comm& c) {
  constexpr double kDrainIdleS = 0.2, kDrainMaxS = 2.0;
  const Clock::time_point end = After(kDrainMaxS);
  const auto idle_for = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(kDrainIdleS));
  Clock::time_point last_busy = Clock::now();
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= end || now - last_busy >= idle_for) break;
    if (ucp_worker_progress(c.worker) != 0) last_busy = Clock::now();
  }
  while (Clock::now() < end) {
    ucp_tag_recv_info_t info;
    constexpr size_t kDropMax = 8192;
    ucp_tag_message_h msg = ucp_tag_probe_nb(c.worker, 0, 0, 0, &info);
    if (msg == nullptr || info.length > kDropMax) break;  // (probe order: the oldest first)
    msg = ucp_tag_probe_nb(c.worker, 0, 0, 1, &info);
    if (msg == nullptr) break;
    uint8_t* sink = new (std::nothrow) uint8_t[std::max<size_t>(info.length, 1)];
    if (sink == nullptr) break;  // left to UCX's warning
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    const ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(c.worker, sink, info.length, msg, &p);
    if (UCS_PTR_IS_ERR(sp) || sp == nullptr) {
      delete[] sink;
      continue;
    }
    while (ucp_request_check_status(sp) == UCS_INPROGRESS && Clock::now() < end) {
      ucp_worker_progress(c.worker);
    }
    const bool done = ucp_request_check_status(sp) != UCS_INPROGRESS;
    if (!done) ucp_request_cancel(c.worker, sp);
    ucp_request_free(sp);
    if (done) delete[] sink;  // else UCX may still write into it: left allocated
  }
}

// Whether a request of a closed communicator may be released: it completed,
// or nothing can write into its buffer any more. A send only reads it, and
// once its endpoint is closed UCX sends nothing more; a receive from a peer
// whose endpoint failed (it died) gets nothing more, nor one from a peer
// whose goodbye came (it broke too: what it sent before came first, and it
// closes its endpoints next). A matched receive from another live peer (a
// rendezvous under way) is not cancelled by UCX: it waits for the peer's
// closing, at most kSettleWaitS (the peer, whose communicator breaks too,
// stops sending within milliseconds; over TCP this rank's closing ends the
// stream anyway).
bool Settled(const Comm& c, const Request& r) {
  if (r.done || r.op == nullptr || r.send) return true;
  const size_t peer = static_cast<size_t>(r.peer);
  if (peer < c.dead.size() && c.dead[peer] != 0) return true;
  return peer < c.byes.size() && c.byes[peer] != nullptr && c.byes[peer]->done;
}

// Tells the peers this rank leaves, cancels every pending receive and
// force-closes every endpoint (pending sends then fail), progressing until
// the requests settle (bounded); after this no UCX operation refers to a
// buffer of a pending request. The closes themselves may take longer (UCX
// discards a stopped peer's lanes in the background): they are progressed
// for at most kCloseQuickS here and finished at finalize (FinishClosing), so
// a failing call returns, and names its cause, at once. Idempotent.
void CloseEndpoints(Comm& c) {
  if (c.worker == nullptr) return;
  SayGoodbye(c, c.failure.status.load() != HVD_OK);
  for (Request* r = c.pending.head; r != nullptr; r = r->next) {
    if (!r->done && r->op != nullptr && !r->send) ucp_request_cancel(c.worker, r->op);
  }
  std::vector<void*>& closing = c.closing;
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  for (ucp_ep_h& ep : c.eps) {
    if (ep == nullptr) continue;
    const ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(sp)) closing.push_back(sp);
    ep = nullptr;
  }
  const Clock::time_point quick = After(kCloseQuickS);
  while (!closing.empty() && Clock::now() < quick) {
    ucp_worker_progress(c.worker);
    TakeClosed(&closing);
  }
  const Clock::time_point deadline = After(kSettleWaitS);
  for (;;) {
    bool all = true;
    for (Request* r = c.pending.head; r != nullptr; r = r->next) all = all && Settled(c, *r);
    if (all || Clock::now() >= deadline) break;
    ucp_worker_progress(c.worker);
  }
}

void ReleaseByes(Comm& c) {
  for (Request* r : c.byes) {
    if (r != nullptr && !r->done && r->op != nullptr) ucp_request_cancel(c.worker, r->op);
  }
  const Clock::time_point deadline = After(kCloseWaitS);
  for (;;) {
    bool all = true;
    for (Request* r : c.byes) all = all && (r == nullptr || r->done || r->op == nullptr);
    if (all || Clock::now() >= deadline) break;
    ucp_worker_progress(c.worker);
  }
  for (Request*& r : c.byes) {
    if (r == nullptr) continue;
    if (r->op != nullptr) ucp_request_free(r->op);
    delete r;
    r = nullptr;
  }
}

// ---------------------------------------------------------------------------
// Init.

// Releases what init built so far (a communicator that never served).
void Destroy(Comm* c) {
  if (c == nullptr) return;
  if (c->worker != nullptr) {
    CloseEndpoints(*c);
    ProgressUntilDone(*c, &c->closing, kCloseWaitS);
    ReleaseByes(*c);
    while (c->pending.head != nullptr) Release(*c, c->pending.head);
    Drain(*c);
    ucp_worker_destroy(c->worker);
  }
  if (c->context != nullptr) ucp_cleanup(c->context);
  delete c;
}

// This host's CPUs online (1 if unknown). Not the affinity mask: hvdrun
// binds each rank to its share of the CPUs, and the ranks that share a
// host's CPUs are what counts.
int HostCpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(std::min<long>(n, 1 << 20)) : 1;
}

// Sets a UCP option unless the user's environment sets it: UCX_<name>, or
// `user_var` where the user's name for it differs (a transport's field:
// see ModifyTcp).
void Modify(ucp_config_t* cfg, const char* name, const char* value, const Comm& c,
            const char* user_var = nullptr) {
  const std::string var = user_var != nullptr ? std::string(user_var) : std::string("UCX_") + name;
  if (std::getenv(var.c_str()) != nullptr) return;
  const ucs_status_t st = ucp_config_modify(cfg, name, value);
  if (st != UCS_OK) {
    c.Log(HVD_LOG_WARNING, "ucx: cannot set " + var + "=" + value + ": " + ucs_status_string(st));
  }
}

// Whether UCX_TLS (`tls`; null: unset, every transport) can let UCX load a
// transport of `family`: one of the names (a transport or an alias naming the
// whole family) is listed, or "all", or the list is a "^" exclusion that
// names none of them. A field set for a transport UCX does not load is
// reported by UCX as an "invalid configuration" when the worker is made.
bool TlsMayLoad(const char* tls, std::initializer_list<const char*> family) {
  if (tls == nullptr || tls[0] == '\0') return true;
  std::string list(tls);
  const bool exclude = list[0] == '^';
  if (exclude) list.erase(0, 1);
  bool named = false;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string tl = list.substr(at, comma - at);
    if (!exclude && tl == "all") return true;
    for (const char* f : family) named = named || tl == f;
    at = comma + 1;
  }
  return exclude ? !named : named;
}

// Sets a field of UCX's tcp transport unless the user's environment sets
// it (UCX_TCP_<field>) or tcp is not among UCX_TLS. UCP takes a transport's
// field by its name within the transport's own table ("TX_SEG_SIZE":
// "TCP_TX_SEG_SIZE" is reported as an unused configuration when the worker
// is made) and gives it to every transport with a field of that name; in
// UCX 1.13 only tcp has TX_SEG_SIZE and RX_SEG_SIZE.
void ModifyTcp(ucp_config_t* cfg, const char* field, const char* value, const Comm& c) {
  if (!TlsMayLoad(std::getenv("UCX_TLS"), {"tcp"})) return;
  Modify(cfg, field, value, c, (std::string("UCX_TCP_") + field).c_str());
}

// How long an idle wait spins (Comm::spin): none where this host's ranks
// outnumber its CPUs; HVD_UCX_SPIN_US: the spin in microseconds, whatever the
// count (a host whose CPUs other jobs share, or where waking from the fd
// costs more).
void ChooseSpin(Comm& c, int local_size) {
  if (local_size > HostCpus()) c.spin = std::chrono::microseconds(0);
  if (const char* v = std::getenv("HVD_UCX_SPIN_US")) {
    char* end = nullptr;
    const long us = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && us >= 0 && us <= 1000000) {
      c.spin = std::chrono::microseconds(us);
    } else {
      c.Log(HVD_LOG_WARNING, std::string("HVD_UCX_SPIN_US='") + v +
                                 "' is not a number of microseconds (0 to 1000000): ignored");
    }
  }
}

// UCP's configuration: transports are UCX's choice (UCX_TLS etc. from the
// environment); the interface hvd was given becomes NET_DEVICES (*where
// says which devices); the memory-type cache is off (host memory only here,
// and it is what would install UCM's memory hooks for this context).
void Configure(ucp_config_t* cfg, const Comm& c, const Settings& s, std::string* where) {
  *where = "UCX's default devices";
  if (!s.network_interface.empty()) {
    if (std::getenv("UCX_NET_DEVICES") == nullptr) {
      *where = "interface " + s.network_interface;
    } else {
      *where = "UCX_NET_DEVICES (over the interface hvd was given)";
    }
    Modify(cfg, "NET_DEVICES", s.network_interface.c_str(), c);
  }
  Modify(cfg, "MEMTYPE_CACHE", "n", c);
  // UCX leaves its shared-memory transports (posix, sysv) out of endpoints
  // that ask for peer error handling unless they watch their peers
  // themselves: this turns that on, so ranks of one host talk over shared
  // memory (within a host only: an IPC namespace apart is another host).
  if (TlsMayLoad(std::getenv("UCX_TLS"), {"posix", "sysv", "mm", "sm", "shm"})) {
    Modify(cfg, "MM_ERROR_HANDLING", "y", c);
  }
  // Over shared memory a peer that died is seen only by UCX's keepalive
  // (whether the peer process still exists; a stopped one does): every
  // 0.25 s rather than UCX's 20 s, so every rank fails within 1 s of a
  // death (at 1 s the slowest survivor took 0.8 s here: the check, then
  // the abort message). A check is a look at /proc per peer process.
  Modify(cfg, "KEEPALIVE_INTERVAL", "250ms", c);
  // UCX's tcp copies a message through segments of 8 KiB (send) and 64 KiB
  // (receive), each a system call and an event; 1 MiB segments measured
  // faster at 64 KiB and above (bench/results/2026-12-02-ucx-seg). The
  // buffers come from a pool while a message is in flight, not one per
  // endpoint.
  ModifyTcp(cfg, "TX_SEG_SIZE", "1m", c);
  ModifyTcp(cfg, "RX_SEG_SIZE", "1m", c);
}

// The UCP context (tagged messages and wake-ups) and its one worker.
int MakeWorker(Comm& c, const Settings& s, std::string* where, std::string* msg) {
  ucp_config_t* cfg = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &cfg);
  if (st != UCS_OK) {
    *msg = std::string("ucx init: reading UCX's configuration: ") + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  Configure(cfg, c, s, where);
  ucp_params_t params;
  std::memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_PPN | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(c.size);
  params.estimated_num_ppn = static_cast<size_t>(std::max(1, s.local_size));
  params.name = "hvd";
  st = ucp_init(&params, cfg, &c.context);
  ucp_config_release(cfg);
  if (st != UCS_OK) {
    c.context = nullptr;
    *msg = std::string("ucx init: ucp_init on ") + *where + ": " + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(c.context, &wp, &c.worker);
  if (st != UCS_OK) {
    c.worker = nullptr;
    *msg = std::string("ucx init: creating a worker: ") + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  if (ucp_worker_get_efd(c.worker, &c.efd) != UCS_OK) c.efd = -1;  // then waits spin
  return HVD_OK;
}

// Addresses through the store, one endpoint per peer.
int Connect(Comm& c, const hvd::kit::Store& kv, double start_s, const std::string& where,
            std::string* msg) {
  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  ucs_status_t st = ucp_worker_get_address(c.worker, &addr, &addr_len);
  if (st != UCS_OK) {
    *msg = std::string("ucx init: worker address: ") + ucs_status_string(st);
    return HVD_ERR_TRANSPORT;
  }
  // Every rank's worker address; a rank whose address never comes did not join.
  const std::string mine(static_cast<const char*>(static_cast<const void*>(addr)), addr_len);
  ucp_worker_release_address(c.worker, addr);
  std::vector<std::string> addresses;
  const int joined = hvd::kit::ExchangeRound(kv, "ucx", "ucx/addr/", c.rank, c.size, mine,
                                             start_s, &addresses, msg);
  if (joined != HVD_OK) return joined;
  c.eps.assign(static_cast<size_t>(c.size), nullptr);
  c.peer_args.reset(new PeerArg[c.size]);
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    const std::string& peer_addr = addresses[static_cast<size_t>(j)];
    c.peer_args[j].comm = &c;
    c.peer_args[j].rank = j;
    ucp_ep_params_t ep;
    std::memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer_addr.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &EpFailed;
    ep.err_handler.arg = &c.peer_args[j];
    st = ucp_ep_create(c.worker, &ep, &c.eps[j]);
    if (st != UCS_OK) {
      c.eps[j] = nullptr;
      *msg = "ucx init: rank " + std::to_string(c.rank) + ": cannot create an endpoint to " +
             c.Who(j) + " over " + where + ": " + ucs_status_string(st);
      return HVD_ERR_TRANSPORT;
    }
  }
  return HVD_OK;
}

// Hello: a zero-byte message each way with every peer, so init returns with
// every connection working (or names the peers it could not reach). On
// failure Destroy closes the endpoints and releases the hellos.
int Hello(Comm& c, double start_s, const std::string& where, std::string* msg) {
  std::vector<Request*> hello;
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    for (bool send : {false, true}) {
      Request* r = new Request;
      r->peer = j;
      r->send = send;
      c.pending.Link(r);
      hello.push_back(r);
      PostOp(c, r, &r->dummy, kHelloTag);
    }
  }
  const Clock::time_point deadline = After(start_s);
  ProgressUntil(c, deadline, [&] {
    for (Request* r : hello) {
      if (!r->done) return false;
    }
    return true;
  });
  std::string unreached;
  int status = HVD_OK;
  for (Request* r : hello) {
    if (r->done && r->status == UCS_OK) continue;
    if (unreached.find(c.Who(r->peer)) == std::string::npos) {
      unreached += (unreached.empty() ? "" : ", ") + c.Who(r->peer) +
                   (r->done ? std::string(": ") + ucs_status_string(r->status) : "");
    }
    status = r->done ? HVD_ERR_TRANSPORT : HVD_ERR_TIMEOUT;
  }
  if (status == HVD_OK && c.failure.status.load() != HVD_OK) {
    status = c.failure.status.load();
    unreached = c.failure.msg;
  }
  if (status != HVD_OK) {
    *msg = "ucx init: rank " + std::to_string(c.rank) + ": no hello within the start timeout (" +
           Secs(start_s) + " s) over " + where + " from " + unreached;
    return status;
  }
  for (Request* r : hello) Release(c, r);
  return HVD_OK;
}

// Every peer's goodbye (finalize), so a peer that leaves cleanly is told
// apart from one that fails.
int PostGoodbyes(Comm& c, std::string* msg) {
  c.gone.assign(static_cast<size_t>(c.size), 0);
  c.dead.assign(static_cast<size_t>(c.size), 0);
  c.byes.assign(static_cast<size_t>(c.size), nullptr);
  c.bye_in.assign(static_cast<size_t>(c.size) * kAbortBytes, 0);
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    Request* r = new Request;
    r->peer = j;
    r->bytes = kAbortBytes;  // zero bytes: finalized; else its abort message
    c.byes[j] = r;
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.user_data = &c.peer_args[j];
    p.cb.recv = &ByeDone;
    const ucs_status_ptr_t sp =
        ucp_tag_recv_nbx(c.worker, c.bye_in.data() + static_cast<size_t>(j) * kAbortBytes,
                         kAbortBytes, Tag(kByeTag, j), kFullMask, &p);
    if (UCS_PTR_IS_ERR(sp)) {
      *msg = "ucx init: rank " + std::to_string(c.rank) + ": cannot post a receive from " +
             c.Who(j) + ": " + ucs_status_string(UCS_PTR_STATUS(sp));
      return HVD_ERR_TRANSPORT;
    }
    r->op = sp;
  }
  return HVD_OK;
}

// The set-up's steps: the worker, the endpoints (over the exchange of
// worker addresses, which names a rank that never starts), the hello, the
// goodbyes' receives. The host names are the core's host table's (c->hosts).
int Setup(const Settings& s, CommPtr* out, std::string* msg) {
  CommPtr c(new Comm);
  c->Adopt(s);
  ChooseSpin(*c, s.local_size);
  if (c->size == 1) {
    *out = std::move(c);
    return HVD_OK;
  }
  const hvd::kit::Store kv(s.store, s.start_s);
  std::string where;
  int status = MakeWorker(*c, s, &where, msg);
  if (status == HVD_OK) status = Connect(*c, kv, s.start_s, where, msg);
  if (status == HVD_OK) status = Hello(*c, s.start_s, where, msg);
  if (status == HVD_OK) status = PostGoodbyes(*c, msg);
  if (status != HVD_OK) return status;
  c->Log(HVD_LOG_DEBUG, "ucx: rank " + std::to_string(c->rank) + " of " +
                            std::to_string(c->size) + " connected over " + where +
                            (c->efd < 0 ? " (no wake-up fd: waits spin)" : "") + ": " +
                            LanesByPeer(*c));
  *out = std::move(c);
  return HVD_OK;
}

// ---------------------------------------------------------------------------
// The rest.

void Finalize(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return;
  c->store_probe.Join();  // the store goes with finalize
  try {
    if (c->worker != nullptr) {
      if (c->pending.head != nullptr || c->failure.status.load() != HVD_OK) {
        CloseEndpoints(*c);  // force: nothing may write into released buffers
      } else {
        // A goodbye to every peer, then a flushing close: peers see this
        // rank leave, not a fault.
        SayGoodbye(*c, false);
        std::vector<void*> closing;
        ucp_request_param_t p;
        std::memset(&p, 0, sizeof(p));
        for (ucp_ep_h& ep : c->eps) {
          if (ep == nullptr) continue;
          const ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &p);
          if (UCS_PTR_IS_PTR(sp)) closing.push_back(sp);
          ep = nullptr;
        }
        ProgressUntilDone(*c, &closing, kCloseWaitS);
        // Until every peer's goodbye has arrived (bounded: a peer may still
        // be busy before its own finalize): one that came after its receive
        // was cancelled would be left in UCX's unexpected queue, which UCX
        // reports at worker destroy ("unexpected tag-receive descriptor").
        const Clock::time_point deadline = After(kPeerGoodbyeWaitS);
        for (;;) {
          bool all = true;
          for (const Request* r : c->byes) all = all && (r == nullptr || r->done);
          if (all || c->failure.status.load() != HVD_OK || Clock::now() >= deadline) break;
          ucp_worker_progress(c->worker);
        }
      }
      ProgressUntilDone(*c, &c->closing, kCloseWaitS);  // the forced closes left running
      ReleaseByes(*c);
      while (c->pending.head != nullptr) Release(*c, c->pending.head);
      Drain(*c);
      ucp_worker_destroy(c->worker);
      c->worker = nullptr;
    }
    if (c->context != nullptr) ucp_cleanup(c->context);
    c->context = nullptr;
  } catch (...) {
  }
  delete c;
}

}  // namespace hvd_ucx_transport
