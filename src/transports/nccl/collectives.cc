// The NCCL transport's native collectives, on the plugin's stream: Run (the
// ordering against the callers' streams and the polled wait), the checks of
// buffers and reductions, and the six entries.
#include "comm.h"

namespace hvd_nccl_transport {

std::string Comm::TimeoutMsg(const char* what, size_t bytes, bool enqueue) {
  std::string m = std::string(what) + " (" + std::to_string(bytes) + " bytes) ";
  m += enqueue ? "was not enqueued" : "did not complete";
  if (peer_limit)
    return m + " within " + Secs(limit_s) +
           " s: a rank has not answered (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT); "
           "NCCL does not say which rank; the communicator is aborted";
  return m + " within " + Secs(limit_s) +
         " s (the transfer limit): a rank has not entered it or is stuck; NCCL does not say "
         "which rank; the communicator is aborted";
}

// Polls until NCCL has taken a non-blocking call (ncclInProgress ends).
int Comm::WaitEnqueued(const char* what, size_t bytes, Clock::time_point deadline) {
  for (unsigned i = 0;; ++i) {
    int a = abort_status.load();
    if (a != HVD_OK) return BreakForAbort(a);
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(nccl, &st);
    if (r != ncclSuccess) st = r;
    if (st == ncclSuccess) return HVD_OK;
    if (st != ncclInProgress) return CheckAsync(what);
    if (Clock::now() >= deadline) return Break(HVD_ERR_TIMEOUT, TimeoutMsg(what, bytes, true));
    if (i < kSpins) std::this_thread::yield();
    else std::this_thread::sleep_for(kPollSleep);
  }
}

// Polls until the work before `done` finished on our stream.
int Comm::WaitDone(const char* what, size_t bytes, Clock::time_point deadline) {
  for (unsigned i = 0;; ++i) {
    int a = abort_status.load();
    if (a != HVD_OK) return BreakForAbort(a);
    cudaError_t e = cudaEventQuery(done);
    if (e == cudaSuccess) return CheckAsync(what);
    if (e != cudaErrorNotReady)
      return Break(HVD_ERR_TRANSPORT, std::string(what) + ": CUDA error while waiting: " +
                                          CudaErr(e) + "; the communicator is aborted");
    int s = CheckAsync(what);
    if (s != HVD_OK) return s;
    if (Clock::now() >= deadline) return Break(HVD_ERR_TIMEOUT, TimeoutMsg(what, bytes, false));
    if (i < kSpins) std::this_thread::yield();
    else std::this_thread::sleep_for(kPollSleep);
  }
}

// Runs one collective: our stream waits for the callers' streams, enqueue()
// issues the NCCL calls on it, the callers' streams wait for ours, and the
// call waits for completion.
int Comm::Run(const char* what, size_t bytes, std::vector<cudaStream_t> callers,
        const std::function<ncclResult_t()>& enqueue) {
  std::sort(callers.begin(), callers.end());
  callers.erase(std::unique(callers.begin(), callers.end()), callers.end());
  if (callers.size() > 2) return Refuse(HVD_ERR_INTERNAL, std::string(what) + ": too many streams");
  for (size_t i = 0; i < callers.size(); ++i) {
    cudaError_t e = cudaEventRecord(ready[i], callers[i]);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, ready[i], 0);
    if (e != cudaSuccess)
      return Break(HVD_ERR_TRANSPORT, std::string(what) +
                                          ": ordering after the caller's stream: " + CudaErr(e));
  }
  Clock::time_point deadline = After(limit_s);
  ncclResult_t r = enqueue();
  if (r != ncclSuccess && r != ncclInProgress)
    return Break(HVD_ERR_TRANSPORT, std::string(what) + ": " + NcclErr(r, nccl) +
                                        "; the communicator is aborted");
  int s = WaitEnqueued(what, bytes, deadline);
  if (s != HVD_OK) return s;
  cudaError_t e = cudaEventRecord(done, stream);
  for (size_t i = 0; e == cudaSuccess && i < callers.size(); ++i)
    e = cudaStreamWaitEvent(callers[i], done, 0);
  if (e != cudaSuccess)
    return Break(HVD_ERR_TRANSPORT, std::string(what) +
                                        ": ordering the caller's stream after ours: " + CudaErr(e));
  return WaitDone(what, bytes, deadline);
}

