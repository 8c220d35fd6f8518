// The Gloo transport's point-to-point: isend, irecv, wait.
#include "comm.h"

namespace hvd_gloo_transport {

int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
         hvd_transport_request_t** req, bool send) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  const char* op = send ? "gloo isend: " : "gloo irecv: ";
  const int bad = hvd::kit::CheckPost(op, peer, tag, buf, req, c->rank, c->size, kMaxTag,
                                      &c->last_error);
  if (bad != HVD_OK) return bad;
  if (Settle(*c) != HVD_OK) return c->Failed();
  SigpipeBlock no_sigpipe;
  Request* linked = nullptr;  // once in the pending list
  try {
    auto r = std::make_unique<Request>();
    r->peer = peer;
    r->send = send;
    void* data = buf->bytes > 0 ? buf->data : &r->dummy;
    r->ub = c->ctx->createUnboundBuffer(data, std::max<size_t>(buf->bytes, 1));
    {
      std::lock_guard<std::mutex> lock(c->failure.mu);
      if (c->failure.status.load() == HVD_OK) {
        c->pending.Link(r.get());
        linked = r.release();
      }
    }
    if (linked == nullptr) return c->Failed();  // aborted meanwhile
    const uint64_t slot = kSlotBase + tag;
    if (send) {
      linked->ub->send(peer, slot, 0, buf->bytes);
    } else {
      linked->ub->recv(peer, slot, 0, buf->bytes);
    }
    *req = linked;
    return HVD_OK;
  } catch (const std::exception& e) {
    if (linked == nullptr) {  // nothing posted (out of memory?): the communicator is fine
      c->last_error = std::string(op) + WithoutLocation(e.what());
      return dynamic_cast<const std::bad_alloc*>(&e) ? HVD_ERR_NO_MEMORY : HVD_ERR_TRANSPORT;
    }
    int status = HVD_ERR_TRANSPORT;
    const std::string msg = PeerFailure(*c, *linked, e.what(), &status);
    Break(*c, status, msg);
  } catch (...) {
    Break(*c, HVD_ERR_TRANSPORT, std::string(op) + "unknown exception");
  }
  if (linked != nullptr) {  // connections are closed now (Break)
    c->Unlink(linked);
    delete linked;
  }
  return c->Failed();
}

// A wait that timed out: Gloo closes the pair when this wait's own limit
// passes, which the watch may see before the waiting thread does. The timeout
// is the cause then, unless a failure came first or another rank's abort
// message did.
bool OwnTimeout(Comm& c) {
  std::lock_guard<std::mutex> lock(c.failure.mu);
  return c.failure.status.load() == HVD_OK && (!c.watch || c.watch->found != Watch::kAborted);
}

// The limit of a Gloo wait. With the watch timing the peer timeout (a
// silent peer, a chain of blocked ranks named), Gloo's own limit is only a
// backstop: Gloo's timeout breaks every pair and names no cause.
double WaitLimit(const Comm& c, double timeout_s) {
  if (timeout_s >= 0) return timeout_s;
  if (c.peer_limit && c.watch && c.limit_s > 0) return 2 * c.limit_s + 1;
  return c.limit_s;
}

int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr || req == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  SigpipeBlock no_sigpipe;
  const bool peer_kind = timeout_s < 0 && c->peer_limit;
  const double secs = WaitLimit(*c, timeout_s);  // 0: no limit (ToMillis)
  int status = HVD_OK;
  if (Settle(*c) != HVD_OK) {
    status = c->Failed();
  } else {
    try {
      Waiting(*c, req);
      const Millis limit = ToMillis(secs);
      const bool done = req->send ? req->ub->waitSend(limit) : req->ub->waitRecv(limit);
      if (!done) status = Settle(*c) != HVD_OK ? c->Failed() : HVD_ERR_INTERNAL;  // woken
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const bool timed_out = what.find("Timed out waiting") != std::string::npos;
      if (!(timed_out && OwnTimeout(*c)) && Settle(*c) != HVD_OK) {
        status = c->Failed();  // the failure behind it came first, or the watch saw it
      } else if (timed_out) {
        status = Break(*c, HVD_ERR_TIMEOUT,
                       hvd::kit::TimeoutMessage("gloo", c->Who(req->peer), req->send, secs,
                                                peer_kind) +
                           hvd::kit::BrokenNote(c->store, req->peer));
      } else {
        status = LooksLikeTimeout(what.c_str()) ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT;
        const std::string msg = PeerFailure(*c, *req, what, &status);
        status = Break(*c, status, msg);
      }
      c->Log(HVD_LOG_DEBUG, "gloo: Gloo said: " + what);
    } catch (...) {
      status = Break(*c, HVD_ERR_TRANSPORT, "gloo wait: unknown exception");
    }
    Waiting(*c, nullptr);
  }
  if (status == HVD_ERR_INTERNAL) {
    status = Break(*c, HVD_ERR_INTERNAL, "gloo wait: woken with no failure recorded");
  }
  if (status != HVD_OK) c->Close();  // before the buffer goes: nothing may arrive into it
  c->Unlink(req);
  delete req;
  return status;
}

}  // namespace hvd_gloo_transport
