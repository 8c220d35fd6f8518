// Shared-memory collectives between the ranks of one host. The core runs
// them over every transport (src/transport/), with an Exchange over the
// transport itself.
//
// The caller provides an Exchange (an allgather of strings) and calls Setup
// once at start. Setup agrees with every peer on whether the path is
// used (all ranks on this host, the plugin's switch on everywhere), and if so
// maps one POSIX shm segment: rank 0 creates it under a random name it sends
// round, the others open it, everyone reports ok or its failure, and any
// failure on any rank makes every rank keep its network path. From then on
// allreduce, reducescatter, broadcast, allgatherv and barrier can run over
// the Segment; every wait is bounded by the timeout, peers' pids are checked
// while blocked, and a failure returns an error Status (the transport then
// calls Segment::Abort so peers fail at once, and marks itself broken).
// Layout, rounds and measurements: src/algorithms/README.md.
#ifndef HVD_ALGORITHMS_SHM_H_
#define HVD_ALGORITHMS_SHM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/span.h"
#include "common/status.h"
#include "hvd_transport.h"

namespace hvd {
namespace shm {

// Errors: every call below that can fail returns a Status whose code is
// HVD_ERR_TIMEOUT or HVD_ERR_TRANSPORT (or an abort's status) and whose
// message starts with the operation, e.g. "allreduce (shm): ...". After a
// timeout, Segment::missing() names the ranks that did not arrive.

// What a plugin provides for Setup: an allgather of strings.
class Exchange {
 public:
  virtual ~Exchange() = default;
  // Fills *all with every rank's `mine`, in rank order. `round` names the
  // step: "host" (host identities), "name" (the segment's name: only rank 0's
  // string counts, the others pass "", so an implementation may send rank 0's
  // alone and leave the others empty), "ok" (ok or a failure reason), and
  // where every rank said ok, "cpus" (CpuList). Every rank calls the same
  // rounds in the same order. A failure ends Setup with it.
  virtual Status Allgather(const char* round, const std::string& mine,
                           std::vector<std::string>* all) = 0;
};

struct Options {
  const char* transport = "";    // log prefix: "gloo", "mpi"
  // The plugin's switch for this path, read by the plugin at init (this
  // file reads no settings itself): off on any rank keeps every rank off it.
  bool enabled = true;
  const char* switch_name = "";  // the setting that turned it off, for the log: "HVD_GLOO_SHM"
  const char* name_prefix = "";  // segment name prefix, e.g. "/hvd-gloo-"
  const char* fallback = "TCP";  // what runs instead, for the log: "TCP", "MPI"
  int rank = 0;
  int size = 1;
  // This rank's host identity (ranks with equal ones share the segment);
  // empty: HostIdentity().
  std::string identity;
  double timeout_s = 0;  // every wait; <= 0: no limit
  // Per-rank slot (a multiple of 4 KiB); smaller with many ranks so the
  // segment stays within 32 MiB (at least 256 KiB, or slot_bytes if smaller).
  size_t slot_bytes = size_t{1} << 20;
  // The one-barrier allreduce is used while bytes x (size - 1) stays within this.
  size_t small_fanout_bytes = size_t{256} << 10;
  // Waiting: spin this long (none where the ranks outnumber the CPUs they
  // may run on together: Setup's "cpus" round), then sched_yield until
  // yield_ns, then futex sleeps.
  int64_t spin_ns = 20 * 1000;
  int64_t yield_ns = 50 * 1000;
  std::function<void(int level, const std::string& msg)> log;
};

struct Header;
struct RankLine;

// A mapped segment and this rank's view of the barrier sequence.
class Segment {
 public:
  Segment(void* base, size_t bytes, const Options& o, size_t slot);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  static size_t DataOffset(int size);
  static size_t SegmentBytes(int size, size_t slot);

  Header* header() const;
  RankLine* line(int r) const;
  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot() const { return slot_; }
  size_t bytes() const { return bytes_; }
  // Largest buffer (bytes) the one-barrier allreduce takes.
  size_t small_max() const;
  static constexpr uint32_t kSetCount = 3;  // slot sets (layout.h: kSets)
  // Slot of rank r in set `set` (below kSets); the slots of one set are contiguous.
  uint8_t* Slot(uint32_t set, int r) const {
    return base_ + DataOffset(size_) + (static_cast<size_t>(set) * size_ + r) * slot_;
  }

