// A small allreduce, broadcast or allgather riding in the negotiation
// (HVD_PIGGYBACK; the encoding is in control_wire.h). The plan is made from
// the context's responses, alike on every rank: the last small host
// allreduce that a cycle served alone, else the last such broadcast or
// allgather (neither takes the place of an allreduce plan the cache still
// holds: a step with a small allreduce and a small broadcast keeps the
// allreduce riding). While the
// cache holds it, no process set exists and every rank has the switch on,
// each negotiation carries this rank's part after the control bytes: an
// allreduce's prescaled tensor (zeros where it has none ready), a
// broadcast's bytes from its root (MIN's identity, 0xFF, from every other
// rank, and from a root with none ready: the negotiation then runs as a MIN
// over bytes, so the root's bytes come out exactly), an allgather's bytes of
// each rank at that rank's place in the gathered whole (0xFF everywhere
// else). Where the control bytes show the slot ready on every rank, that is
// its result and the cycle runs no second collective for it. A broadcast or
// allgather rides only while no rank has joined. Background thread only.
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
  // The planned operation: kAllreduce, kBroadcast or kAllgather.
  OpType type() const { return type_; }
  void clear_served() { served_ = -1; }
  const uint8_t* result() const { return buf_.data() + result_at_; }
  size_t result_bytes() const;
  // An allgather's rows, all ranks' together (the result's first dimension).
  int64_t gathered_rows() const { return rows_; }

 private:
  // Whether r (a cycle's only response) can be the plan; *count: the
  // elements it puts on the wire (a broadcast's or an allgather's: bytes).
  static bool Fits(const Response& r, int size, size_t* count);
  static size_t PartBytes(const RequestDesc& d);
  // This rank's bytes of an allgather's plan.
  size_t OwnBytes(int rank) const { return offsets_[rank + 1] - offsets_[rank]; }
  bool Replaces(const RequestDesc& d, const Controller& rc) const;

  int slot_ = -1;  // the plan; -1: none
  OpType type_ = OpType::kAllreduce;
  int32_t root_ = 0;                   // a broadcast's
  hvd_dtype_t tensor_dtype_ = HVD_FLOAT32;  // the tensor's (a broadcast's wire is bytes)
  int size_ = 0;
  // The cache entry it was made from: the plan holds while the slot holds
  // this entry (an eviction, or a request that changed under the same name
  // and was cached anew, puts another entry there and ends it).
  RequestDescs all_;
  hvd_dtype_t dtype_ = HVD_FLOAT32;
  hvd_reduce_op_t op_ = HVD_SUM;
  size_t count_ = 0;
  double prescale_ = 1;  // the postscale is the request's own (Executor::FinishPiggybacked)
  std::vector<size_t> offsets_;  // an allgather's: where each rank's bytes go (size + 1)
  int64_t rows_ = 0;              // an allgather's: its result's rows
  int served_ = -1;      // this cycle's: the slot whose result is in buf_
  size_t result_at_ = 0;  // where in buf_
  std::vector<uint8_t> buf_;
};

}  // namespace hvd
