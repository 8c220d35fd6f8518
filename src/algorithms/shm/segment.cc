// Shared-memory collectives between the ranks of one host; see shm.h and
// src/algorithms/README.md. One POSIX shm segment per communicator:
//
//   [Header][RankLine x size][pad to 4 KiB][kSets sets x size slots of slot bytes]
//
// Synchronisation is counters per rank, each written by its owner only:
// `seq`, the number of barriers the rank has entered (a barrier is "bump
// mine, wait until every peer's counter reached mine"), and the pipelined
// allreduce's flags (written, reduced: 1 + the last round the rank has got
// that far in). Waiting spins briefly, then yields, then sleeps on
// the peer's word with a cross-process futex in bounded slices, checking the
// timeout, the abort word, departed peers and peer pids between slices.
#include "algorithms/shm/layout.h"
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

Segment::Segment(void* base, size_t bytes, const Options& o, size_t slot)
    : base_(static_cast<uint8_t*>(base)), bytes_(bytes), rank_(o.rank), size_(o.size),
      slot_(slot), timeout_s_(o.timeout_s), small_fanout_(o.small_fanout_bytes),
      spin_ns_(o.spin_ns), yield_ns_(o.yield_ns) {}

Segment::~Segment() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

size_t Segment::DataOffset(int size) {
  const size_t ctl = sizeof(Header) + static_cast<size_t>(size) * sizeof(RankLine);
  return (ctl + 4095) / 4096 * 4096;
}

size_t Segment::SegmentBytes(int size, size_t slot) {
  return DataOffset(size) + kSets * static_cast<size_t>(size) * slot;
}

Header* Segment::header() const { return reinterpret_cast<Header*>(base_); }

RankLine* Segment::line(int r) const {
  return reinterpret_cast<RankLine*>(base_ + sizeof(Header)) + r;
}

size_t Segment::small_max() const {
  return std::min(slot_, small_fanout_ / static_cast<size_t>(std::max(1, size_ - 1)));
}

Status Segment::Barrier(const char* what) {
  const uint32_t g = ++gen_;
  RankLine* me = line(rank_);
  me->seq.store(g, std::memory_order_seq_cst);
  if (me->waiters.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&me->seq);
  return Wait(Need{0, g, -1}, what);
}

std::atomic<uint32_t>* Segment::Word(int j, int word) const {
  RankLine* l = line(j);
  switch (word) {
    case 1 + static_cast<int>(Flag::kWritten):
      return &l->written;
    case 1 + static_cast<int>(Flag::kReduced):
      return &l->reduced;
    default:
      return &l->seq;
  }
}

void Segment::Signal(Flag f, uint32_t value) {
  std::atomic<uint32_t>* w = Word(rank_, 1 + static_cast<int>(f));
  // seq_cst against the sleeper's waiters increment and load (Wait).
  w->store(value, std::memory_order_seq_cst);
  if (line(rank_)->waiters.load(std::memory_order_seq_cst) != 0) FutexWakeAll(w);
}

Status Segment::WaitFlag(Flag f, uint32_t value, int peer, const char* what) {
  return Wait(Need{1 + static_cast<int>(f), value, peer}, what);
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

bool Segment::Reached(int j, const Need& n) const {
  return static_cast<int32_t>(Word(j, n.word)->load(std::memory_order_acquire) - n.value) >= 0;
}

std::vector<int> Segment::Missing(const Need& n) const {
  std::vector<int> m;
  for (int j = 0; j < size_; ++j) {
    if (j != rank_ && (n.peer < 0 || j == n.peer) && !Reached(j, n)) m.push_back(j);
  }
  return m;
}

void Segment::WakeEveryone() {
  for (int j = 0; j < size_; ++j) {
    for (int w = 0; w <= 1 + static_cast<int>(Flag::kReduced); ++w) FutexWakeAll(Word(j, w));
  }
}

// An error if the wait can never succeed: someone broke the communicator, a
// missing peer finalized or died.
Status Segment::CheckPeers(const Need& g, const char* what, bool check_pids) {
  const Header* h = header();
  // Aborted by this rank (another thread of it, while this one waits).
  if (const int code = aborted_here_.load(std::memory_order_acquire)) {
    return Error(static_cast<hvd_status_t>(code),
                 std::string(what) + " (shm): " + Name(rank_) + ": aborted on this rank");
  }
  // Another rank's abort: its reason (which names the culprit) is the error.
  auto aborted = [&]() -> Status {
    const uint32_t ab = h->abort_by.load(std::memory_order_acquire);
    if (ab != 0 && ab != kAbortClaimed && ab != static_cast<uint32_t>(rank_) + 1) {
      std::string why(h->abort_msg, strnlen(h->abort_msg, sizeof(h->abort_msg)));
      return Error(h->abort_code == HVD_ERR_TIMEOUT ? HVD_ERR_TIMEOUT : HVD_ERR_TRANSPORT,
                   std::string(what) + " (shm): " + Name(rank_) + ": " +
                       Name(static_cast<int>(ab) - 1) + " broke the communicator: " + why);
    }
    return Status::Ok();
  };
  HVD_CHECK(aborted());
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
      HVD_CHECK(aborted());
      return Error(HVD_ERR_TRANSPORT, std::string(what) + " (shm): " + Name(rank_) + ": " + Name(j) +
                                          " has finalized (left the job)");
    }
    if (check_pids) {
      const int32_t pid = line(j)->pid.load(std::memory_order_relaxed);
      if (PidIsDead(pid) && !Reached(j, g)) {
        HVD_CHECK(aborted());
        return Error(HVD_ERR_TRANSPORT,
                     std::string(what) + " (shm): " + Name(rank_) + ": " + WithPid(Name(j), pid) + " died");
      }
    }
  }
  return Status::Ok();
}