  // Rounds. Every collective is a sequence of rounds, numbered alike on
  // every rank; round t writes slot set t % kSets (three sets). A rank
  // writes round t's set only after it has seen, from every peer, the
  // barrier of round t - 1 or the peer's written flag of round t - 1 (the
  // pipelined allreduce waits for it before its fold of round t - 1, and
  // for every reduced flag of the op's last round before it returns); a
  // peer gets there only after it has read round t - 3's set (its copy-out
  // of round t - 3 comes before its fold of round t - 2), so the set is free.
  // A round that a barrier separates (write; Barrier; read) takes its set
  // with NextRound; the pipelined allreduce takes its rounds with TakeRounds
  // and orders them with Signal / WaitFlag alone.
  uint32_t NextRound() { return round_++ % kSetCount; }
  // Takes n consecutive rounds; returns the first.
  uint32_t TakeRounds(uint32_t n) {
    const uint32_t t = round_;
    round_ += n;
    return t;
  }
  enum class Flag : uint8_t { kWritten, kReduced };
  // This rank's flag f becomes `value` (1 + a round): a release store,
  // waking peers asleep on it.
  void Signal(Flag f, uint32_t value);
  // Waits until peer's flag f (every peer's where peer < 0) reached value,
  // bounded and checked as Barrier's wait; acquire loads.
  Status WaitFlag(Flag f, uint32_t value, int peer, const char* what);
  // Whether peer's flag f reached value now (an acquire load; no wait).
  bool HasFlag(Flag f, uint32_t value, int peer) const {
    return Reached(peer, Need{1 + static_cast<int>(f), value, peer});
  }

  // Every rank enters, nobody leaves before all have entered. `what` names
  // the operation in error messages.
  Status Barrier(const char* what);
  // The ranks (the segment's indices) the last timed-out wait found missing.
  const std::vector<int>& missing() const { return missing_; }
  // Marks the communicator broken for every rank (the first caller's status
  // and message win) and wakes everyone asleep on it, this rank's other
  // threads included (any thread may call it: Transport::Abort does).
  void Abort(int code, const std::string& msg);
  // This rank has finalized: peers still waiting for it fail at once.
  void Depart();
  // How long a wait spins before it yields (ns; 0: it yields at once).
  // Setup sets 0 where the ranks outnumber the CPUs they may run on
  // together: a spinning rank would hold a CPU that a peer it waits for
  // needs (what Open MPI's mpi_yield_when_idle does when oversubscribed).
  void set_spin(int64_t ns) { spin_ns_ = ns; }
  int64_t spin() const { return spin_ns_; }
  // The limit of every wait from now on (seconds; <= 0: no limit).
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }
  // The peer timeout (seconds; <= 0: none): a wait in which a missing rank
  // has not arrived for this long, and is not itself blocked in a
  // point-to-point wait (NoteWait), fails naming it, whatever the limit.
  void set_silence(double seconds) { silence_s_ = seconds; }
  // How messages name the segment's ranks (index: the segment's rank), e.g.
  // "rank 3 (host h2)" where the segment serves a subset; unset or empty
  // entries read "rank <index>".
  void set_names(std::vector<std::string> names) { names_ = std::move(names); }
  std::string Name(int r) const;
  std::string NameList(const std::vector<int>& ranks) const;  // "ranks [1, 3]" or the names
  // Another rank's Abort of the segment (one this rank wrote does not
  // count): true with the aborting rank (the segment's index), its status
  // and message. For a rank about to blame a peer of its host: the peer may
  // have given up first, for a reason of its own that names the culprit.
  bool AbortedBy(int* by, int* code, std::string* msg) const;
  // This rank is blocked in a point-to-point wait on `peer` (a rank of the
  // caller's numbering; -1: no longer), so that a rank of the host that
  // times out on this one can say whom this one waits for. Two stores.
  void NoteWait(int peer);
  // That wait failed: the note stays (the cause of this rank's silence),
  // its length fixed.
  void NoteGaveUp();
  // Rank r's (the segment's index) NoteWait: whom it waits for and how
  // long it has; false if it is not waiting.
  bool WaitingOn(int r, int* peer, double* secs) const;
  // The process that answers for this rank: peers that find it dead fail
  // their waits. Setup sets it to the calling process.
  void set_owner(int32_t pid);
  // Tests only: called by a wait that found peers missing, after reading
  // their counters and before reading whether they left or died (the
  // window in which a peer can arrive and then leave).
  void set_check_hook(std::function<void()> hook) { check_hook_ = std::move(hook); }

