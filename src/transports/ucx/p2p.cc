// The UCX transport's point-to-point: isend, irecv, wait, test, progress.
#include "comm.h"

namespace hvd_ucx_transport {

// ---------------------------------------------------------------------------
// Posting.

// Posts one send or receive for r (linked into the pending list); false with
// r->status set when UCP refused it at once.
bool PostOp(Comm& c, Request* r, void* data, uint32_t tag) {
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = r;
  ucs_status_ptr_t sp;
  if (r->send) {
    p.cb.send = &SendDone;
    sp = ucp_tag_send_nbx(c.eps[r->peer], data, r->bytes, Tag(tag, c.rank), &p);
  } else {
    // Always through the callback: UCX 1.13 does not fill recv_info on an
    // immediate completion, and the received length is checked.
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = &RecvDone;
    sp = ucp_tag_recv_nbx(c.worker, data, r->bytes, Tag(tag, r->peer), kFullMask, &p);
  }
  if (sp == nullptr) {  // completed at once (no callback)
    r->done = true;
    r->status = UCS_OK;
    return true;
  }
  if (UCS_PTR_IS_ERR(sp)) {
    r->done = true;
    r->status = UCS_PTR_STATUS(sp);
    return false;
  }
  r->op = sp;
  return true;
}

// The outcome of a completed request: "" if it succeeded, else the message.
void Release(Comm& c, Request* r) {
  c.pending.Unlink(r);
  if (r->op != nullptr) ucp_request_free(r->op);  // no callback after this
  delete r;
}

// Cancels the goodbye receives still posted and frees them; loop thread
// only, after the endpoints are closed (a cancelled receive completes at
// once; progress is bounded anyway).
// ---------------------------------------------------------------------------
// Point-to-point.

int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf,
         hvd_transport_request_t** req, bool send) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  const char* op = send ? "ucx isend: " : "ucx irecv: ";
  try {
    const int bad = hvd::kit::CheckPost(op, peer, tag, buf, req, c->rank, c->size, kMaxTag,
                                        &c->last_error);
    if (bad != HVD_OK) return bad;
    if (c->failure.status.load() != HVD_OK) return Settle(*c);
    std::unique_ptr<Request> r(new Request);
    r->peer = peer;
    r->send = send;
    r->bytes = buf->bytes;
    void* data = buf->bytes > 0 ? buf->data : &r->dummy;
    Request* linked = r.release();
    c->pending.Link(linked);
    if (!PostOp(*c, linked, data, tag)) {
      const std::string why = Outcome(*c, *linked);
      const int status = Break(*c, StatusOf(linked->status), why, peer);
      Release(*c, linked);
      return status;
    }
    *req = linked;
    return HVD_OK;
  } catch (const std::bad_alloc&) {
    c->last_error = std::string(op) + "out of memory";
    return HVD_ERR_NO_MEMORY;
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

// What a request comes to once a wait or test stops progressing: the
// communicator's failure (aborted, an endpoint failed), its peer's leaving,
// or its own outcome once done (HVD_OK, or a failure that breaks the
// communicator); HVD_IN_PROGRESS while none of these has happened.
int Conclusion(Comm& c, hvd_transport_request_t* req) {
  const size_t peer = static_cast<size_t>(req->peer);
  if (c.failure.status.load() != HVD_OK) return Settle(c);
  if (!req->done && peer < c.gone.size() && c.gone[peer] != 0) {
    return Break(c, HVD_ERR_TRANSPORT,
                 "ucx: " + c.Who(req->peer) + ": connection lost (it finalized and left while this rank " +
                     (req->send ? "was sending to it)" : "waited for it)"));
  }
  if (!req->done) return HVD_IN_PROGRESS;
  const std::string why = Outcome(c, *req);
  return why.empty() ? HVD_OK : Break(c, StatusOf(req->status), why, req->peer);
}

// A call refused for a bad argument: its message, the communicator intact.
int Refuse(Comm& c, const char* msg) noexcept {
  try {
    c.last_error = msg;
  } catch (...) {
  }
  return HVD_ERR_INVALID_ARGUMENT;
}

// An exception inside wait or test: it breaks the communicator.
int BreakUnexpected(Comm& c, const char* msg) noexcept {
  try {
    return Break(c, HVD_ERR_TRANSPORT, msg);
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
}

// How long a silent peer's waiters look for the rank behind it
// (SilentCause). A stopped rank's own neighbours wait all of it (the stopped
// rank notes nothing), and everyone's error comes after it: the peer timeout
// + this + the abort message must stay within the peer timeout + 1 s on a
// loaded host (0.5 s left 0.3 s to spare here). The ranks further behind
// mostly learn the cause from the neighbours' abort messages first.
constexpr double kSilentChainS = 0.25;

int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  if (req == nullptr) return Refuse(*c, "ucx wait: NULL request");
  int status = HVD_OK;
  try {
    const bool peer_kind = timeout_s < 0 && c->peer_limit;
    const double secs = timeout_s < 0 ? c->limit_s : timeout_s;  // <= 0: no limit
    if (c->failure.status.load() != HVD_OK) {
      status = Settle(*c);
    } else {
      const size_t peer = static_cast<size_t>(req->peer);
      // A peer silent for the peer timeout (no message with it completes)
      // is found before the transfer's limit: the wait ends there.
      const double silence = c->peer_s.load();
      const bool timed = silence > 0 && (secs <= 0 || silence <= secs);
      const Clock::time_point deadline = After(timed ? silence : secs);
      const auto due = [c, req, peer] {
        return req->done || (peer < c->gone.size() && c->gone[peer] != 0);
      };
      bool in_time = false;
      c->waits_on = req->peer;  // for ByeDone; cleared below, whatever the outcome
      c->wait_start = Clock::now();
      struct Clear {
        Comm* c;
        ~Clear() { c->waits_on = -1; }
      } clear{c};
      // A wait going silent starts a look at whether the store answers
      // (Comm::store_probe): a rank cut off from it would otherwise learn
      // that only after the store client's reply margin, past the bound.
      if (timed && silence > hvd::kit::StoreProbe::kAfterS) {
        in_time = ProgressUntil(*c, After(hvd::kit::StoreProbe::StartAfter(silence)), due);
        if (!in_time) c->store_probe.Start(c->store);
      }
      if (!in_time) in_time = ProgressUntil(*c, deadline, due);
      if (!req->done && peer < c->gone.size() && c->gone[peer] != 0) {
        // The peer left, but what it sent before its goodbye may still sit
        // in UCX's queues: what is due now completes within this progress.
        for (int i = 0; i < 64 && !req->done && ucp_worker_progress(c->worker) != 0; ++i) {
        }
      }
      status = Conclusion(*c, req);
      if (status == HVD_IN_PROGRESS && !in_time && timed) {  // silent: name the cause
        std::string via;
        const bool store = c->store_probe.Reachable(kSilentChainS);
        c->store_cut = !store;
        const int cause = store ? hvd::kit::SilentCause(c->store, c->hosts, c->rank, c->size,
                                                        req->peer, kSilentChainS, &via, true)
                                : req->peer;
        // (no lost peer: a silent rank leaves no note in the store to wait for)
        status = Break(*c, HVD_ERR_TIMEOUT,
                       hvd::kit::SilentMessage("ucx", c->hosts, cause, silence, via));
      } else if (status == HVD_IN_PROGRESS) {  // not done, and ProgressUntil gave up
        status = in_time ? HVD_ERR_INTERNAL
                         : Break(*c, HVD_ERR_TIMEOUT,
                               hvd::kit::TimeoutMessage("ucx", c->Who(req->peer), req->send,
                                                        secs, peer_kind),
                               req->peer);
      }
    }
  } catch (...) {
    status = BreakUnexpected(*c, "ucx wait: unexpected exception");
  }
  // Settle/Break closed the endpoints before the buffer goes on failure.
  Release(*c, req);
  return status;
}

// Never blocks: one round of progress, then the request's state as Wait
// would report it once done (a failure breaks the communicator as there).
int Test(void* comm, hvd_transport_request_t* req, int* done) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr || done == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  *done = 0;
  if (req == nullptr) return Refuse(*c, "ucx test: NULL request");
  int status = HVD_OK;
  try {
    if (c->failure.status.load() == HVD_OK) {
      for (int i = 0; i < 8 && !req->done && ucp_worker_progress(c->worker) != 0; ++i) {
      }
    }
    status = Conclusion(*c, req);
    if (status == HVD_IN_PROGRESS) return HVD_OK;  // still pending: not released
  } catch (...) {
    status = BreakUnexpected(*c, "ucx test: unexpected exception");
  }
  *done = 1;
  Release(*c, req);
  return status;
}

// Advances pending transfers without blocking: what has arrived is taken in
// (a rendezvous over tcp moves only while the worker is progressed), so a
// caller busy between waits (the ring's reductions) keeps the wire moving.
int Progress(void* comm) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  if (c->failure.status.load() != HVD_OK) return c->failure.status.load();
  try {
    for (int i = 0; i < 8 && ucp_worker_progress(c->worker) != 0; ++i) {
    }
  } catch (...) {
    return HVD_ERR_INTERNAL;
  }
  return HVD_OK;
}

}  // namespace hvd_ucx_transport