// The wait has lasted the peer timeout: the missing ranks that are not
// blocked themselves (a leader in a cross-host transfer is) are silent, an
// error naming them; Ok if every missing rank is blocked on someone.
Status Segment::Silent(const Need& g, const char* what) {
  std::vector<int> silent;
  for (int j : Missing(g)) {
    int peer = -1;
    double secs = 0;
    if (!WaitingOn(j, &peer, &secs)) silent.push_back(j);
  }
  if (silent.empty()) return Status::Ok();
  missing_ = silent;
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", silence_s_);
  return Error(HVD_ERR_TIMEOUT, std::string(what) + " (shm): " + Name(rank_) + ": " +
                                    NameList(silent) + (silent.size() == 1 ? " has" : " have") +
                                    " not answered for " + secs +
                                    " s (stopped or cut off?; peer timeout, HVD_PEER_TIMEOUT)");
}

Status Segment::Wait(const Need& g, const char* what) {
  // ranks below next are known to have arrived (or are not waited for)
  int next = g.peer < 0 ? 0 : g.peer;
  const int end = g.peer < 0 ? size_ : g.peer + 1;
  missing_.clear();
  auto all_here = [&] {
    while (next < end && (next == rank_ || Reached(next, g))) ++next;
    return next == end;
  };
  if (all_here()) return Status::Ok();
  const auto t0 = Clock::now();
  // Crowded (spin_ns_ 0: set_spin), a peer that has not arrived may need
  // this CPU: no spin before the first yield.
  if (spin_ns_ > 0) {
    for (uint32_t i = 1;; ++i) {
      CpuRelax();
      if (all_here()) return Status::Ok();
      if ((i & 63) == 0 && NsSince(t0) > spin_ns_) break;
    }
  }
  while (NsSince(t0) < yield_ns_) {
    sched_yield();
    if (all_here()) return Status::Ok();
  }
  const bool limited = timeout_s_ > 0 && timeout_s_ < 3.0e7;
  const int64_t limit_ns = limited ? static_cast<int64_t>(timeout_s_ * 1e9) : 0;
  const int64_t silence_ns =
      silence_s_ > 0 && (!limited || silence_s_ < timeout_s_) ? static_cast<int64_t>(silence_s_ * 1e9) : 0;
  int64_t last_pid_check = -kPidCheckNs;
  for (;;) {
    const int64_t now = NsSince(t0);
    const bool pids = now - last_pid_check >= kPidCheckNs;
    if (pids) last_pid_check = now;
    if (all_here()) return Status::Ok();  // before the checks: a peer may have arrived, then left
    HVD_CHECK(CheckPeers(g, what, pids));
    if (limited && now >= limit_ns) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s_);
      missing_ = Missing(g);
      return Error(HVD_ERR_TIMEOUT, std::string(what) + " (shm): " + Name(rank_) + ": " +
                                        NameList(missing_) + " did not arrive within " + secs + " s");
    }
    if (silence_ns > 0 && now >= silence_ns) HVD_CHECK(Silent(g, what));
    int64_t slice = kSliceNs;
    if (silence_ns > now) slice = std::min(slice, std::max<int64_t>(silence_ns - now, 1000));
    if (limited) slice = std::min(slice, std::max<int64_t>(limit_ns - now, 1000));
    slice = std::min(slice, std::max<int64_t>(kPidCheckNs - (now - last_pid_check), 1000));
    RankLine* l = line(next);
    std::atomic<uint32_t>* w = Word(next, g.word);
    l->waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = w->load(std::memory_order_seq_cst);
    if (static_cast<int32_t>(v - g.value) < 0) FutexWait(w, v, slice);
    l->waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (all_here()) return Status::Ok();
  }
}

}  // namespace shm
}  // namespace hvd
