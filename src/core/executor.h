// The executor: runs one negotiated unit (a fused allreduce batch, or one
// operation) over the transport and returns its status. It never completes
// handles (the loop does, from the status) and never negotiates: it sees
// only what the loop hands it. Owns the memory the runs reuse: the fusion
// buffer, the spans of an in-place fused batch, the pool results come from.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "core/controller.h"
#include "core/fusion_buffer.h"
#include "core/request.h"
#include "core/timeline.h"
#include "core/comm.h"

namespace hvd {

class Executor {
 public:
  Executor(Comm* comm, Timeline* timeline, size_t pool_bytes)
      : transport_(comm), timeline_(timeline), rank_(comm->rank()), size_(comm->size()),
        results_(std::make_shared<BufferPool>(pool_bytes)) {}

  // The communicator the next runs use: the context's, or one of its
  // process sets' (which share this executor's buffers: one loop thread
  // runs them all, one at a time).
  void Use(Comm* comm) {
    transport_ = comm;
    rank_ = comm->rank();
    size_ = comm->size();
  }

  // A fused allreduce: every request has the same dtype, op and scale
  // factors (the loop's bucketing guarantees it).
  // HVD_ADASUM batches run tensor by tensor (RunAdasumBatch).
  Status RunAllreduceBatch(std::vector<OpRequest*>& batch);
  // One operation as the negotiated response describes it.
  Status RunOne(OpRequest& req, const Response& resp);

  FusionBuffer& fusion() { return fusion_; }
  const FusionBuffer& fusion() const { return fusion_; }
  const BufferPool& results() const { return *results_; }

 private:
  Status TakeOutput(Handle* h, size_t bytes);
  Status RunAdasumBatch(std::vector<OpRequest*>& batch);

  Comm* transport_;
  Timeline* timeline_;
  int rank_;
  int size_;
  FusionBuffer fusion_;
  std::vector<hvd_transport_span_t> spans_;  // a fused batch's outputs (in-place transports)
  // Buffers recycled between operations: results of released handles
  // (allgather, alltoall, reducescatter) and reducescatter's scratch.
  std::shared_ptr<BufferPool> results_;
};

}  // namespace hvd
