// The NCCL transport's native collectives, on the plugin's stream.
#include "comm.h"

namespace hvd_nccl_v4 {

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

}  // namespace hvd_nccl_v4