// A buffer the collective reads or writes `need` bytes of.
int Comm::CheckBuf(const char* what, const char* which, const hvd_transport_buffer_t* b, size_t need) {
  if (b == nullptr) return Refuse(HVD_ERR_INVALID_ARGUMENT, std::string(what) + ": " + which + " buffer is NULL");
  if (need == 0) return HVD_OK;
  if (b->memory_type == HVD_MEMORY_HOST)
    return Refuse(HVD_ERR_UNSUPPORTED,
                  std::string(what) + ": the " + which +
                      " buffer is in host memory; the nccl transport takes CUDA device memory "
                      "only (host tensors must be staged through device memory by the core, or "
                      "go over another transport)");
  if (b->memory_type != HVD_MEMORY_CUDA)
    return Refuse(HVD_ERR_UNSUPPORTED, std::string(what) + ": the " + which +
                                           " buffer has memory type " +
                                           std::to_string(b->memory_type) + ", not CUDA");
  if (b->device != device)
    return Refuse(HVD_ERR_UNSUPPORTED,
                  std::string(what) + ": the " + which + " buffer is on CUDA device " +
                      std::to_string(b->device) + ", this rank's NCCL communicator on device " +
                      std::to_string(device));
  if (b->data == nullptr)
    return Refuse(HVD_ERR_INVALID_ARGUMENT, std::string(what) + ": " + which + " data is NULL");
  if (b->bytes < need)
    return Refuse(HVD_ERR_INVALID_ARGUMENT,
                  std::string(what) + ": the " + which + " buffer holds " +
                      std::to_string(b->bytes) + " bytes, the operation needs " +
                      std::to_string(need));
  return HVD_OK;
}

int Comm::ReductionOf(const char* what, hvd_dtype_t dtype, hvd_reduce_op_t op, Reduction* out) {
  bool boolean = false;
  switch (dtype) {
    case HVD_UINT8: *out = {ncclUint8, 1, ncclSum}; break;
    case HVD_INT8: *out = {ncclInt8, 1, ncclSum}; break;
    case HVD_INT32: *out = {ncclInt32, 4, ncclSum}; break;
    case HVD_INT64: *out = {ncclInt64, 8, ncclSum}; break;
    case HVD_FLOAT16: *out = {ncclFloat16, 2, ncclSum}; break;
    case HVD_BFLOAT16: *out = {ncclBfloat16, 2, ncclSum}; break;
    case HVD_FLOAT32: *out = {ncclFloat32, 4, ncclSum}; break;
    case HVD_FLOAT64: *out = {ncclFloat64, 8, ncclSum}; break;
    case HVD_BOOL: *out = {ncclUint8, 1, ncclMax}; boolean = true; break;
    case HVD_UINT16:
    case HVD_INT16:
      return Refuse(HVD_ERR_UNSUPPORTED, std::string(what) + ": dtype " + DtypeName(dtype) +
                                             " is not supported (NCCL has no 16-bit integer type)");
    default:
      return Refuse(HVD_ERR_INVALID_ARGUMENT,
                    std::string(what) + ": unknown dtype " + std::to_string(static_cast<int>(dtype)));
  }
  switch (op) {
    case HVD_SUM: out->op = boolean ? ncclMax : ncclSum; break;  // bool: logical or
    case HVD_MAX: out->op = ncclMax; break;
    case HVD_MIN: out->op = ncclMin; break;
    case HVD_PRODUCT: out->op = boolean ? ncclMin : ncclProd; break;  // bool: logical and
    case HVD_AVERAGE:
      if (boolean)
        return Refuse(HVD_ERR_INVALID_ARGUMENT, std::string(what) + ": AVERAGE of dtype bool is refused");
      out->op = ncclAvg;
      break;
    case HVD_ADASUM:
      return Refuse(HVD_ERR_UNSUPPORTED,
                    std::string(what) + ": op ADASUM is not an NCCL reduction (the core computes Adasum)");
    default:
      return Refuse(HVD_ERR_INVALID_ARGUMENT,
                    std::string(what) + ": unknown op " + std::to_string(static_cast<int>(op)));
  }
  return HVD_OK;
}