 private:
  // What a wait waits for: word `word` of peer `peer`'s line (every
  // peer's where peer < 0) reached `value`.
  struct Need {
    int word;  // 0: seq, else 1 + Flag
    uint32_t value;
    int peer;
  };
  std::atomic<uint32_t>* Word(int j, int word) const;
  bool Reached(int j, const Need& n) const;
  std::vector<int> Missing(const Need& n) const;
  void WakeEveryone();
  Status CheckPeers(const Need& n, const char* what, bool check_pids);
  Status Wait(const Need& n, const char* what);
  Status Silent(const Need& n, const char* what);

  uint8_t* base_;
  size_t bytes_;
  int rank_;
  int size_;
  size_t slot_;
  double timeout_s_;
  double silence_s_ = 0;
  size_t small_fanout_;
  int64_t spin_ns_;
  int64_t yield_ns_;
  uint32_t gen_ = 0;  // barriers this rank has entered (same on every rank between ops)
  std::atomic<int> aborted_here_{0};  // Abort's status, set from any thread of this rank
  uint32_t round_ = 0;  // rounds this rank has begun (same on every rank between ops)
  std::vector<std::string> names_;  // set_names
  std::function<void()> check_hook_;  // set_check_hook
  std::vector<int> missing_;  // missing()
};

// An on/off switch's value: true unless it is 0, false, off or no (any
// case); NULL or "" (unset) is on.
bool SwitchOn(const char* value);

// Which kernel, /dev/shm and pid space this process lives in: boot id, host
// name, IPC and PID namespace inodes. Empty if unknown.
std::string HostIdentity();

// The CPUs the calling thread may run on, as indices: "0,1,5" (all online
// CPUs where the affinity cannot be read).
std::string CpuList();
// How many distinct CPUs the lists (CpuList's form) name together; entries
// that are not numbers are skipped.
size_t DistinctCpus(const std::vector<std::string>& lists);

// Agrees with every peer on whether the path is used and maps the segment if
// so (*out; null when not used, the reason logged). OK, or the exchange's
// failure (nothing mapped).
Status Setup(Exchange& ex, const Options& o, std::unique_ptr<Segment>* out);

// The collectives. Every rank runs the same sequence of rounds, chosen from
// the arguments alone.
//
// buf (count elements of es bytes) becomes the rank-ordered reduction
// s_0 op s_1 op ... op s_{size-1}, identical bits on every rank.
Status Allreduce(Segment& s, hvd_reduce_kernel_fn reduce, uint8_t* buf, size_t count, size_t es,
               hvd_dtype_t dtype, hvd_reduce_op_t op);
// The same over the concatenation of spans (counts in elements), read and
// written where they lie: a fused allreduce needs no fusion buffer.
Status AllreduceSpans(Segment& s, hvd_reduce_kernel_fn reduce, const hvd_transport_span_t* spans,
                    size_t nspans, size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op);
// In place over the caller's blocks: block k is elements [start[k],
// start[k + 1]) of base; this rank's block r becomes the rank-ordered
// reduction of every rank's block r (the same bits an allreduce gives); the
// rest of base is scratch (left as it was, except with more ranks than
// 64-byte columns fit in a slot, where the whole allreduce runs). One barrier
// per round; each rank reads only the pieces of its own block.
Status Reducescatter(Segment& s, hvd_reduce_kernel_fn reduce, uint8_t* base, const size_t* start,
                   size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op);
Status Broadcast(Segment& s, uint8_t* buf, size_t bytes, int root);
// out holds every rank's recv_bytes in rank order; send may already sit at
// this rank's place.
Status Allgatherv(Segment& s, const uint8_t* send, uint8_t* out, const size_t* recv_bytes);

// "[0, 2, 3]": rank lists in messages (every plugin names missing ranks so).
std::string JoinRanks(const std::vector<int>& ranks);

}  // namespace shm
}  // namespace hvd

#endif  // HVD_ALGORITHMS_SHM_H_
