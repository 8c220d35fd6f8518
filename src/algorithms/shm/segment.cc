// Shared-memory collectives between the ranks of one host; see shm.h and
// src/algorithms/README.md. One POSIX shm segment per communicator:
//
//   [Header][RankLine x size][pad to 4 KiB][2 sets x size slots of slot bytes]
//
// Synchronisation is one counter per rank (`seq`, the number of barriers the
// rank has entered); a barrier is "bump mine, wait until every peer's counter
// reached mine". Waiting spins briefly, then yields, then sleeps on the
// peer's counter with a cross-process futex in bounded slices, checking the
// timeout, the abort word, departed peers and peer pids between slices.
#include "algorithms/shm/shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

#include "common/kernels.h"

namespace hvd {
namespace shm {

using Clock = std::chrono::steady_clock;

constexpr size_t kMinSlotBytes = 256 * 1024;
constexpr size_t kSegmentBudget = 32u << 20;
constexpr uint64_t kMagic = 0x31306d6873647668ull;  // "hvdshm01"
constexpr int64_t kSliceNs = 20 * 1000 * 1000;      // longest single futex sleep
constexpr int64_t kPidCheckNs = 100 * 1000 * 1000;
constexpr uint32_t kAbortClaimed = 0xFFFFFFFFu;

static_assert(std::atomic<uint32_t>::is_always_lock_free, "shm sync needs lock-free atomics");

struct alignas(128) Header {
  uint64_t magic;
  uint64_t slot_bytes;
  uint32_t size;
  // 0; kAbortClaimed while the first failing rank writes its reason; then
  // 1 + that rank.
  std::atomic<uint32_t> abort_by;
  int32_t abort_code;
  char abort_msg[1024];
};

// One line per rank, apart from its neighbours' (no false sharing).
struct alignas(128) RankLine {
  std::atomic<uint32_t> seq;       // barriers entered (written by the owner only)
  std::atomic<uint32_t> waiters;   // peers asleep on seq (futex)
  std::atomic<uint32_t> departed;  // the owner finalized
  std::atomic<int32_t> pid;
  // 1 + the peer (the owner's transport rank) of the point-to-point wait
  // the owner is blocked in (or gave up in: it stays), 0 if none; since when (CLOCK_MONOTONIC ns,
  // one clock for the host's processes). Segment::NoteWait.
  std::atomic<int32_t> waiting_on;
  std::atomic<int64_t> waiting_since_ns;
  std::atomic<int64_t> waiting_until_ns;  // when that wait failed; 0 while it lasts
};
static_assert(sizeof(RankLine) == 128, "a rank's line is one 128-byte block");

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

uint32_t* FutexWord(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
void FutexWait(std::atomic<uint32_t>* a, uint32_t expected, int64_t ns) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  (void)syscall(SYS_futex, FutexWord(a), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* a) {
  (void)syscall(SYS_futex, FutexWord(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

int64_t NsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

// True if pid is gone (or a zombie nobody reaped yet).
bool PidIsDead(int32_t pid) {
  if (pid <= 0 || pid == getpid()) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  std::ifstream f(path);
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

bool Query(const Segment* s, const char* key, int64_t* value) {
  if (std::strcmp(key, "shm") == 0) {
    *value = s != nullptr ? 1 : 0;
  } else if (std::strcmp(key, "shm_slot_bytes") == 0) {
    *value = s != nullptr ? static_cast<int64_t>(s->slot()) : 0;
  } else if (std::strcmp(key, "shm_small_bytes") == 0) {
    *value = s != nullptr ? static_cast<int64_t>(s->small_max()) : 0;
  } else if (std::strcmp(key, "allreduce_spans") == 0) {
    *value = s != nullptr ? 1 : 0;
  } else {
    return false;
  }
  return true;
}

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

// ---------------------------------------------------------------------------
// Segment.

namespace {
// The CPUs this process may run on.
int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}
}  // namespace

// More ranks on the host than CPUs to run them: a waiting rank spinning
// holds a CPU that a peer it waits for needs, so it yields at once (what
// Open MPI's mpi_yield_when_idle does when oversubscribed).
Segment::Segment(void* base, size_t bytes, const Options& o, size_t slot)
    : base_(static_cast<uint8_t*>(base)), bytes_(bytes), rank_(o.rank), size_(o.size),
      slot_(slot), timeout_s_(o.timeout_s), small_fanout_(o.small_fanout_bytes),
      spin_ns_(o.size > UsableCpus() ? 0 : o.spin_ns), yield_ns_(o.yield_ns) {}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

size_t Segment::DataOffset(int size) {
  const size_t ctl = sizeof(Header) + static_cast<size_t>(size) * sizeof(RankLine);
  return (ctl + 4095) / 4096 * 4096;
}

size_t Segment::SegmentBytes(int size, size_t slot) {
  return DataOffset(size) + 2 * static_cast<size_t>(size) * slot;
}

Header* Segment::header() const { return reinterpret_cast<Header*>(base_); }

RankLine* Segment::line(int r) const {
  return reinterpret_cast<RankLine*>(base_ + sizeof(Header)) + r;
}

size_t Segment::small_max() const {
  return std::min(slot_, small_fanout_ / static_cast<size_t>(std::max(1, size_ - 1)));
}

void Segment::Barrier(const char* what) {
  const uint32_t g = ++gen_;
  RankLine* me = line(rank_);
  me->seq.store(g, std::memory_order_seq_cst);
  if (me->waiters.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&me->seq);
  WaitAll(g, what);
}

void Segment::Abort(int code, const std::string& msg) {
  aborted_here_.store(code != 0 ? code : HVD_ERR_ABORTED, std::memory_order_release);
  Header* h = header();
  uint32_t zero = 0;
  if (h->abort_by.compare_exchange_strong(zero, kAbortClaimed)) {
    h->abort_code = code;
    const size_t n = std::min(msg.size(), sizeof(h->abort_msg) - 1);
    std::memcpy(h->abort_msg, msg.data(), n);
    h->abort_msg[n] = '\0';
    h->abort_by.store(static_cast<uint32_t>(rank_) + 1, std::memory_order_release);
  }
  WakeEveryone();
}

namespace {
int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

void Segment::NoteWait(int peer) {
  RankLine* me = line(rank_);
  if (peer < 0) {
    me->waiting_on.store(0, std::memory_order_relaxed);
    return;
  }
  me->waiting_until_ns.store(0, std::memory_order_relaxed);
  me->waiting_since_ns.store(MonotonicNs(), std::memory_order_relaxed);
  me->waiting_on.store(peer + 1, std::memory_order_release);
}

void Segment::NoteGaveUp() {
  RankLine* me = line(rank_);
  if (me->waiting_on.load(std::memory_order_relaxed) > 0) {
    me->waiting_until_ns.store(MonotonicNs(), std::memory_order_release);
  }
}

bool Segment::WaitingOn(int r, int* peer, double* secs) const {
  const RankLine* l = line(r);
  const int32_t on = l->waiting_on.load(std::memory_order_acquire);
  if (on <= 0) return false;
  *peer = on - 1;
  const int64_t until = l->waiting_until_ns.load(std::memory_order_acquire);
  *secs = static_cast<double>((until != 0 ? until : MonotonicNs()) -
                              l->waiting_since_ns.load(std::memory_order_relaxed)) / 1e9;
  return true;
}

std::string Segment::Name(int r) const {
  if (r >= 0 && static_cast<size_t>(r) < names_.size() && !names_[static_cast<size_t>(r)].empty()) {
    return names_[static_cast<size_t>(r)];
  }
  return "rank " + std::to_string(r);
}

// "rank 1 (pid 42)", or "rank 1 (host h, pid 42)" for a named rank.
static std::string WithPid(const std::string& name, int32_t pid) {
  const std::string p = "pid " + std::to_string(pid);
  if (!name.empty() && name.back() == ')') return name.substr(0, name.size() - 1) + ", " + p + ")";
  return name + " (" + p + ")";
}

std::string Segment::NameList(const std::vector<int>& ranks) const {
  if (names_.empty()) return "ranks " + JoinRanks(ranks);
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + Name(r);
  return s;
}

bool Segment::AbortedBy(int* by, int* code, std::string* msg) const {
  const Header* h = header();
  const uint32_t ab = h->abort_by.load(std::memory_order_acquire);
  if (ab == 0 || ab == kAbortClaimed || ab == static_cast<uint32_t>(rank_) + 1) return false;
  *by = static_cast<int>(ab) - 1;
  *code = h->abort_code;
  msg->assign(h->abort_msg, strnlen(h->abort_msg, sizeof(h->abort_msg)));
  return true;
}

void Segment::Depart() {
  line(rank_)->departed.store(1, std::memory_order_seq_cst);
  WakeEveryone();
}

void Segment::set_owner(int32_t pid) { line(rank_)->pid.store(pid, std::memory_order_relaxed); }

bool Segment::Reached(int j, uint32_t g) const {
  return static_cast<int32_t>(line(j)->seq.load(std::memory_order_acquire) - g) >= 0;
}

std::vector<int> Segment::Missing(uint32_t g) const {
  std::vector<int> m;
  for (int j = 0; j < size_; ++j) {
    if (j != rank_ && !Reached(j, g)) m.push_back(j);
  }
  return m;
}

void Segment::WakeEveryone() {
  for (int j = 0; j < size_; ++j) FutexWakeAll(&line(j)->seq);
}

// Throws if the wait can never succeed: someone broke the communicator, a
// missing peer finalized or died.
void Segment::CheckPeers(uint32_t g, const char* what, bool check_pids) {
  const Header* h = header();
  // Aborted by this rank (another thread of it, while this one waits).
  if (const int code = aborted_here_.load(std::memory_order_acquire)) {
    throw Error(code, std::string(what) + " (shm): " + Name(rank_) + ": aborted on this rank");
  }
  // Another rank's abort: its reason (which names the culprit) is the error.
  auto throw_if_aborted = [&] {
    const uint32_t ab = h->abort_by.load(std::memory_order_acquire);
    if (ab != 0 && ab != kAbortClaimed && ab != static_cast<uint32_t>(rank_) + 1) {
      std::string why(h->abort_msg, strnlen(h->abort_msg, sizeof(h->abort_msg)));
      throw Error(h->abort_code == HVD_ERR_TIMEOUT ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT,
                  std::string(what) + " (shm): " + Name(rank_) + ": " +
                      Name(static_cast<int>(ab) - 1) + " broke the communicator: " + why);
    }
  };
  throw_if_aborted();
  // A peer read as missing may arrive, finish the operation and leave (or
  // exit) before its flag is read below: each verdict is checked against a
  // fresh read of its counter, made after the flag. Its counter was
  // published before the flag (Depart's store, or the process's exit), so a
  // peer that left after arriving reads as arrived there. Likewise a peer
  // that failed, aborted the segment and then left (or exited) in that
  // window: its abort was written before it left, so it is read again
  // before the peer is blamed, and its reason wins.
  const std::vector<int> missing = Missing(g);
  if (check_hook_) check_hook_();
  for (int j : missing) {
    if (line(j)->departed.load(std::memory_order_acquire) != 0) {
      if (Reached(j, g)) continue;
      throw_if_aborted();
      throw Error(HVD_ERR_TRANSPORT, std::string(what) + " (shm): " + Name(rank_) + ": " + Name(j) +
                                         " has finalized (left the job)");
    }
    if (check_pids) {
      const int32_t pid = line(j)->pid.load(std::memory_order_relaxed);
      if (PidIsDead(pid) && !Reached(j, g)) {
        throw_if_aborted();
        throw Error(HVD_ERR_TRANSPORT, std::string(what) + " (shm): " + Name(rank_) + ": " + WithPid(Name(j), pid) + " died");
      }
    }
  }
}

void Segment::WaitAll(uint32_t g, const char* what) {
  int next = 0;  // ranks below next are known to have arrived
  auto all_here = [&] {
    while (next < size_ && (next == rank_ || Reached(next, g))) ++next;
    return next == size_;
  };
  if (all_here()) return;
  const auto t0 = Clock::now();
  for (uint32_t i = 1;; ++i) {
    CpuRelax();
    if (all_here()) return;
    if ((i & 63) == 0 && NsSince(t0) > spin_ns_) break;
  }
  while (NsSince(t0) < yield_ns_) {
    sched_yield();
    if (all_here()) return;
  }
  const bool limited = timeout_s_ > 0 && timeout_s_ < 3.0e7;
  const int64_t limit_ns = limited ? static_cast<int64_t>(timeout_s_ * 1e9) : 0;
  int64_t last_pid_check = -kPidCheckNs;
  for (;;) {
    const int64_t now = NsSince(t0);
    const bool pids = now - last_pid_check >= kPidCheckNs;
    if (pids) last_pid_check = now;
    if (all_here()) return;  // before the checks: a peer may have arrived, then left
    CheckPeers(g, what, pids);
    if (limited && now >= limit_ns) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s_);
      std::vector<int> missing = Missing(g);
      throw Error(HVD_ERR_TIMEOUT,
                  std::string(what) + " (shm): " + Name(rank_) + ": " + NameList(missing) +
                      " did not arrive within " + secs + " s",
                  missing);
    }
    int64_t slice = kSliceNs;
    if (limited) slice = std::min(slice, std::max<int64_t>(limit_ns - now, 1000));
    slice = std::min(slice, std::max<int64_t>(kPidCheckNs - (now - last_pid_check), 1000));
    RankLine* l = line(next);
    l->waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = l->seq.load(std::memory_order_seq_cst);
    if (static_cast<int32_t>(v - g) < 0) FutexWait(&l->seq, v, slice);
    l->waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (all_here()) return;
  }
}

// ---------------------------------------------------------------------------
// Collectives. Every rank runs the same sequence of rounds (chosen from the
// arguments alone), each writing one slot set (see Segment::NextSet), so the
// barrier counters and sets agree on every rank.

namespace {

// Sub-range [*b, return) of m elements owned by rank k in the chunked
// allreduce; boundaries are multiples of 64 bytes.
size_t Part(size_t m, int n, int k, size_t es, size_t* b) {
  const size_t g = 64 / es;
  const size_t per = ((m + n - 1) / n + g - 1) / g * g;
  *b = std::min(m, static_cast<size_t>(k) * per);
  return std::min(m, *b + per);
}

// True if a op b == b op a bit for bit, so rank 1 may start from its own
// contribution: integer ops, SUM and PRODUCT (IEEE + and * commute; the
// half-precision kernels round the same float either way). Not float
// MIN/MAX, which pick between +0 and -0 by operand order.
bool Commutes(hvd_dtype_t dtype, hvd_reduce_op_t op) {
  return !IsFloatingDtype(dtype) || op == HVD_SUM || op == HVD_PRODUCT;
}

// dst (this rank's own contribution, count elements of slot column `off`)
// becomes s_0 op s_1 op ... op s_{n-1}, in rank order, where s_k is rank k's
// contribution at byte offset off of its slot in `set` (this rank's own
// comes from dst, not from its slot). Uses `scratch` (this rank's slot at
// off, not read by anyone during the reduction) when the order has to be
// rebuilt; returns where the result is: dst or scratch.
uint8_t* ReduceColumn(Segment& s, hvd_reduce_kernel_fn reduce, uint32_t set, size_t off,
                      uint8_t* dst, uint8_t* scratch, size_t count, size_t es, hvd_dtype_t dtype,
                      hvd_reduce_op_t op) {
  const int n = s.size();
  const int r = s.rank();
  if (r == 0 || (r == 1 && Commutes(dtype, op))) {
    // dst holds s_r; r == 0: s_0 op s_1 ...; r == 1: s_1 op s_0 == s_0 op s_1.
    for (int k = 0; k < n; ++k) {
      if (k != r) reduce(dst, s.Slot(set, k) + off, count, dtype, op);
    }
    return dst;
  }
  std::memcpy(scratch, s.Slot(set, 0) + off, count * es);
  for (int k = 1; k < n; ++k) {
    reduce(scratch, k == r ? dst : s.Slot(set, k) + off, count, dtype, op);
  }
  return scratch;
}

}  // namespace

namespace {

// Checks the spans and sums their counts; false with *why set when bad.
bool SpansTotal(const hvd_transport_span_t* spans, size_t nspans, size_t es, size_t* total,
                std::string* why) {
  *total = 0;
  if (spans == nullptr && nspans > 0) {
    *why = "NULL span list";
    return false;
  }
  for (size_t i = 0; i < nspans; ++i) {
    if (spans[i].data == nullptr && spans[i].count > 0) {
      *why = "span " + std::to_string(i) + " has a NULL buffer";
      return false;
    }
    if (spans[i].count > SIZE_MAX / es - *total) {
      *why = "byte count overflows size_t";
      return false;
    }
    *total += spans[i].count;
  }
  return true;
}

// The spans of an allreduce as one sequence of elements.
class SpanList {
 public:
  SpanList(const hvd_transport_span_t* spans, size_t nspans, size_t es)
      : spans_(spans), es_(es), start_(nspans + 1, 0) {
    for (size_t i = 0; i < nspans; ++i) start_[i + 1] = start_[i] + spans[i].count;
  }
  size_t count() const { return start_.back(); }
  // f(ptr, rel, len) for each piece of elements [b, e) that lies in one span:
  // ptr is the piece in its span, rel its first element's offset from b, len
  // its length in elements; pieces come in order.
  template <class F>
  void ForEach(size_t b, size_t e, F&& f) const {
    if (b >= e) return;
    size_t i = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), b) -
                                   start_.begin()) - 1;
    for (size_t pos = b; pos < e; ++i) {
      if (start_[i + 1] <= pos) continue;  // an empty span
      const size_t len = std::min(e, start_[i + 1]) - pos;
      f(static_cast<uint8_t*>(spans_[i].data) + (pos - start_[i]) * es_, pos - b, len);
      pos += len;
    }
  }
  // Copies elements [b, e) into dst, or dst into them.
  void Gather(size_t b, size_t e, uint8_t* dst) const {
    ForEach(b, e, [&](uint8_t* p, size_t rel, size_t len) { std::memcpy(dst + rel * es_, p, len * es_); });
  }
  void Scatter(size_t b, size_t e, const uint8_t* src) const {
    ForEach(b, e, [&](uint8_t* p, size_t rel, size_t len) { std::memcpy(p, src + rel * es_, len * es_); });
  }

 private:
  const hvd_transport_span_t* spans_;
  size_t es_;
  std::vector<size_t> start_;  // element offset of each span; the total last
};

}  // namespace

void Allreduce(Segment& s, hvd_reduce_kernel_fn reduce, uint8_t* buf, size_t count, size_t es,
               hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const hvd_transport_span_t one = {buf, count};
  AllreduceSpans(s, reduce, &one, 1, es, dtype, op);
}

void AllreduceSpans(Segment& s, hvd_reduce_kernel_fn reduce, const hvd_transport_span_t* spans,
                    size_t nspans, size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const int n = s.size();
  const int r = s.rank();
  const SpanList list(spans, nspans, es);
  const size_t count = list.count();
  if (count == 0) return;
  const size_t bytes = count * es;
  if (bytes <= s.small_max()) {
    // One barrier: publish, then every rank reduces all contributions itself
    // in rank order (identical bits everywhere).
    const uint32_t set = s.NextSet();
    list.Gather(0, count, s.Slot(set, r));
    s.Barrier("allreduce");
    const bool own_first = r == 0 || (r == 1 && Commutes(dtype, op));
    list.ForEach(0, count, [&](uint8_t* p, size_t rel, size_t len) {
      if (own_first) {
        ReduceColumn(s, reduce, set, rel * es, p, nullptr, len, es, dtype, op);
      } else {
        // Peers read this rank's slot meanwhile: no scratch; start from s_0.
        std::memcpy(p, s.Slot(set, 0) + rel * es, len * es);
        for (int k = 1; k < n; ++k) reduce(p, s.Slot(set, k) + rel * es, len, dtype, op);
      }
    });
    return;
  }
  // Chunks of one slot per rank. Each chunk is cut into one part per rank;
  // rank k reduces part k. Publish every part but one's own (only this rank
  // reads its own part); barrier; reduce the own part in rank order and
  // publish the result in the own slot; barrier; copy the other parts out.
  // The caller's spans are read and written in place: no packing.
  const size_t chunk = s.slot() / es;
  for (size_t done = 0; done < count; done += chunk) {
    const size_t m = std::min(chunk, count - done);
    const uint32_t set = s.NextSet();
    uint8_t* mine = s.Slot(set, r);
    size_t b = 0;
    const size_t e = Part(m, n, r, es, &b);
    list.Gather(done, done + b, mine);
    list.Gather(done + e, done + m, mine + e * es);
    s.Barrier("allreduce");
    list.ForEach(done + b, done + e, [&](uint8_t* p, size_t rel, size_t len) {
      const size_t off = (b + rel) * es;
      uint8_t* res = ReduceColumn(s, reduce, set, off, p, mine + off, len, es, dtype, op);
      if (res == p) {
        std::memcpy(mine + off, res, len * es);  // publish
      } else {
        std::memcpy(p, res, len * es);
      }
    });
    s.Barrier("allreduce");
    for (int k = 0; k < n; ++k) {
      if (k == r) continue;
      size_t kb = 0;
      const size_t ke = Part(m, n, k, es, &kb);
      if (ke > kb) list.Scatter(done + kb, done + ke, s.Slot(set, k) + kb * es);
    }
  }
}

int AllreduceSpansEntry(Segment* s, hvd_reduce_kernel_fn reduce, int size, const char* who,
                        const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                        hvd_reduce_op_t op, const std::function<int(void*, size_t)>& single,
                        std::string* err) {
  const std::string what = std::string(who) + " allreduce_spans: ";
  const size_t es = DtypeSize(dtype);
  if (es == 0) {
    *err = what + "invalid dtype " + std::to_string(static_cast<int>(dtype));
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (op != HVD_SUM && op != HVD_MIN && op != HVD_MAX && op != HVD_PRODUCT) {
    *err = what + "unsupported op " + ReduceOpName(op) + " (the core turns AVERAGE into SUM)";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  size_t total = 0;
  std::string why;
  if (!SpansTotal(spans, nspans, es, &total, &why)) {
    *err = what + why;
    return HVD_ERR_INVALID_ARGUMENT;
  }
  if (total == 0 || size == 1) return HVD_OK;
  if (s != nullptr) {
    AllreduceSpans(*s, reduce, spans, nspans, es, dtype, op);
    return HVD_OK;
  }
  size_t used = 0, last = 0;
  for (size_t i = 0; i < nspans; ++i) {
    if (spans[i].count > 0) {
      ++used;
      last = i;
    }
  }
  if (used == 1) return single(spans[last].data, spans[last].count);
  *err = what + "several spans need the shared-memory path, which is off (query allreduce_spans "
                "answers 0: pack them and call allreduce)";
  return HVD_ERR_UNSUPPORTED;
}

// Each slot is cut into one column per rank (64-byte multiples). Round t:
// every rank writes piece t of every other rank's block into that rank's
// column of its own slot; barrier; each rank reduces piece t of its own block
// over all columns addressed to it, in rank order (its own column of its own
// slot, written by nobody, is the scratch). One barrier per round.
void Reducescatter(Segment& s, hvd_reduce_kernel_fn reduce, uint8_t* base, const size_t* start,
                   size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const int n = s.size();
  const int r = s.rank();
  const size_t col_bytes = s.slot() / static_cast<size_t>(n) / 64 * 64;
  const size_t piece = col_bytes / es;  // elements per block per round
  if (piece == 0) {
    // More ranks than 64-byte columns fit in a slot: the whole allreduce
    // (the rest of the buffer is scratch to the caller).
    Allreduce(s, reduce, base, start[n], es, dtype, op);
    return;
  }
  size_t longest = 0;
  for (int k = 0; k < n; ++k) longest = std::max(longest, start[k + 1] - start[k]);
  for (size_t done = 0; done < longest; done += piece) {
    const uint32_t set = s.NextSet();
    uint8_t* mine = s.Slot(set, r);
    for (int k = 0; k < n; ++k) {
      const size_t len = start[k + 1] - start[k];
      if (k == r || len <= done) continue;
      std::memcpy(mine + k * col_bytes, base + (start[k] + done) * es,
                  std::min(piece, len - done) * es);
    }
    s.Barrier("reducescatter");
    const size_t my_len = start[r + 1] - start[r];
    if (my_len > done) {
      const size_t m = std::min(piece, my_len - done);
      const size_t off = static_cast<size_t>(r) * col_bytes;
      uint8_t* dst = base + (start[r] + done) * es;
      uint8_t* res = ReduceColumn(s, reduce, set, off, dst, mine + off, m, es, dtype, op);
      if (res != dst) std::memcpy(dst, res, m * es);
    }
  }
}

// The root copies up to a whole slot set per round; the others copy it out.
void Broadcast(Segment& s, uint8_t* buf, size_t bytes, int root) {
  const size_t cap = s.slot() * static_cast<size_t>(s.size());
  for (size_t done = 0; done < bytes; done += cap) {
    const size_t m = std::min(cap, bytes - done);
    const uint32_t set = s.NextSet();
    if (s.rank() == root) std::memcpy(s.Slot(set, 0), buf + done, m);
    s.Barrier("broadcast");
    if (s.rank() != root) std::memcpy(buf + done, s.Slot(set, 0), m);
  }
}

// Each rank publishes up to a slot of its contribution per round; everyone
// copies every other rank's piece to its place.
void Allgatherv(Segment& s, const uint8_t* send, uint8_t* out, const size_t* recv_bytes) {
  const int n = s.size();
  const int r = s.rank();
  std::vector<size_t> offs(n);
  size_t most = 0, total = 0;
  for (int k = 0; k < n; ++k) {
    offs[k] = total;
    total += recv_bytes[k];
    most = std::max(most, recv_bytes[k]);
  }
  const size_t mine = recv_bytes[r];
  if (mine > 0 && out + offs[r] != send) std::memmove(out + offs[r], send, mine);
  const uint8_t* src = out + offs[r];  // this rank's contribution, now in place
  for (size_t done = 0; done < most; done += s.slot()) {
    const uint32_t set = s.NextSet();
    if (mine > done) std::memcpy(s.Slot(set, r), src + done, std::min(s.slot(), mine - done));
    s.Barrier("allgatherv");
    for (int k = 0; k < n; ++k) {
      if (k == r || recv_bytes[k] <= done) continue;
      std::memcpy(out + offs[k] + done, s.Slot(set, k), std::min(s.slot(), recv_bytes[k] - done));
    }
  }
}

// ---------------------------------------------------------------------------
// Setup.

bool SwitchOn(const char* v) {
  if (v == nullptr || v[0] == '\0') return true;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return !(s == "0" || s == "false" || s == "off" || s == "no");
}

std::string HostIdentity() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!std::getline(f, boot) || boot.empty()) return "";
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  struct stat ipc, pid;
  if (stat("/proc/self/ns/ipc", &ipc) != 0 || stat("/proc/self/ns/pid", &pid) != 0) return "";
  return "boot=" + boot + " host=" + host + " ipc=" + std::to_string(ipc.st_ino) +
         " pid=" + std::to_string(pid.st_ino);
}

namespace {

std::string ErrnoText(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

// Unlinks the segment's name when it goes out of scope (the creator's, once
// every rank has opened it or given up).
struct Name {
  std::string name;
  bool created = false;
  ~Name() {
    if (created) shm_unlink(name.c_str());
  }
};

}  // namespace

// Rank 0 creates the segment under a random name it sends round; everyone
// maps it and reports ok or its failure; everyone reads every answer, so all
// ranks decide alike; rank 0 then unlinks the name. An exchange failure
// returns its status; any other failure leaves *out null on every rank, logged.
int Setup(Exchange& ex, const Options& o, std::unique_ptr<Segment>* out, std::string* err) {
  out->reset();
  const int r = o.rank;
  const int n = o.size;
  const std::string me = std::string(o.transport) + ": rank " + std::to_string(r) + ": ";
  auto log = [&](int level, const std::string& msg) {
    if (o.log) o.log(level, me + msg);
  };
  std::string id = !o.enabled ? "off" : o.identity.empty() ? HostIdentity() : o.identity;
  if (id.empty()) id = "unknown rank " + std::to_string(r);  // matches nobody
  std::vector<std::string> all;
  int st = ex.Allgather("host", id, &all, err);
  if (st != HVD_OK) return st;
  if (all.size() != static_cast<size_t>(n)) {
    *err = "shm setup: the exchange returned " + std::to_string(all.size()) + " strings for " +
           std::to_string(n) + " ranks";
    return HVD_ERR_INTERNAL;
  }
  // Decided from the exchanged values only (this rank's own included), so
  // every rank reaches the same answer.
  std::string why_not;
  for (int j = 0; j < n && why_not.empty(); ++j) {
    const std::string& v = all[j];
    if (v == "off") {
      why_not = "rank " + std::to_string(j) + " set " + o.switch_name + "=0";
    } else if (v.rfind("unknown", 0) == 0) {
      why_not = "rank " + std::to_string(j) + " cannot tell its host identity";
    } else if (v != all[0]) {
      why_not = "ranks 0 and " + std::to_string(j) + " are on different hosts (or containers)";
    }
  }
  if (!why_not.empty()) {
    log(HVD_LOG_INFO, "shared-memory path not used: " + why_not);
    return HVD_OK;
  }

  const size_t slot_pref = o.slot_bytes / 4096 * 4096 > 0 ? o.slot_bytes / 4096 * 4096 : 4096;
  const size_t slot = std::max(
      std::min(slot_pref, kSegmentBudget / (2 * static_cast<size_t>(n)) / 4096 * 4096),
      std::min(slot_pref, kMinSlotBytes));
  const size_t bytes = Segment::SegmentBytes(n, slot);
  std::string fail;  // this rank's failure
  std::unique_ptr<Segment> seg;
  Name name;
  auto map = [&](int fd) {
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) {
      fail = ErrnoText("mmap", errno);
      return;
    }
    seg = std::make_unique<Segment>(base, bytes, o, slot);
  };
  std::string sent;  // rank 0: the name, or "!" and its failure
  if (r == 0) {
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof(rnd), 0) != static_cast<ssize_t>(sizeof(rnd))) {
      fail = ErrnoText("getrandom", errno);
    } else {
      char hex[2 * sizeof(rnd) + 1];
      for (size_t i = 0; i < sizeof(rnd); ++i) std::snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
      name.name = std::string(o.name_prefix) + hex;
      const int fd = shm_open(name.name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) {
        fail = ErrnoText("shm_open", errno);
      } else {
        name.created = true;
        // Allocates the pages now: a full /dev/shm fails here, not as SIGBUS later.
        const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
        if (e != 0) {
          fail = "cannot allocate " + std::to_string(bytes >> 20) + " MiB in /dev/shm: " +
                 std::strerror(e);
        } else {
          map(fd);
        }
        close(fd);
      }
    }
    if (seg) {
      auto* h = new (seg->header()) Header();
      h->slot_bytes = slot;
      h->size = static_cast<uint32_t>(n);
      h->abort_by.store(0);
      for (int j = 0; j < n; ++j) new (seg->line(j)) RankLine();
      h->magic = kMagic;
    }
    sent = fail.empty() ? name.name : "!" + fail;
  }
  st = ex.Allgather("name", sent, &all, err);
  if (st != HVD_OK) return st;
  if (r != 0) {
    const std::string v = all.empty() ? std::string() : all[0];
    if (v.empty() || v[0] == '!') {
      fail = "rank 0 could not create the segment: " + (v.empty() ? std::string() : v.substr(1));
    } else {
      const int fd = shm_open(v.c_str(), O_RDWR | O_CLOEXEC, 0);
      struct stat sb;
      if (fd < 0) {
        fail = ErrnoText("shm_open", errno);
      } else if (fstat(fd, &sb) != 0 || static_cast<size_t>(sb.st_size) != bytes) {
        fail = "segment " + v + " has an unexpected size";
      } else {
        map(fd);
      }
      if (fd >= 0) close(fd);
      if (seg && (seg->header()->magic != kMagic || seg->header()->size != uint32_t(n) ||
                  seg->header()->slot_bytes != slot)) {
        fail = "segment " + v + " has a different layout (mixed hvd versions?)";
        seg.reset();
      }
    }
  }
  if (seg) seg->set_owner(static_cast<int32_t>(getpid()));
  st = ex.Allgather("ok", fail.empty() ? "ok" : fail, &all, err);
  if (st != HVD_OK) return st;
  std::string first_fail;  // again from the exchanged values only
  for (int j = 0; j < n && j < static_cast<int>(all.size()); ++j) {
    if (all[j] != "ok" && first_fail.empty()) first_fail = "rank " + std::to_string(j) + ": " + all[j];
  }
  if (all.size() != static_cast<size_t>(n) && first_fail.empty()) first_fail = "incomplete answers";
  if (!first_fail.empty()) {
    log(HVD_LOG_WARNING,
        std::string("shared-memory setup failed, using ") + o.fallback + ": " + first_fail);
    return HVD_OK;
  }
  log(HVD_LOG_INFO, "shared-memory path active (" + std::to_string(n) + " ranks, " +
                        (bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB"
                                                    : std::to_string(bytes >> 10) + " KiB") +
                        " segment, " + std::to_string(slot >> 10) + " KiB slots)");
  *out = std::move(seg);
  return HVD_OK;
}

}  // namespace shm
}  // namespace hvd
