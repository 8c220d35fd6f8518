// A small allreduce riding in the negotiation (HVD_PIGGYBACK; the encoding
// is in control_wire.h). The plan is made from the context's responses,
// alike on every rank: the last small host allreduce that a cycle served
// alone. While the cache holds it, no process set exists and every rank has
// the switch on, each negotiation carries this rank's prescaled tensor
// (zeros where it has none ready) after the control bytes; where those show
// the slot ready on every rank, the reduced tensor is its result and the
// cycle runs no second collective for it. Background thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/comm.h"
#include "core/negotiation/controller.h"

namespace hvd {

class Piggyback {
 public:
  // Whether this negotiation can carry the plan: the context's cache
  // (root_slots of it in this negotiation) still holds the planned entry,
  // no process set exists (sets_live false) and every rank has the switch on.
  bool Usable(const Controller& rc, size_t root_slots, bool sets_live) const;
  // The negotiation's allreduce over `comm` with the planned tensor after
  // the control bytes ctrl[0, head) and the ranks' own bytes ctrl[head,
  // head + owned) (an equal part each, in rank order), in the tensor's dtype
  // and op; ctrl then holds what a MIN over the ranks' bytes would have given.
  Status Allreduce(Comm& comm, const Controller& rc, uint8_t* ctrl, size_t head, size_t owned,
                   int rank, int size);
  // After a negotiation that carried the plan: where ctrl shows the slot
  // ready on every rank, its result is this cycle's to serve.
  void NoteReady(const uint8_t* ctrl);
  // The plan for the next negotiations, from this one's responses (the same
  // on every rank): a cycle that served one request alone, a small
  // allreduce of one host tensor in the cache, makes it the plan; any other
  // cycle keeps it.
  void Plan(const std::vector<Response>& rs, const Controller& rc, int size);

  // This cycle's: the cache slot whose reduced tensor is ready (-1: none).
  int served() const { return served_; }
  void clear_served() { served_ = -1; }
  const uint8_t* result() const { return buf_.data() + result_at_; }
  size_t result_bytes() const;

 private:
  int slot_ = -1;  // the plan; -1: none
  // The cache entry it was made from: the plan holds while the slot holds
  // this entry (an eviction, or a request that changed under the same name
  // and was cached anew, puts another entry there and ends it).
  RequestDescs all_;
  hvd_dtype_t dtype_ = HVD_FLOAT32;
  hvd_reduce_op_t op_ = HVD_SUM;
  size_t count_ = 0;
  double prescale_ = 1;  // the postscale is the request's own (Executor::FinishPiggybacked)
  int served_ = -1;      // this cycle's: the slot whose result is in buf_
  size_t result_at_ = 0;  // where in buf_
  std::vector<uint8_t> buf_;
};

}  // namespace hvd
