// The flight recorder's ring, its snapshot and its JSON file (the format:
// docs/flight-recorder.md), and the SIGUSR1 request.
#include "core/observability/flight_recorder.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "common/files.h"
#include "common/json.h"
#include "common/kernels.h"
#include "core/fusion/planner.h"

namespace hvd {
namespace {

// SIGUSR1s received by this process. Process-wide because a signal is: its
// handler cannot know the contexts (it may only touch a lock-free atomic),
// and each context's loop compares the count with what it has served.
std::atomic<uint64_t> g_dump_signals{0};

extern "C" void OnDumpSignal(int) { g_dump_signals.fetch_add(1, std::memory_order_relaxed); }

void Escape(std::string* out, const std::string& s) {
  out->push_back('"');
  AppendJsonEscaped(out, s);
  out->push_back('"');
}

const char* State(const FlightRecorder::Entry& e) {
  if (e.finished != 0) return e.status == HVD_OK ? "ok" : "error";
  if (e.started != 0) return "running";
  if (e.negotiated != 0) return "negotiated";
  return "submitted";
}

// The ranks an operation exchanges data with under its algorithm: a ring's
// two neighbours, every other member otherwise.
std::vector<int> Peers(const std::vector<int>& members, int rank, const char* algorithm) {
  std::vector<int> peers;
  const int n = static_cast<int>(members.size());
  int me = -1;
  for (int i = 0; i < n; ++i) {
    if (members[static_cast<size_t>(i)] == rank) me = i;
  }
  if (me < 0 || n < 2) return peers;
  if (algorithm != nullptr && std::strcmp(algorithm, "ring") == 0 && n > 2) {
    peers.push_back(members[static_cast<size_t>((me + n - 1) % n)]);
    peers.push_back(members[static_cast<size_t>((me + 1) % n)]);
    return peers;
  }
  for (int i = 0; i < n; ++i) {
    if (i != me) peers.push_back(members[static_cast<size_t>(i)]);
  }
  return peers;
}

}  // namespace

void FlightRecorder::Configure(size_t capacity, std::string dir, Identity id) {
  capacity_ = capacity;
  dir_ = std::move(dir);
  id_ = std::move(id);
  size_t slots = 1;
  while (slots < capacity_) slots <<= 1;
  mask_ = slots - 1;
  ring_ = capacity_ ? std::make_unique<Record[]>(slots) : nullptr;
  signals_seen_.store(g_dump_signals.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

uint64_t FlightRecorder::Submitted(const OpRequest& req, int set_id, uint64_t set_seq) {
  if (capacity_ == 0) return 0;
  const uint64_t seq = ++next_;
  Record& r = ring_[(seq - 1) & mask_];
  r.seq.store(seq, std::memory_order_relaxed);
  Fields& f = r.f;
  // The hot path: a submit copies the name in place and counts a single
  // tensor's elements; the rest waits for a dump (Take).
  const TensorSpec& t = req.tensors.front();
  const size_t n = t.name.size();
  r.name_len = static_cast<uint32_t>(n);
  if (n <= kInlineName) {
    std::memcpy(r.name_in, t.name.data(), n);
  } else {
    r.more.assign(t.name);  // keeps its capacity: no allocation once warm
  }
  f.tensors = req.tensors.size();
  f.type = req.type;
  f.reduce_op = req.reduce_op;
  f.dtype = t.dtype;
  f.set_id = set_id;
  f.set_seq = set_seq;
  if (req.tensors.size() == 1) {
    r.elements = t.NumElements();
    f.bytes = 0;
  } else {
    r.elements = 0;
    f.bytes = RequestBytes(req);
  }
  f.submitted = Ns(req.enqueued);
  f.finished = 0;
  f.status = HVD_OK;
  f.error.clear();
  r.negotiated.store(0, std::memory_order_relaxed);
  r.started.store(0, std::memory_order_relaxed);
  r.unit_bytes.store(0, std::memory_order_relaxed);
  return seq;
}

void FlightRecorder::Started(uint64_t seq, TimePoint t, uint64_t unit_bytes) {
  if (seq == 0) return;
  if (Record* r = Find(seq)) {
    r->started.store(Ns(t), std::memory_order_relaxed);
    r->unit_bytes.store(unit_bytes, std::memory_order_relaxed);
  }
}

void FlightRecorder::Finished(uint64_t seq, TimePoint t, const Status& s) {
  if (seq == 0) return;
  Record* r = Find(seq);
  if (r == nullptr) return;
  r->f.finished = Ns(t);
  r->f.status = s.code();
  if (!s.ok()) r->f.error = s.message();
}

void FlightRecorder::Stopped(const Status& why, TimePoint t) {
  if (capacity_ == 0 || !first_failure_.ok() || why.ok()) return;
  first_failure_ = why;
  failed_at_ = Ns(t);
}

FlightRecorder::Snapshot FlightRecorder::Take() const {
  Snapshot snap;
  snap.recorded = next_;
  snap.first_failure = first_failure_;
  snap.failed_at = failed_at_;
  if (capacity_ == 0) return snap;
  const uint64_t first = next_ > capacity_ ? next_ - capacity_ + 1 : 1;
  snap.entries.reserve(static_cast<size_t>(next_ - first + 1));
  for (uint64_t seq = first; seq <= next_; ++seq) {
    const Record& r = ring_[(seq - 1) & mask_];
    if (r.seq.load(std::memory_order_relaxed) != seq) continue;
    Entry e;
    static_cast<Fields&>(e) = r.f;
    if (r.name_len <= kInlineName) {
      e.name.assign(r.name_in, r.name_len);
    } else {
      e.name = r.more;
    }
    if (r.f.tensors == 1) e.bytes = static_cast<uint64_t>(r.elements) * DtypeSize(r.f.dtype);
    e.seq = seq;
    e.unit_bytes = r.unit_bytes.load(std::memory_order_relaxed);
    e.negotiated = r.negotiated.load(std::memory_order_relaxed);
    e.started = r.started.load(std::memory_order_relaxed);
    snap.entries.push_back(std::move(e));
  }
  return snap;
}

std::string FlightRecorder::DefaultPath() const {
  if (dir_.empty()) return "";
  return dir_ + "/rank-" + std::to_string(id_.rank) + ".json";
}

bool FlightRecorder::pending() const {
  return capacity_ != 0 &&
         (wanted_.load(std::memory_order_relaxed) ||
          g_dump_signals.load(std::memory_order_relaxed) !=
              signals_seen_.load(std::memory_order_relaxed));
}

const char* FlightRecorder::TakeWanted() {
  if (capacity_ == 0) return nullptr;
  const uint64_t signals = g_dump_signals.load(std::memory_order_relaxed);
  if (signals_seen_.exchange(signals, std::memory_order_relaxed) != signals) {
    wanted_.store(false, std::memory_order_relaxed);
    return "SIGUSR1";
  }
  if (!wanted_.load(std::memory_order_relaxed)) return nullptr;
  if (!wanted_.exchange(false, std::memory_order_acquire)) return nullptr;
  return wanted_reason_.load(std::memory_order_relaxed);
}

void FlightRecorder::InstallSignalHandler() {
  struct sigaction old;
  if (::sigaction(SIGUSR1, nullptr, &old) != 0) return;
  if (old.sa_handler == OnDumpSignal) return;
  if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) return;  // the program's own
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnDumpSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
}

void FlightRecorder::AppendOp(std::string* out, const Entry& e, const char* algo,
                              const std::vector<int>* members, int64_t offset) const {
  std::string& j = *out;
  auto at = [offset](int64_t t) { return t == 0 ? std::string("null") : std::to_string(t + offset); };
  j += "{\"seq\": " + std::to_string(e.seq) + ", \"name\": ";
  Escape(&j, e.name);
  j += std::string(", \"tensors\": ") + std::to_string(e.tensors) + ", \"op\": \"" +
       OpTypeName(e.type) + "\"";
  if (e.type == OpType::kAllreduce || e.type == OpType::kReducescatter) {
    j += std::string(", \"reduce\": \"") + ReduceOpName(e.reduce_op) + "\"";
  }
  j += std::string(", \"dtype\": \"") + DtypeName(e.dtype) + "\", \"bytes\": " +
       std::to_string(e.bytes) + ", \"set\": " + std::to_string(e.set_id) +
       ", \"set_seq\": " + std::to_string(e.set_seq) + ", \"algorithm\": ";
  Escape(&j, algo != nullptr ? algo : "");
  j += ", \"peers\": [";
  if (members != nullptr) {
    const std::vector<int> peers = Peers(*members, id_.rank, algo);
    for (size_t k = 0; k < peers.size(); ++k) j += (k ? ", " : "") + std::to_string(peers[k]);
  }
  j += std::string("], \"state\": \"") + State(e) + "\", \"submitted_ns\": " + at(e.submitted) +
       ", \"negotiated_ns\": " + at(e.negotiated) + ", \"started_ns\": " + at(e.started) +
       ", \"finished_ns\": " + at(e.finished);
  if (e.finished != 0 && e.status != HVD_OK) {
    j += ", \"status\": " + std::to_string(e.status) + ", \"error\": ";
    Escape(&j, e.error);
  }
  j += "}";
}

std::string FlightRecorder::Json(const Snapshot& snap, const char* reason, AlgorithmOf algorithm,
                                 const void* user) const {
  // Steady times become wall-clock nanoseconds (ranks compare them).
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const int64_t offset = wall - Ns(std::chrono::steady_clock::now());
  std::string j;
  j.reserve(256 + snap.entries.size() * 360);
  j += "{\"format\": \"hvd-flight-recorder\", \"version\": 1, \"rank\": " +
       std::to_string(id_.rank) + ", \"size\": " + std::to_string(id_.size) + ", \"host\": ";
  Escape(&j, id_.host);
  j += ", \"pid\": " + std::to_string(::getpid()) + ", \"transport\": ";
  Escape(&j, id_.transport);
  j += ", \"reason\": ";
  Escape(&j, reason != nullptr ? reason : "");
  j += ", \"written_ns\": " + std::to_string(wall) + ", \"capacity\": " +
       std::to_string(capacity_) + ", \"recorded\": " + std::to_string(snap.recorded) +
       ", \"failure\": ";
  if (snap.first_failure.ok()) {
    j += "null";
  } else {
    j += "{\"status\": " + std::to_string(snap.first_failure.code()) + ", \"at_ns\": " +
         (snap.failed_at == 0 ? std::string("null") : std::to_string(snap.failed_at + offset)) +
         ", \"error\": ";
    Escape(&j, snap.first_failure.message());
    j += "}";
  }
  j += ",\n \"sets\": [";
  for (size_t i = 0; i < snap.sets.size(); ++i) {
    j += std::string(i ? ", " : "") + "{\"id\": " + std::to_string(snap.sets[i].id) + ", \"ranks\": [";
    for (size_t k = 0; k < snap.sets[i].members.size(); ++k) {
      j += (k ? ", " : "") + std::to_string(snap.sets[i].members[k]);
    }
    j += "]}";
  }
  j += "],\n \"ops\": [";
  for (size_t i = 0; i < snap.entries.size(); ++i) {
    const Entry& e = snap.entries[i];
    const std::vector<int>* members = nullptr;
    for (const SetInfo& s : snap.sets) {
      if (s.id == e.set_id) members = &s.members;
    }
    j += i ? ",\n  " : "\n  ";
    AppendOp(&j, e,
             algorithm != nullptr
                 ? algorithm(user, e.set_id, e.type, e.unit_bytes ? e.unit_bytes : e.bytes)
                 : nullptr,
             members, offset);
  }
  j += "]}\n";
  return j;
}

Status FlightRecorder::Write(const Snapshot& snap, const std::string& path, const char* reason,
                             AlgorithmOf algorithm, const void* user) const {
  if (capacity_ == 0) {
    return Error(HVD_ERR_UNSUPPORTED, "the flight recorder is off (HVD_FLIGHT_RECORDER_SIZE=0)");
  }
  if (path.empty()) {
    return Error(HVD_ERR_INVALID_ARGUMENT,
                 "flight recorder: no file given and no folder configured "
                 "(HVD_FLIGHT_RECORDER_DIR, hvdrun --flight-recorder)");
  }
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const Status made = MakeDirs(path.substr(0, slash));
    if (!made.ok()) return Error(made.code(), "flight recorder: " + made.message());
  }
  const std::string j = Json(snap, reason, algorithm, user);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return Error(HVD_ERR_INVALID_ARGUMENT,
                 "flight recorder: cannot write " + tmp + ": " + std::strerror(errno));
  }
  const bool ok = std::fwrite(j.data(), 1, j.size(), f) == j.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Error(HVD_ERR_INVALID_ARGUMENT,
                 "flight recorder: cannot write " + path + ": " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace hvd
