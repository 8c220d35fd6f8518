// The collectives the executor and the negotiation run over one
// communicator: a whole transport (Transport), or a process set over a
// transport's point-to-point (Transport::OpenSubset). Used by the loop
// thread only; a failure leaves the communicator (and the transport under
// it) broken.
#pragma once

#include <cstddef>

#include "algorithms/span.h"
#include "common/status.h"
#include "hvd.h"
#include "hvd_transport.h"

namespace hvd {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Status Allreduce(void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) = 0;
  virtual Status Allgatherv(const void* send, void* recv, const size_t* recv_bytes) = 0;
  virtual Status Broadcast(void* buf, size_t bytes, int root) = 0;
  virtual Status Alltoallv(const void* send, const size_t* send_bytes, void* recv,
                           const size_t* recv_bytes) = 0;
  virtual Status Barrier() = 0;
  // In place over sum(counts) elements; on return this rank's block holds its
  // reduction. HVD_ERR_UNSUPPORTED where !has_reducescatter().
  virtual Status Reducescatter(void* buf, const size_t* counts, hvd_dtype_t dtype,
                               hvd_reduce_op_t op) = 0;
  virtual bool has_reducescatter() const = 0;
  // In place over the concatenation of spans, as one allreduce of them
  // packed (the executor's fused batch without its fusion buffer); only
  // where allreduce_spans(bytes in all) says this communicator does it.
  virtual Status AllreduceSpans(const hvd_transport_span_t* spans, size_t nspans,
                                hvd_dtype_t dtype, hvd_reduce_op_t op) = 0;
  virtual bool allreduce_spans(size_t bytes) const = 0;
  // CUDA device memory handed to the transport as it lies, without staging
  // through host memory: only where device_memory() (a plugin with
  // HVD_TRANSPORT_CAP_CUDA_MEMORY whose every collective is native).
  // buf describes the memory (HVD_MEMORY_CUDA, device, stream); the call
  // returns once the plugin returns (the caller then waits on the stream).
  virtual bool device_memory() const { return false; }
  // DeviceAllreduce also takes HVD_AVERAGE for floating dtypes
  // (HVD_TRANSPORT_CAP_AVERAGE).
  virtual bool device_average() const { return false; }
  // Whether the device path reduces dtype d (hvd_transport_t.reduce_dtypes).
  virtual bool device_reduces(hvd_dtype_t d) const {
    (void)d;
    return true;
  }
  virtual Status DeviceAllreduce(const hvd_transport_buffer_t& buf, size_t count,
                                 hvd_dtype_t dtype, hvd_reduce_op_t op) {
    (void)buf, (void)count, (void)dtype, (void)op;
    return Status(HVD_ERR_UNSUPPORTED, "this communicator takes host memory only");
  }
  virtual Status DeviceBroadcast(const hvd_transport_buffer_t& buf, int root) {
    (void)buf, (void)root;
    return Status(HVD_ERR_UNSUPPORTED, "this communicator takes host memory only");
  }
  // As Allgatherv, Alltoallv and Reducescatter, over CUDA buffers (each
  // describes its memory; the byte and element counts are the host forms').
  virtual Status DeviceAllgatherv(const hvd_transport_buffer_t& send,
                                  const hvd_transport_buffer_t& recv, const size_t* recv_bytes) {
    (void)send, (void)recv, (void)recv_bytes;
    return Status(HVD_ERR_UNSUPPORTED, "this communicator takes host memory only");
  }
  virtual Status DeviceAlltoallv(const hvd_transport_buffer_t& send, const size_t* send_bytes,
                                 const hvd_transport_buffer_t& recv, const size_t* recv_bytes) {
    (void)send, (void)send_bytes, (void)recv, (void)recv_bytes;
    return Status(HVD_ERR_UNSUPPORTED, "this communicator takes host memory only");
  }
  virtual Status DeviceReducescatter(const hvd_transport_buffer_t& buf, const size_t* counts,
                                     hvd_dtype_t dtype, hvd_reduce_op_t op) {
    (void)buf, (void)counts, (void)dtype, (void)op;
    return Status(HVD_ERR_UNSUPPORTED, "this communicator takes host memory only");
  }
};

}  // namespace hvd
