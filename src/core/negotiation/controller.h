// Negotiation: which named requests are ready on every rank, in one order
// that every rank computes identically.
//
// Every cycle each rank contributes to one small allreduce (MIN over bytes):
//   [0] 0 if this rank has requests the cache cannot describe (a full round follows)
//   [1] 0 if this rank is shutting down
//   [2] 0 if this rank asks for a stall report: a stall warning or shutdown
//       is due, or a request has waited kInspectAfterS (1 s; at most once a
//       second) — the report tells each rank which ranks its pending
//       requests wait for, which a handle's timeout message then names
//   [3] autotuning: rank 0's proposal (255 from every other rank; see autotune.h)
//   [4] 1 if this rank lets a small allreduce ride in the negotiation
//       (HVD_PIGGYBACK; the context's Negotiate, used once all ranks do)
//   [5 + s] 1 if this rank has a pending request that matches cache slot s
// A slot whose byte survives the MIN is ready everywhere: steady-state steps,
// where every request was seen before, cost this one allreduce and nothing
// else. Otherwise a full round allgathers each rank's new request
// descriptors; every rank applies the same messages in rank order to the same
// table and cache, so all ranks derive the same responses, the same cache
// slots and the same evictions without a coordinator.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/observability/logging.h"
#include "core/negotiation/message.h"
#include "core/loop/request.h"
#include "core/negotiation/response_cache.h"

namespace hvd {

using Clock = std::chrono::steady_clock;

// The two control-plane collectives negotiation needs.
class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual Status AllreduceMinU8(uint8_t* buf, size_t n) = 0;
  // all[r] = rank r's bytes.
  virtual Status AllgatherBytes(const std::vector<uint8_t>& mine,
                                std::vector<std::vector<uint8_t>>* all) = 0;
};

struct Response {
  // The request's key, from every rank's descriptor where there are some
  // (a cached response copies no name: a frontend's names are longer than
  // a std::string holds in place, so each copy was an allocation), else
  // own_key (an error response).
  const std::string& key() const { return all && !all->empty() ? (*all)[0].key : own_key; }
  std::string own_key;
  Status error;      // not ok: complete the request with this error
  RequestDescs all;  // every rank's descriptor (null for errors)
  // Rank r's descriptor (all must be set).
  const RequestDesc& desc(int r) const { return (*all)[static_cast<size_t>(r)]; }
  // Ranks that had joined (hvd_join) instead of submitting: they take part
  // with zeros of the same shape.
  std::vector<int> joined;
  int slot = -1;  // the cache slot a cached response came from (Controller::Take)
  // A join: the rank whose join completed it, the last to join (Horovod's
  // join() value; joins announced in one round count in rank order).
  int last_joined = -1;
};

struct StallConfig {
  double warning_s = 60;   // <= 0: off
  double shutdown_s = 300; // <= 0: off
};

class Controller {
 public:
  Controller(int rank, int size, int cache_capacity, StallConfig stall, Logger* log);

  // Takes a new local request (its key must not be pending).
  void Add(OpRequest&& req, Clock::time_point now);
  void Add(const OpRequest& req, Clock::time_point now) { Add(OpRequest(req), now); }

  // One negotiation cycle. Fills `out` with the responses, in the same order
  // on every rank, and sets *shutdown when any rank is shutting down.
  // = Contribute, cp->AllreduceMinU8 of those bytes, Conclude.
  Status Cycle(ControlPlane* cp, bool shutting_down, Clock::time_point now,
               std::vector<Response>* out, bool* shutdown);

  // The two halves of a cycle, for a caller that runs the MIN itself (the
  // loop packs the control bytes of a context and of its process sets into
  // one allreduce, where ranks outside a set contribute 0xFF, MIN's
  // identity). Contribute writes this rank's control_bytes(slots) bytes:
  // a header and one byte for each of the first `slots` cache slots (a
  // cached request in a later slot waits for a cycle with more); Conclude
  // reads their MIN over the ranks, with the same `slots`, and runs any
  // full round over cp (its AllgatherBytes only).
  //
  // The cache fills its lowest free slot first, and is the same on every
  // rank, so slot_extent() (the slots ever used, rounded up to
  // kExtentStep) is too: a negotiation need not carry the bytes of slots
  // never used (1,024 by default, where a training step uses a few
  // hundred and a small-operation loop a few).
  //
  // A set's extent is sent in its slot header, in kExtentSteps (16 bits of
  // them cover the largest cache). The context's is never sent, so it is
  // rounded finer (kRootExtentStep, set_extent_step): a loop of a few small
  // operations negotiates 13 bytes instead of 69, and every pass over them
  // (contribute, encode for the piggyback, decode, respond) is shorter.
  static constexpr size_t kHeaderBytes = 5;
  static constexpr size_t kExtentStep = 64;
  static constexpr size_t kRootExtentStep = 8;
  static size_t control_bytes(size_t slots) { return kHeaderBytes + slots; }
  size_t slot_extent() const;
  void set_extent_step(size_t step) { extent_step_ = step; }
  void Contribute(bool shutting_down, Clock::time_point now, uint8_t* ctrl, size_t slots);
  Status Conclude(ControlPlane* cp, const uint8_t* ctrl, size_t slots, Clock::time_point now,
                  std::vector<Response>* out, bool* shutdown);

