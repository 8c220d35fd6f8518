// The fusion planner: groups a cycle's allreduces into batches (same dtype,
// op, scaling and device, at most the fusion threshold of bytes), keeping
// every other operation in response order as a unit of its own. All ranks
// hold the same responses, so all build the same units in the same order.
// Its storage is kept between cycles: a fused step of 1,000 tensors would
// otherwise allocate and free it every cycle. Background thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "core/loop/request.h"
#include "core/negotiation/controller.h"

namespace hvd {

// What the executor runs as one step: an allreduce batch, or one request.
struct FusionUnit {
  std::vector<OpRequest*> batch;  // allreduce batch
  OpRequest* single = nullptr;
  const Response* resp = nullptr;
  size_t bytes = 0;
};

class FusionPlanner {
 public:
  // Starts a cycle's plan: at most `threshold` bytes a batch (0: every
  // allreduce alone), in a scope of `size` ranks.
  void Begin(size_t threshold, int size);
  // An operation that runs alone (anything but an allreduce).
  void AddSingle(OpRequest* req, const Response* resp);
  // An allreduce: joins the open batch of its kind if it fits there, else
  // opens the kind's next batch.
  void AddAllreduce(OpRequest* req, const Response& resp);
  size_t size() const { return nunits_; }
  FusionUnit& operator[](size_t k) { return units_[k]; }

 private:
  struct OpenBatch {
    size_t unit;
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    double pre, post;
    const Response* devices;  // null: host tensors; else every rank's device as in it
  };
  FusionUnit& AddUnit();  // a fresh unit (reusing a kept one's batch capacity)
  bool SameDevices(const Response* a, const Response* b) const;

  std::vector<FusionUnit> units_;
  std::vector<OpenBatch> open_;
  size_t nunits_ = 0;
  size_t threshold_ = 0;
  int size_ = 1;
};

// The bytes of a request's tensors.
size_t RequestBytes(const OpRequest& req);

// A joined rank's stand-in for an allreduce it did not submit: zeros of the
// shape rank `rank` announced (their buffers kept in `zeros`), contributed
// to the reduction and the result thrown away. False where the response is
// no allreduce that `rank` joined.
bool MakeJoinedZeros(const Response& resp, int rank, Clock::time_point now,
                     std::deque<std::vector<uint8_t>>* zeros, OpRequest* out);

}  // namespace hvd