int Allreduce(void* comm, const hvd_transport_buffer_t* buf, size_t count, hvd_dtype_t dtype,
              hvd_reduce_op_t op) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  Reduction red;
  if ((s = c->ReductionOf("allreduce", dtype, op, &red)) != HVD_OK) return s;
  if (count > SIZE_MAX / red.elem) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "allreduce: count too large");
  size_t bytes = count * red.elem;
  if ((s = c->CheckBuf("allreduce", "in-place", buf, bytes)) != HVD_OK) return s;
  if (count == 0) return HVD_OK;
  return c->Run("allreduce", bytes, {static_cast<cudaStream_t>(buf->stream)}, [&] {
    return ncclAllReduce(buf->data, buf->data, count, red.type, red.op, c->nccl, c->stream);
  });
}

int Allgatherv(void* comm, const hvd_transport_buffer_t* send, const hvd_transport_buffer_t* recv,
               const size_t* recv_bytes) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (recv_bytes == nullptr) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "allgatherv: recv_bytes is NULL");
  size_t total = 0;
  bool equal = true;
  for (int r = 0; r < c->size; ++r) {
    total += recv_bytes[r];
    equal = equal && recv_bytes[r] == recv_bytes[0];
  }
  if ((s = c->CheckBuf("allgatherv", "receive", recv, total)) != HVD_OK) return s;
  if ((s = c->CheckBuf("allgatherv", "send", send, recv_bytes[c->rank])) != HVD_OK) return s;
  if (total == 0) return HVD_OK;
  char* out = static_cast<char*>(recv->data);
  return c->Run("allgatherv", total,
                {static_cast<cudaStream_t>(send->stream), static_cast<cudaStream_t>(recv->stream)}, [&] {
                  if (equal)
                    return ncclAllGather(send->data, out, recv_bytes[0], ncclUint8, c->nccl, c->stream);
                  ncclResult_t r = ncclGroupStart();
                  size_t off = 0;
                  for (int p = 0; r == ncclSuccess && p < c->size; off += recv_bytes[p], ++p) {
                    if (recv_bytes[p] == 0) continue;
                    const void* from = p == c->rank ? send->data : out + off;
                    r = ncclBroadcast(from, out + off, recv_bytes[p], ncclUint8, p, c->nccl, c->stream);
                  }
                  ncclResult_t e = ncclGroupEnd();
                  return r != ncclSuccess ? r : e;
                });
}

int Broadcast(void* comm, const hvd_transport_buffer_t* buf, int32_t root) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (root < 0 || root >= c->size)
    return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "broadcast: root " + std::to_string(root) + " is not a rank");
  if ((s = c->CheckBuf("broadcast", "in-place", buf, buf != nullptr ? buf->bytes : 0)) != HVD_OK) return s;
  if (buf->bytes == 0) return HVD_OK;
  return c->Run("broadcast", buf->bytes, {static_cast<cudaStream_t>(buf->stream)}, [&] {
    return ncclBroadcast(buf->data, buf->data, buf->bytes, ncclUint8, root, c->nccl, c->stream);
  });
}