  // The local request behind a response; false if this rank has none (e.g.
  // a stall error for a request this rank never made). A cached response's
  // request is found through its slot, without a lookup by name.
  bool Take(const Response& resp, OpRequest* req);

  // Removes and returns every pending request (shutdown, broken transport).
  std::vector<OpRequest> TakeAll();

  size_t pending() const { return pending_.size(); }
  // Byte 3 of the control vector: this rank's autotuning proposal for the
  // next cycle (255 = none), and what survived the MIN in the last one.
  void set_proposal(uint8_t p) { proposal_ = p; }
  uint8_t decided() const { return decided_; }
  // Byte 4: whether this rank lets a small allreduce ride in the
  // negotiation, and whether every rank did in the last cycle.
  void set_piggyback(bool on) { piggyback_ = on; }
  bool piggyback_agreed() const { return piggyback_agreed_; }
  // The pending request this rank marked ready for cache slot `slot` in the
  // last Contribute (null: none), until Take or the next Contribute.
  const OpRequest* Marked(int slot) const {
    if (slot < 0 || static_cast<size_t>(slot) >= slot_has_.size() ||
        slot_has_[static_cast<size_t>(slot)] == 0) {
      return nullptr;
    }
    return &slot_entry_[static_cast<size_t>(slot)]->req;
  }
  const ResponseCache& cache() const { return cache_; }
  uint64_t full_rounds() const { return full_rounds_; }
  uint64_t cycles() const { return tick_; }
  bool joined(int rank) const { return joined_[rank]; }

 private:
  enum class State { kNew, kCached, kAnnounced };
  struct Entry {
    OpRequest req;  // its descriptor is built only when announced in full
    State state = State::kNew;
    int slot = -1;
    Clock::time_point enqueued;
    size_t pos = 0;  // its index in pending_
    const std::string& key() const { return req.tensors.front().name; }
  };
  struct TableRow {
    std::vector<RequestDesc> descs;  // by rank
    std::vector<bool> have;
    int count = 0;
  };

  Status Validate(const std::vector<RequestDesc>& all) const;
  // The steps of Conclude, in order.
  void RespondCached(const uint8_t* ready, size_t slots, std::vector<Response>* out);
  Status FullRound(ControlPlane* cp, bool stall_round, bool want_warning, Clock::time_point now,
                   std::vector<Response>* out);
  RankMessage OwnMessage(bool stall_round, bool want_warning, Clock::time_point now);
  Status Exchange(ControlPlane* cp, const RankMessage& mine, std::vector<RankMessage>* msgs) const;
  std::vector<std::string> ApplyAnnouncements(std::vector<RankMessage>* msgs,
                                              std::vector<Response>* out);
  void NoteWaitingOn(const std::vector<std::string>& touched);
  void StallReport(const std::vector<RankMessage>& msgs, Clock::time_point now,
                   std::vector<Response>* out);
  Response Expire(const std::string& key, const std::vector<int>& ranks,
                  const std::vector<int>& missing);
  // Completes a table row if every rank either announced it or has joined.
  bool TryComplete(const std::string& key, std::vector<Response>* out);
  std::string RankList(const std::vector<int>& ranks) const;

  int rank_, size_;
  StallConfig stall_;
  Logger* log_;
  ResponseCache cache_;
  // This rank's own requests: iteration order is local only (announcements
  // are applied in the allgathered order, the same everywhere). A list, not
  // a map by name: a steady-state step finds each request through its cache
  // slot (slot_entry_), so only a full round or a stall report looks one up
  // by name, through by_key_, built then. Adding and taking thus hash no
  // name and copy no key (a frontend's names are longer than a std::string
  // holds in place). Entries are kept and reused (spare_): a fused step of
  // 1,000 tensors would otherwise allocate and free 1,000 every step.
  std::vector<std::unique_ptr<Entry>> pending_;
  std::vector<std::unique_ptr<Entry>> spare_;  // at most kMaxSpareEntries
  // Pending entries by key, valid while by_key_valid_ (Add clears it).
  std::unordered_map<std::string_view, Entry*> by_key_;
  bool by_key_valid_ = false;
  Entry* FindByKey(const std::string& key);
  std::unique_ptr<Entry> Remove(Entry* e);
  // This cycle's pending entry for each cache slot this rank marked ready
  // (Contribute -> Conclude -> Take; nothing is added to pending_ between
  // them, so the pointers stay valid); slot_has_[s] == 0: none.
  std::vector<Entry*> slot_entry_;
  std::vector<uint8_t> slot_has_;
  // By name id (TensorSpec::name_id): the cache slot the name was last
  // found in. Checked before use (ids are reused for other names).
  std::vector<int> slot_hint_;
  std::map<std::string, TableRow> table_;
  std::vector<bool> joined_;  // ranks whose join was announced, until all join
  int last_joined_ = -1;      // the latest of them
  std::vector<uint8_t> ctrl_;
  bool want_warning_ = false;  // Contribute -> Conclude
  uint8_t proposal_ = 255, decided_ = 255;
  bool piggyback_ = false, piggyback_agreed_ = false;
  size_t extent_step_ = kExtentStep;  // slot_extent's rounding
  uint64_t tick_ = 0;
  uint64_t full_rounds_ = 0;
  Clock::time_point last_stall_warning_;  // the last round that logged a stall warning
  Clock::time_point last_inspection_;     // the last stall round of any kind
};

}  // namespace hvd
