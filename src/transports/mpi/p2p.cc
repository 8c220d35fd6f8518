// The MPI transport's point-to-point: isend, irecv, wait, test, progress,
// and the polling every wait goes through.
#include "comm.h"

namespace hvd_mpi_transport {

// Gives up a pending request: receives are cancelled (MPI completes them
// as cancelled), everything is kept for finalize.
void GiveUp(Comm& c, MPI_Request* reqs, int n, bool recv, bool coll) {
  CallLock lock(c.serialize);
  for (int i = 0; i < n; ++i) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    if (recv && !coll) MPI_Cancel(&reqs[i]);
    c.left.push_back({reqs[i], recv, coll});
    reqs[i] = MPI_REQUEST_NULL;
  }
}

// Completes a point-to-point request (p2p) or one collective's request
// (*reqs, named `what`) within `timeout_s` (< 0: the set_timeout limit, else
// env.timeout_s; <= 0 after that: none), or throws having given it up.
void Poll(Comm& c, MPI_Request* reqs, int n, double timeout_s, const Request* p2p,
          const char* what) {
  const double limit_s = timeout_s >= 0 ? timeout_s : c.limit_set ? c.limit : c.env_timeout;
  const bool peer_kind = timeout_s < 0 && c.limit_set && c.limit_kind == HVD_TRANSPORT_LIMIT_PEER;
  const auto start = Clock::now();
  const auto deadline = hvd::kit::After(limit_s);
  const bool recv = p2p != nullptr && p2p->recv;
  // "rank 0 (host a): ", and what was waited for (built on failure only).
  const auto self = [&] { return "mpi: " + c.Peer(c.rank) + ": "; };
  const auto op = [&](bool with_peer) {
    if (p2p == nullptr) return std::string(what);
    return std::string(recv ? "receive" : "send") +
           (with_peer ? (recv ? " from " : " to ") + c.Peer(p2p->peer) : "") + ", tag " +
           std::to_string(p2p->tag) + ", " + std::to_string(p2p->bytes) + " bytes";
  };
  for (unsigned polls = 1;; ++polls) {
    int done = 0, rc;
    {
      CallLock lock(c.serialize);
      rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
      GiveUp(c, reqs, n, recv, p2p == nullptr);
      Throw(HVD_ERR_TRANSPORT, self() + op(true) + ": " + MpiText(rc), true);
    }
    if (done) return;
    if (int st = c.aborted.load()) {
      GiveUp(c, reqs, n, recv, p2p == nullptr);
      Throw(st, "", false);  // the abort's reason becomes last_error
    }
    if (polls % 32 != 0) continue;
    const auto now = Clock::now();
    if (now > deadline) {
      GiveUp(c, reqs, n, recv, p2p == nullptr);
      const std::string secs = Secs(limit_s) + " s";
      if (p2p == nullptr) {
        Throw(HVD_ERR_TIMEOUT,
              self() + what + ": timed out after " + secs +
                  " waiting for the other ranks (one is stuck or gone)",
              true);
      }
      Throw(HVD_ERR_TIMEOUT,
            self() + (peer_kind ? c.Peer(p2p->peer) + " has not answered for " + secs + " (" +
                                      op(false) + ") (stopped or cut off?; peer timeout)"
                                : "timed out after " + secs + " waiting for " + c.Peer(p2p->peer) +
                                      " (" + op(false) + "; transfer timeout)"),
            true);
    }
    const auto waited = now - start;
    if (waited >= std::chrono::milliseconds(5)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (waited >= std::chrono::microseconds(100) || c.serialize) {
      std::this_thread::yield();
    }
  }
}
// ---- point-to-point ---------------------------------------------------------

int Post(void* comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t* buf, Request** req,
         bool send) noexcept {
  const bool recv = !send;
  return Guard(comm, [&](Comm& c) {
    if (req == nullptr || buf == nullptr)
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi isend/irecv: NULL argument");
    *req = nullptr;
    if (peer < 0 || peer >= c.size || peer == c.rank || tag > c.max_tag ||
        (buf->data == nullptr && buf->bytes > 0)) {
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi isend/irecv: bad peer " + std::to_string(peer) +
                                          ", tag " + std::to_string(tag) + " or buffer");
    }
    if (buf->memory_type != HVD_MEMORY_HOST) Throw(HVD_ERR_UNSUPPORTED, "mpi: only host memory");
    Request* r = new Request();
    r->peer = peer;
    r->tag = tag;
    r->bytes = buf->bytes;
    r->recv = recv;
    auto* p = static_cast<char*>(buf->data);
    size_t off = 0;
    CallLock lock(c.serialize);
    do {
      const int n = static_cast<int>(std::min(kChunk, buf->bytes - off));
      MPI_Request m = MPI_REQUEST_NULL;
      const int rc = recv
                         ? MPI_Irecv(p + off, n, MPI_BYTE, peer, static_cast<int>(tag), c.comm, &m)
                         : MPI_Isend(p + off, n, MPI_BYTE, peer, static_cast<int>(tag), c.comm, &m);
      if (rc != MPI_SUCCESS) {
        lock.lk = {};
        GiveUp(c, r->mpi.data(), static_cast<int>(r->mpi.size()), recv, false);
        delete r;
        Check(rc, recv ? "MPI_Irecv" : "MPI_Isend");
      }
      r->mpi.push_back(m);
      off += static_cast<size_t>(n);
    } while (off < buf->bytes);
    *req = r;
    return HVD_OK;
  });
}

// Releases a request after its outcome st (giving it up unless it completed).
int Release(Comm& c, Request* req, int st) {
  if (st != HVD_OK) GiveUp(c, req->mpi.data(), static_cast<int>(req->mpi.size()), req->recv, false);
  delete req;
  return st;
}

int Wait(void* comm, hvd_transport_request_t* req, double timeout_s) noexcept {
  if (comm == nullptr || req == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  return Release(*static_cast<Comm*>(comm), req, Guard(comm, [&](Comm& c) {
    Poll(c, req->mpi.data(), static_cast<int>(req->mpi.size()), timeout_s, req, nullptr);
    return HVD_OK;
  }));
}

int Test(void* comm, hvd_transport_request_t* req, int* done) noexcept {
  if (comm == nullptr || req == nullptr || done == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  *done = 0;
  const int st = Guard(comm, [&](Comm& c) {
    CallLock lock(c.serialize);
    const int n = static_cast<int>(req->mpi.size());
    Check(MPI_Testall(n, req->mpi.data(), done, MPI_STATUSES_IGNORE), "MPI_Testall");
    return HVD_OK;
  });
  if (st == HVD_OK && *done == 0) return HVD_OK;
  *done = 1;
  return Release(*static_cast<Comm*>(comm), req, st);
}

int Progress(void* comm) noexcept {
  return Guard(comm, [](Comm& c) {
    int flag = 0;
    CallLock lock(c.serialize);  // drives MPI's progress engine; matches nothing
    Check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c.comm, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
    return HVD_OK;
  });
}

}  // namespace hvd_mpi_transport
