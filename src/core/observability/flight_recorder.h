// The flight recorder: the last N operations of a rank (HVD_FLIGHT_RECORDER_SIZE,
// 0 = off), written as JSON on an error, a stall shutdown, SIGUSR1 or an
// API call (docs/flight-recorder.md). A fixed ring of records: each step
// is written by the thread that owns it, with no lock of its own (a submit
// and a completion under the context's queue lock, which they hold
// anyway; the negotiation and the start by the cycle's holder, as relaxed
// atomics), so a dump from any thread is a consistent copy taken under
// that lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/loop/request.h"

namespace hvd {

class FlightRecorder {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // What a dump says about the rank and its sets.
  struct Identity {
    int rank = 0, size = 1;
    std::string host, transport;
  };
  struct SetInfo {
    int id = -1;  // the set's slot, the same on every rank; -1: the context
    std::vector<int> members;
  };
  // The algorithm an operation of `bytes` ran, for the dump (the choice is
  // a function of the collective and the size; null: unknown).
  using AlgorithmOf = const char* (*)(const void* user, int set_id, OpType type, uint64_t bytes);

  // What the submit and the completion write (under the queue lock).
  struct Fields {
    std::string name;
    size_t tensors = 0;
    OpType type = OpType::kAllreduce;
    int reduce_op = 0, dtype = 0, set_id = -1;
    uint64_t bytes = 0, set_seq = 0;
    int64_t submitted = 0, finished = 0;  // steady ns; 0: not yet
    int status = 0;
    std::string error;
  };
  // A copy of one record, as a dump reads it.
  struct Entry : Fields {
    uint64_t seq = 0, unit_bytes = 0;
    int64_t negotiated = 0, started = 0;  // steady ns; 0: not yet
  };
  struct Snapshot {
    std::vector<Entry> entries;  // oldest first
    uint64_t recorded = 0;       // operations ever recorded
    std::vector<SetInfo> sets;
    Status first_failure;        // the context's stop reason (OK: none)
    int64_t failed_at = 0;       // steady ns
  };

  FlightRecorder() = default;
  // capacity 0: off (every call below is a test of one word).
  void Configure(size_t capacity, std::string dir, Identity id);
  bool on() const { return capacity_ != 0; }
  const std::string& dir() const { return dir_; }

  // Under the context's queue lock: a submit. Returns the record's sequence
  // number (0: off), which the request carries.
  // set_seq: its number among the submits on its set (ranks compare them).
  uint64_t Submitted(const OpRequest& req, int set_id, uint64_t set_seq);
  // The cycle's holder: the negotiation returned it; its unit started.
  void Negotiated(uint64_t seq, TimePoint t) {
    if (seq != 0) Stamp(seq, &Record::negotiated, t);
  }
  void Started(uint64_t seq, TimePoint t, uint64_t unit_bytes);
  // Under the context's queue lock: completed with s.
  void Finished(uint64_t seq, TimePoint t, const Status& s);
  // Under the queue lock: the context stopped (the first reason is kept).
  void Stopped(const Status& why, TimePoint t);

  // Under the queue lock: the records, oldest first.
  Snapshot Take() const;
  // Writes a snapshot as JSON to path (a temporary file renamed over it, so
  // a reader never sees half a file). reason: "error", "sigusr1", "api"...
  Status Write(const Snapshot& snap, const std::string& path, const char* reason,
               AlgorithmOf algorithm, const void* user) const;
  // The snapshot as the file's JSON text.
  std::string Json(const Snapshot& snap, const char* reason, AlgorithmOf algorithm,
                   const void* user) const;
  // <dir>/rank-<r>.json; "" where no folder is configured.
  std::string DefaultPath() const;

  // A dump the loop should write when it next can (any thread).
  void Want(const char* reason) {
    wanted_reason_.store(reason, std::memory_order_relaxed);
    wanted_.store(true, std::memory_order_release);
  }
  // Whether a dump is wanted (TakeWanted would return a reason).
  bool pending() const;
  // The reason of a dump wanted since the last call (a signal's included),
  // or null. The loop's thread.
  const char* TakeWanted();

  // SIGUSR1 asks every context of the process for a dump: installed at the
  // first context that records into a folder, where SIGUSR1 has no handler.
  static void InstallSignalHandler();

 private:
  // A record's tensor name: up to kInlineName bytes in place (a submit's
  // copy is a short memcpy), a longer one in `more`.
  static constexpr size_t kInlineName = 56;
  struct Record {
    std::atomic<uint64_t> seq{0};
    Fields f;  // name and bytes filled at Take (name_*, elements)
    uint32_t name_len = 0;
    char name_in[kInlineName];
    std::string more;
    // A one-tensor request's elements: its bytes are elements x the dtype's
    // size, computed at Take (0 with f.bytes set: a group's, summed at submit).
    int64_t elements = 0;
    // The cycle's holder's steps.
    std::atomic<int64_t> negotiated{0}, started{0};
    std::atomic<uint64_t> unit_bytes{0};
  };
  void AppendOp(std::string* out, const Entry& e, const char* algo,
                const std::vector<int>* members, int64_t offset) const;
  static int64_t Ns(TimePoint t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  Record* Find(uint64_t seq) {
    Record& r = ring_[(seq - 1) & mask_];
    return r.seq.load(std::memory_order_relaxed) == seq ? &r : nullptr;
  }
  void Stamp(uint64_t seq, std::atomic<int64_t> Record::*field, TimePoint t) {
    if (Record* r = Find(seq)) (r->*field).store(Ns(t), std::memory_order_relaxed);
  }

  size_t capacity_ = 0;
  size_t mask_ = 0;  // the ring holds the next power of two >= capacity_ (an index is a mask)
  std::string dir_;
  Identity id_;
  std::unique_ptr<Record[]> ring_;
  uint64_t next_ = 0;  // under the queue lock: records ever made
  Status first_failure_;
  int64_t failed_at_ = 0;
  std::atomic<bool> wanted_{false};
  std::atomic<const char*> wanted_reason_{nullptr};
  std::atomic<uint64_t> signals_seen_{0};  // SIGUSR1s already served
};

}  // namespace hvd