int Alltoallv(void* comm, const hvd_transport_buffer_t* send, const size_t* send_bytes,
              const hvd_transport_buffer_t* recv, const size_t* recv_bytes) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (send_bytes == nullptr || recv_bytes == nullptr)
    return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "alltoallv: send_bytes or recv_bytes is NULL");
  size_t stotal = 0, rtotal = 0;
  for (int r = 0; r < c->size; ++r) {
    stotal += send_bytes[r];
    rtotal += recv_bytes[r];
  }
  if (send_bytes[c->rank] != recv_bytes[c->rank])
    return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "alltoallv: this rank sends itself " +
                                                   std::to_string(send_bytes[c->rank]) +
                                                   " bytes but receives " +
                                                   std::to_string(recv_bytes[c->rank]));
  if ((s = c->CheckBuf("alltoallv", "send", send, stotal)) != HVD_OK) return s;
  if ((s = c->CheckBuf("alltoallv", "receive", recv, rtotal)) != HVD_OK) return s;
  if (stotal == 0 && rtotal == 0) return HVD_OK;
  const char* in = static_cast<const char*>(send->data);
  char* out = static_cast<char*>(recv->data);
  bool copy_failed = false;
  cudaError_t copy_err = cudaSuccess;
  s = c->Run("alltoallv", std::max(stotal, rtotal),
             {static_cast<cudaStream_t>(send->stream), static_cast<cudaStream_t>(recv->stream)}, [&] {
               size_t soff = 0, roff = 0;
               for (int p = 0; p < c->rank; ++p) {
                 soff += send_bytes[p];
                 roff += recv_bytes[p];
               }
               if (send_bytes[c->rank] > 0) {  // this rank's own block: a device copy
                 copy_err = cudaMemcpyAsync(out + roff, in + soff, send_bytes[c->rank],
                                            cudaMemcpyDeviceToDevice, c->stream);
                 if (copy_err != cudaSuccess) {
                   copy_failed = true;
                   return ncclInvalidUsage;
                 }
               }
               ncclResult_t r = ncclGroupStart();
               soff = roff = 0;
               for (int p = 0; r == ncclSuccess && p < c->size;
                    soff += send_bytes[p], roff += recv_bytes[p], ++p) {
                 if (p == c->rank) continue;
                 if (send_bytes[p] > 0)
                   r = ncclSend(in + soff, send_bytes[p], ncclUint8, p, c->nccl, c->stream);
                 if (r == ncclSuccess && recv_bytes[p] > 0)
                   r = ncclRecv(out + roff, recv_bytes[p], ncclUint8, p, c->nccl, c->stream);
               }
               ncclResult_t e = ncclGroupEnd();
               return r != ncclSuccess ? r : e;
             });
  if (copy_failed && s != HVD_OK && c->broken.load() == s)
    c->last_error = c->who + "alltoallv: copying this rank's own block: " + CudaErr(copy_err) +
                    "; the communicator is aborted";
  return s;
}

int Reducescatter(void* comm, const hvd_transport_buffer_t* buf, const size_t* counts,
                  hvd_dtype_t dtype, hvd_reduce_op_t op) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  if (counts == nullptr) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "reducescatter: counts is NULL");
  Reduction red;
  if ((s = c->ReductionOf("reducescatter", dtype, op, &red)) != HVD_OK) return s;
  size_t total = 0;
  bool equal = true;
  for (int r = 0; r < c->size; ++r) {
    total += counts[r];
    equal = equal && counts[r] == counts[0];
  }
  if (total > SIZE_MAX / red.elem) return c->Refuse(HVD_ERR_INVALID_ARGUMENT, "reducescatter: counts too large");
  if ((s = c->CheckBuf("reducescatter", "in-place", buf, total * red.elem)) != HVD_OK) return s;
  if (total == 0) return HVD_OK;
  char* data = static_cast<char*>(buf->data);
  return c->Run("reducescatter", total * red.elem, {static_cast<cudaStream_t>(buf->stream)}, [&] {
    if (equal)  // NCCL's in-place form: recvbuff = sendbuff + rank * recvcount
      return ncclReduceScatter(data, data + c->rank * counts[0] * red.elem, counts[0], red.type,
                               red.op, c->nccl, c->stream);
    ncclResult_t r = ncclGroupStart();
    size_t off = 0;
    for (int p = 0; r == ncclSuccess && p < c->size; off += counts[p], ++p) {
      if (counts[p] == 0) continue;
      char* block = data + off * red.elem;
      r = ncclReduce(block, block, counts[p], red.type, red.op, p, c->nccl, c->stream);
    }
    ncclResult_t e = ncclGroupEnd();
    return r != ncclSuccess ? r : e;
  });
}

int Barrier(void* comm) {
  Comm* c = static_cast<Comm*>(comm);
  int s = c->Enter();
  if (s != HVD_OK) return s;
  return c->Run("barrier", sizeof(int32_t), {}, [&] {
    return ncclAllReduce(c->scratch, c->scratch, 1, ncclInt32, ncclSum, c->nccl, c->stream);
  });
}

}  // namespace hvd_nccl_transport
