// The context: bootstrap (rendezvous, topology, transport) and the background
// loop (negotiate, fuse, run, complete).
#include "core/context.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>
#include <map>
#include <unordered_map>
#include <unordered_set>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#ifndef HVD_SETTLE_US
#define HVD_SETTLE_US 50
#endif

#include "algorithms/shm/shm.h"
#include "common/kernels.h"
#include "common/netif.h"
#include "core/observability/autotune.h"
#include "core/bootstrap/bootstrap.h"
#include "core/config/config.h"
#include "core/negotiation/controller.h"
#include "core/elastic/elastic.h"
#include "core/exec/executor.h"
#include "core/fusion/fusion_buffer.h"
#include "core/observability/logging.h"
#include "core/observability/start_report.h"
#include "core/observability/timeline.h"
#include "transport/transport.h"
#include "rendezvous/store.h"

namespace hvd {

// ---- Scope: the context itself, or one of its process sets --------------

// The two control-plane collectives over one communicator.
class CommPlane : public ControlPlane {
 public:
  explicit CommPlane(Comm* comm) : comm_(comm) {}
  Status AllreduceMinU8(uint8_t* buf, size_t n) override {
    return comm_->Allreduce(buf, n, HVD_UINT8, HVD_MIN);
  }
  Status AllgatherBytes(const std::vector<uint8_t>& mine,
                        std::vector<std::vector<uint8_t>>* all) override;

 private:
  Comm* comm_;
  std::vector<uint64_t> lens_;
  std::vector<size_t> len_bytes_;
  std::vector<uint8_t> gather_buf_;
};

Status CommPlane::AllgatherBytes(const std::vector<uint8_t>& mine,
                                 std::vector<std::vector<uint8_t>>* all) {
  const int n = comm_->size();
  lens_.assign(static_cast<size_t>(n), 0);
  len_bytes_.assign(static_cast<size_t>(n), sizeof(uint64_t));
  uint64_t my_len = mine.size();
  HVD_CHECK(comm_->Allgatherv(&my_len, lens_.data(), len_bytes_.data()));
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    len_bytes_[r] = static_cast<size_t>(lens_[r]);
    total += len_bytes_[r];
  }
  gather_buf_.resize(std::max<size_t>(total, 1));
  HVD_CHECK(comm_->Allgatherv(mine.data(), gather_buf_.data(), len_bytes_.data()));
  all->resize(static_cast<size_t>(n));
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    (*all)[r].assign(gather_buf_.begin() + static_cast<std::ptrdiff_t>(off),
                     gather_buf_.begin() + static_cast<std::ptrdiff_t>(off + len_bytes_[r]));
    off += len_bytes_[r];
  }
  return Status::Ok();
}

// One communicator the loop drives: the context itself (slot -1) or one of
// its process sets. The identity fields are fixed once made.
struct Scope {
  int slot = -1;             // the set's slot in the loop's table; -1: the context
  std::vector<int> members;  // ranks of the context, in this scope's rank order
  std::string label;         // a set's timeline rows: "set [0, 2]"; "" for the context
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  Comm* comm = nullptr;      // the transport, or own_comm
  std::unique_ptr<Comm> own_comm;
  std::unique_ptr<CommPlane> plane;
  std::unique_ptr<Controller> controller;
  // Under the context's mu_.
  std::vector<OpRequest> queue;  // swapped with batch: both keep their capacity
  NameTable names;  // names in flight (submitted, not yet completed)
  uint64_t barrier_count = 0;
  uint64_t set_count = 0;  // process-set calls on this scope (names their requests)
  bool closed = false;     // a destroyed process set, or a stopped context's
  Status closed_reason;
  // Background thread only.
  std::vector<OpRequest> batch;
  std::vector<Response> responses;
  bool close_agreed = false;  // the set's destruction was agreed this cycle
  // A set's own device transport (its CUDA tensors, beside a device-only
  // transport such as NCCL): opened by every member in the first cycle one
  // of the set's responses holds CUDA tensors (ContextImpl::SetDevice).
  // Written by the loop thread under the context's mu_ (the shutdown
  // aborts it from another thread).
  uint64_t generation = 0;  // the set's creation count in the context: its store keys
  std::unique_ptr<PluginKv> device_kv;  // before device: outlives it
  std::unique_ptr<Transport> device;
  bool device_tried = false;
  Status device_error;  // why it could not be opened: its CUDA operations fail with it
};

namespace {

// The control bytes of one process-set slot in the packed negotiation:
// [0] 0 while some member holds the set, [1] 255 - the member's count of
// requests pending in it (at most 254; so 255 - the most any member has),
// [2..3] the set's cache extent (Controller::slot_extent, in kExtentSteps,
// big-endian: the same on every member), then the set's controller's bytes
// for as many cache slots as the extent the last negotiation showed (the
// ranks outside a set know no more). 0xFF (MIN's identity) from ranks
// outside the set and for free slots.
constexpr size_t kSlotHeader = 4;
constexpr uint8_t kMaxPendingCount = 254;

// The specification a process-set request allgathers (int32 each):
// [kind, host, ...]: kind 0 (a rank list): n, ranks...; kind 1 (split):
// color, key. host: a hash of this rank's host identity (local ranks).
constexpr int32_t kSpecList = 0;
constexpr int32_t kSpecSplit = 1;

int32_t HostHash(const std::string& identity) {
  // FNV-1a, folded to 31 bits: equal on the ranks of one host, distinct
  // across hosts in all but astronomically unlucky cases.
  uint32_t h = 2166136261u;
  for (unsigned char c : identity) h = (h ^ c) * 16777619u;
  return static_cast<int32_t>(h & 0x7fffffffu);
}

// ---- A small allreduce in the negotiation (HVD_PIGGYBACK) ---------------
//
// The negotiation's allreduce then runs in the small tensor's dtype and
// (transport) op: each control byte becomes one number, chosen so that the
// numbers' reduction under that op says what the bytes' MIN would, then
// the tensor follows. Flags (0/1; every byte but the autotuning proposal):
// SUM adds them (all set: the size), MIN and PRODUCT keep 1 only where all
// are 1, MAX takes 1 - flag (all set: 0). The proposal is rank 0's: every
// other rank contributes the op's identity. Exact wherever the dtype holds
// the integers involved (0..255, and the size for SUM).
constexpr size_t kPiggybackMaxBytes = 1024;
constexpr size_t kProposalByte = 3;

// The largest integer up to which every integer is exact in dtype (0: not
// used: int8 cannot hold 255, bool's SUM is an or).
double ExactIntegers(hvd_dtype_t d) {
  switch (d) {
    case HVD_UINT8: return 255;
    case HVD_UINT16: return 65535;
    case HVD_INT16: return 32767;
    case HVD_INT32: return 2147483647.0;
    case HVD_INT64:
    case HVD_FLOAT64: return 9007199254740992.0;
    case HVD_FLOAT16: return 2048;
    case HVD_BFLOAT16: return 256;
    case HVD_FLOAT32: return 16777216.0;
    default: return 0;
  }
}

void PutNumber(uint8_t* p, hvd_dtype_t d, double v) {
  switch (d) {
    case HVD_UINT8: *p = static_cast<uint8_t>(v); break;
    case HVD_UINT16: { uint16_t x = static_cast<uint16_t>(v); std::memcpy(p, &x, 2); break; }
    case HVD_INT16: { int16_t x = static_cast<int16_t>(v); std::memcpy(p, &x, 2); break; }
    case HVD_INT32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case HVD_INT64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case HVD_FLOAT16: { uint16_t x = FloatToHalf(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case HVD_BFLOAT16: { uint16_t x = FloatToBFloat16(static_cast<float>(v)); std::memcpy(p, &x, 2); break; }
    case HVD_FLOAT32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    default: std::memcpy(p, &v, 8); break;  // HVD_FLOAT64
  }
}

double GetNumber(const uint8_t* p, hvd_dtype_t d) {
  switch (d) {
    case HVD_UINT8: return *p;
    case HVD_UINT16: { uint16_t x; std::memcpy(&x, p, 2); return x; }
    case HVD_INT16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case HVD_INT32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case HVD_INT64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case HVD_FLOAT16: { uint16_t x; std::memcpy(&x, p, 2); return HalfToFloat(x); }
    case HVD_BFLOAT16: { uint16_t x; std::memcpy(&x, p, 2); return BFloat16ToFloat(x); }
    case HVD_FLOAT32: { float x; std::memcpy(&x, p, 4); return x; }
    default: { double x; std::memcpy(&x, p, 8); return x; }
  }
}

// The number a flag byte becomes: set (1, or 0 under MAX) or clear.
double FlagNumber(bool set, hvd_reduce_op_t op) {
  return (op == HVD_MAX) != set ? 1 : 0;
}

// The reduced number of a flag every rank set: the size under SUM, 0 under
// MAX, 1 under MIN and PRODUCT.
double ReadyNumber(hvd_reduce_op_t op, int size) {
  return op == HVD_SUM ? size : op == HVD_MAX ? 0 : 1;
}

// The flags as element patterns of the dtype's width (the numbers involved
// are exact, so their bits are canonical and compare bitwise): one pass
// over the control bytes each way, run every negotiation.
template <typename S>
void EncodeFlags(uint8_t* out, const uint8_t* ctrl, size_t head, const uint8_t* set_bits,
                 const uint8_t* clear_bits) {
  S set, clear;
  std::memcpy(&set, set_bits, sizeof(S));
  std::memcpy(&clear, clear_bits, sizeof(S));
  for (size_t i = 0; i < head; ++i) {
    const S v = ctrl[i] != 0 ? set : clear;
    std::memcpy(out + i * sizeof(S), &v, sizeof(S));
  }
}

template <typename S>
void DecodeFlags(uint8_t* ctrl, const uint8_t* in, size_t head, const uint8_t* ready_bits) {
  S ready;
  std::memcpy(&ready, ready_bits, sizeof(S));
  for (size_t i = 0; i < head; ++i) {
    S v;
    std::memcpy(&v, in + i * sizeof(S), sizeof(S));
    ctrl[i] = v == ready ? 1 : 0;
  }
}

// Encodes ctrl[0, head) into out (numbers of dtype d for transport op op).
void EncodeControl(uint8_t* out, const uint8_t* ctrl, size_t head, hvd_dtype_t d,
                   hvd_reduce_op_t op, bool rank0) {
  uint8_t set[8], clear[8];
  PutNumber(set, d, FlagNumber(true, op));
  PutNumber(clear, d, FlagNumber(false, op));
  switch (DtypeSize(d)) {
    case 1: EncodeFlags<uint8_t>(out, ctrl, head, set, clear); break;
    case 2: EncodeFlags<uint16_t>(out, ctrl, head, set, clear); break;
    case 4: EncodeFlags<uint32_t>(out, ctrl, head, set, clear); break;
    default: EncodeFlags<uint64_t>(out, ctrl, head, set, clear); break;
  }
  const double identity = op == HVD_MIN ? 255 : op == HVD_PRODUCT ? 1 : 0;
  PutNumber(out + kProposalByte * DtypeSize(d), d,
            rank0 ? ctrl[kProposalByte] : identity);
}

// The bytes a MIN over the ranks' control bytes would have given.
void DecodeControl(uint8_t* ctrl, const uint8_t* in, size_t head, hvd_dtype_t d,
                   hvd_reduce_op_t op, int size) {
  uint8_t ready[8];
  PutNumber(ready, d, ReadyNumber(op, size));
  switch (DtypeSize(d)) {
    case 1: DecodeFlags<uint8_t>(ctrl, in, head, ready); break;
    case 2: DecodeFlags<uint16_t>(ctrl, in, head, ready); break;
    case 4: DecodeFlags<uint32_t>(ctrl, in, head, ready); break;
    default: DecodeFlags<uint64_t>(ctrl, in, head, ready); break;
  }
  ctrl[kProposalByte] = static_cast<uint8_t>(GetNumber(in + kProposalByte * DtypeSize(d), d));
}

std::string ListText(const int32_t* v, size_t n) {
  std::ostringstream os;
  os << "[";
  const size_t shown = std::min<size_t>(n, 16);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << v[i];
  if (n > shown) os << ", ... (" << n << " ranks)";
  os << "]";
  return os.str();
}

}  // namespace

// ---- ContextImpl ---------------------------------------------------------

class ContextImpl final : public CycleDriver {
 public:
  explicit ContextImpl(Config cfg)
      : cfg_(std::move(cfg)),
        log_(cfg_.log_level, cfg_.log_fn, cfg_.log_user) {
    log_.set_rank(cfg_.rank);
  }

  ~ContextImpl() override {
    Shutdown();
    ReleaseSets();
    device_transport_.reset();
    transport_.reset();
    boot_.reset();
  }

  Status Start();
  Result<std::shared_ptr<Handle>> Enqueue(Scope* scope, OpRequest&& req);
  // Stops the loop; pending operations complete with `why`.
  void Shutdown(const Status& why = Error(HVD_ERR_ABORTED, "the context has been shut down"));
  // After Shutdown: closes the transport and the store connection now
  // rather than with the last reference (process sets may keep one).
  void ReleaseTransport();
  // CycleDriver: runs cycles on a waiting caller's thread while the loop
  // thread is idle (see Loop).
  bool Drive(std::unique_lock<std::mutex>& lock, const Handle& h,
             std::chrono::steady_clock::time_point deadline) override;

  // Process sets: the collective request behind Context::Split and
  // CreateProcessSet (spec as above), and a set's destruction.
  Result<std::shared_ptr<Scope>> MakeSet(std::vector<int32_t> spec);
  Status CloseSet(Scope* set);

  const Config& cfg() const { return cfg_; }
  const std::shared_ptr<Scope>& root() const { return root_; }
  Result<int64_t> Query(const std::string& key) const {
    if (key == "caller_cycles" || key == "lazy_wake" || key == "piggybacked") {
      std::lock_guard<std::mutex> lock(mu_);
      if (key == "piggybacked") return static_cast<int64_t>(piggybacked_);
      return static_cast<int64_t>(key == "lazy_wake" ? lazy_wake_ : caller_cycles_run_);
    }
    if (!transport_) return Error(HVD_ERR_NOT_INITIALIZED, "no transport");
    return transport_->Query(key);
  }
  const char* transport_name() const { return transport_ ? transport_->name() : "none"; }
  Status TimelineCommand(bool start, const std::string& path, bool mark_cycles);
  Context::BufferStats buffer_stats() const {
    Context::BufferStats b;
    if (!executor_) return b;
    b.fusion_capacity = executor_->fusion().capacity();
    b.pool_spare_bytes = executor_->results().spare_bytes();
    b.staging_capacity = executor_->staging_capacity();
    return b;
  }
  Status CheckDevice(int device, const std::string& name, const void* data) {
    if (!executor_) return Error(HVD_ERR_NOT_INITIALIZED, "the context has not started");
    return executor_->cuda().Check(device, name, data);
  }

 private:
  struct TimelineCmd {
    bool start = false;
    std::string path;
    bool mark_cycles = false;
  };
  void Loop();
  bool RunCycle(std::unique_lock<std::mutex>& lock);
  bool CycleBody(bool shutting_down, uint64_t tl_seq, const TimelineCmd& tl_take);
  bool LoopHasWork() const;  // under mu_, the cycle not held
  // One negotiation for the context and all its sets (one allreduce).
  Status Negotiate(bool shutting_down, Clock::time_point now, bool* shutdown);
  uint64_t Execute(Scope& scope);  // returns the bytes moved
  Status FinishProcessSet(OpRequest& req, const Response& resp);
  void CloseAgreed(Scope& set);
  void Finish(Scope& scope, OpRequest& req, Status status);
  void FinishAll(Scope& scope, OpRequest* const* reqs, size_t n, const Status& status);
  void FailEverything(const Status& why);
  // In an elastic job, a lost peer (transport failure, timeout, a peer that
  // left) is a membership change: HVD_ERR_MEMBERSHIP_CHANGED, naming it.
  Status Membership(const Status& s) const;
  void ReleaseSets();
  Comm* SetDevice(Scope& sc);
  uint64_t set_generation_ = 0;  // groups made so far (loop thread): OpenDeviceSet's keys
  size_t pending() const;

  Config cfg_;
  Logger log_;
  std::unique_ptr<Bootstrap> boot_;  // the store (and its client) the transport may use
  std::unique_ptr<Transport> transport_;
  // A device-only transport beside it (HVD_TRANSPORT=nccl): the root
  // context's CUDA allreduces and broadcasts; null: none.
  std::unique_ptr<Transport> device_transport_;
  Timeline timeline_;
  std::unique_ptr<Autotuner> tuner_;  // made in Start()
  std::unique_ptr<Executor> executor_;  // made in Start(), once the transport is up
  int64_t fusion_threshold_ = 0;      // cfg_'s, or the autotuner's current choice
  // The peer timeout in force around each negotiation (seconds); 0 = none:
  // off, not below the transport timeout, or a transport without set_timeout.
  double peer_timeout_ = 0;
  std::shared_ptr<Scope> root_ = std::make_shared<Scope>();

  // Shared with user threads (guarded by mu_), and with handles (the signal).
  std::shared_ptr<LoopSignal> signal_ = std::make_shared<LoopSignal>();
  std::mutex& mu_ = signal_->mu;
  std::condition_variable& cv_ = signal_->cv;
  size_t queued_ = 0;                // requests in every scope's queue
  Clock::time_point first_enqueue_;  // of the oldest queued request
  Clock::time_point last_enqueue_;   // of the newest whose time was read (see Enqueue)
  uint64_t submits_ = 0;             // requests ever queued
  bool exact_enqueue_ = false;       // read the clock for every submit (timeline open)
  bool shutdown_requested_ = false;
  Status shutdown_reason_;  // what pending operations complete with (set with the flag)
  bool stopped_ = false;  // the loop has exited; enqueue fails with stop_reason_
  Status stop_reason_;
  std::thread thread_;
  bool loop_exited_ = false;  // under mu_
  std::condition_variable exit_cv_;
  // A timeline start/stop handed to the loop (under mu_): the latest asked
  // wins; tl_done_ is the last request number the loop applied, tl_result_
  // its outcome (exit_cv_ wakes the askers).
  bool tl_pending_ = false;
  TimelineCmd tl_cmd_;
  uint64_t tl_asked_ = 0, tl_done_ = 0;
  Status tl_result_;
  // The cycle is run by one thread at a time (under mu_: whether one does):
  // the loop thread, or a caller in Drive. Everything marked "background
  // thread only" belongs to that thread while it holds the cycle.
  bool cycle_held_ = false;
  bool caller_cycles_ = false;     // callers may run it (HVD_CALLER_CYCLES, the transport)
  uint64_t caller_cycles_run_ = 0;  // cycles run by callers (Query "caller_cycles")
  uint64_t piggybacked_ = 0;  // allreduces served by the negotiation (Query "piggybacked")
  int drive_waiters_ = 0;           // callers waiting in Drive for the cycle's end
  bool mark_cycles_ = false;  // background thread only
  // The cycle's pacing (background thread only; set in Start).
  Clock::duration cycle_{};           // the cycle time (autotune may change it)
  Clock::duration settle_{};          // see Loop
  Clock::duration heartbeat_{};       // an idle rank negotiates this often
  Clock::duration set_heartbeat_{};   // ... while process sets exist
  Clock::time_point next_;            // the next negotiation, while requests wait
  bool cycle_changed_ = false;        // the last cycle changed something
  bool cycle_progress_ = false;       // ... other than a set being busy
  Clock::time_point last_cycle_;      // the end of the last negotiation
  // Lazy wake-ups (under mu_; see Drive).
  int callers_took_ = 0;   // drives in a row that took submitted requests
  bool lazy_wake_ = false;
  std::vector<std::shared_ptr<Scope>> dropped_;  // sets closed on this rank alone
  static constexpr int kShutdownGraceS = 2;
  std::once_flag shutdown_once_;
  // What a process-set request made (null: this rank is not a member), for
  // its caller to collect, by handle.
  std::unordered_map<const Handle*, std::shared_ptr<Scope>> made_;
  std::vector<std::weak_ptr<Scope>> all_sets_;  // every set made here, for the shutdown

  // Background thread only.
  // The process-set table by slot: the sets this rank belongs to (null where
  // it does not, or the slot is free), and which slots any rank holds (the
  // same on every rank: slots are taken by the context's own responses and
  // freed by what a negotiation shows).
  std::vector<std::shared_ptr<Scope>> sets_;
  std::vector<bool> slot_live_;
  // Each slot's cache extent as the last negotiation showed it (the same on
  // every rank), and where its bytes start in this negotiation's.
  std::vector<size_t> slot_extent_, slot_at_;
  bool sets_busy_ = false;  // the last negotiation showed a set with pending requests
  std::vector<uint8_t> ctrl_;  // the packed control bytes
  // A small allreduce riding in the negotiation (HVD_PIGGYBACK; see the
  // encoding above). The plan is made from the context's responses, alike
  // on every rank: the last small host allreduce that a cycle served alone.
  // While the cache holds it, no process set exists and every rank has the
  // switch on, each negotiation carries this rank's prescaled tensor (zeros
  // where it has none ready) after the control bytes; where those show the
  // slot ready on every rank, the reduced tensor is its result and the
  // cycle runs no second collective for it.
  struct Piggyback {
    int slot = -1;  // the plan; -1: none
    // The cache entry it was made from: the plan holds while the slot holds
    // this entry (an eviction, or a request that changed under the same
    // name and was cached anew, puts another entry there and ends it).
    RequestDescs all;
    hvd_dtype_t dtype = HVD_FLOAT32;
    hvd_reduce_op_t op = HVD_SUM;
    size_t count = 0;
    double prescale = 1, postscale = 1;
    int served = -1;  // this cycle's: the slot whose result is in buf
    size_t result_at = 0;  // where in buf
    std::vector<uint8_t> buf;
  } piggy_;
  bool PiggybackUsable(size_t root_slots) const;
  Status PiggybackAllreduce(size_t head);
  void PlanPiggyback();
  // Execute's scratch (background thread only), kept between cycles.
  struct ExecUnit {
    std::vector<OpRequest*> batch;  // allreduce batch
    OpRequest* single = nullptr;
    const Response* resp = nullptr;
    size_t bytes = 0;
  };
  struct ExecOpenBatch {
    size_t unit;
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    double pre, post;
    const Response* devices;  // null: host tensors; else every rank's device as in it
  };
  struct {
    std::vector<OpRequest> reqs;
    std::vector<uint8_t> have;
    std::vector<ExecUnit> units;
    std::vector<ExecOpenBatch> open;
  } exec_;
};

Status ContextImpl::Start() {
  HVD_LOG(log_, HVD_LOG_DEBUG, "config: " << cfg_.ToString());
  ReportStartStage(StartStage::kStarted, cfg_.hostname, log_);  // for hvdrun --transport mpi
  boot_ = std::make_unique<Bootstrap>(&cfg_, &log_);
  HVD_ASSIGN_OR_RETURN(transport_, boot_->Run());
  device_transport_ = boot_->TakeDevice();
  log_.set_rank(cfg_.rank);
  // The peer timeout bounds the negotiation only: every live rank enters it
  // at least once per heartbeat, whatever its user threads do, so a peer
  // that has not entered it for that long is stopped or cut off. Data
  // transfers keep the transport timeout (they may legitimately take long).
  if (cfg_.size > 1 && cfg_.peer_timeout_s > 0 &&
      (cfg_.transport_timeout_s <= 0 || cfg_.peer_timeout_s < cfg_.transport_timeout_s)) {
    if (transport_->has_set_timeout()) {
      peer_timeout_ = cfg_.peer_timeout_s;
    } else {
      HVD_LOG(log_, HVD_LOG_DEBUG,
              "the " << transport_->name()
                     << " transport cannot change its limit per call: no peer timeout (a silent "
                        "peer is noticed at the transport timeout)");
    }
  }
  Scope& root = *root_;
  root.members.resize(static_cast<size_t>(cfg_.size));
  for (int r = 0; r < cfg_.size; ++r) root.members[static_cast<size_t>(r)] = r;
  root.rank = cfg_.rank;
  root.size = cfg_.size;
  root.local_rank = cfg_.local_rank;
  root.local_size = cfg_.local_size;
  root.cross_rank = cfg_.cross_rank;
  root.cross_size = cfg_.cross_size;
  root.comm = transport_.get();
  root.plane = std::make_unique<CommPlane>(root.comm);
  root.controller = std::make_unique<Controller>(
      cfg_.rank, cfg_.size, cfg_.cache_capacity,
      StallConfig{cfg_.stall_warning_s, cfg_.stall_shutdown_s}, &log_);
  root.controller->set_piggyback(cfg_.piggyback != 0);

  if (!cfg_.timeline_path.empty() && cfg_.rank == 0) {
    HVD_CHECK(timeline_.Open(cfg_.timeline_path));
    mark_cycles_ = cfg_.timeline_mark_cycles;  // before the background thread starts
    exact_enqueue_ = true;
  }
  executor_ = std::make_unique<Executor>(transport_.get(), &timeline_,
                                         static_cast<size_t>(cfg_.buffer_pool_bytes));
  executor_->Use(transport_.get(), device_transport_.get());
  executor_->set_local_rank(cfg_.local_rank);
  executor_->set_async_completion(cfg_.cuda_async_completion == 1);
  fusion_threshold_ = cfg_.fusion_threshold;
  tuner_ = std::make_unique<Autotuner>(cfg_, &log_);
  // Hierarchical collectives the transport chose by itself (not forced by
  // HVD_HIERARCHICAL): the tuner tries them off too. Every rank has the same
  // hierarchy (decided from every rank's host), so every rank tunes alike.
  if (cfg_.hierarchical < 0 && transport_->hierarchical()) tuner_->TuneHierarchical();
  const int64_t initial = std::min(cfg_.fusion_threshold, cfg_.fusion_buffer_initial);
  if (initial > 0) {
    // Fault the fusion buffer in now rather than during the first steps.
    if (executor_->fusion().ReserveFaulted(static_cast<size_t>(initial)) == nullptr) {
      return Error(HVD_ERR_NO_MEMORY, "cannot allocate the fusion buffer's initial " +
                                          std::to_string(initial) +
                                          " bytes (HVD_FUSION_BUFFER_INITIAL)");
    }
  }
  // The loop's pacing (see Loop).
  using std::chrono::duration;
  using std::chrono::duration_cast;
  cycle_ = duration_cast<Clock::duration>(duration<double, std::milli>(cfg_.cycle_time_ms));
  // How long a burst may pause between two submits and still be one batch:
  // C callers submit every 0.3-2 us, Python frontends every 5-15 us here.
  settle_ = std::min<Clock::duration>(cycle_, std::chrono::microseconds(HVD_SETTLE_US));
  // An idle rank still negotiates this often: peers with work wait for it
  // inside the negotiation collective, which must end well within the
  // transport timeout.
  double heartbeat_s = 0.1;
  if (cfg_.transport_timeout_s > 0) heartbeat_s = std::min(heartbeat_s, cfg_.transport_timeout_s / 4);
  if (peer_timeout_ > 0) heartbeat_s = std::min(heartbeat_s, peer_timeout_ / 4);
  heartbeat_ = duration_cast<Clock::duration>(duration<double>(heartbeat_s));
  set_heartbeat_ = std::min<Clock::duration>(heartbeat_, std::chrono::milliseconds(10));
  next_ = last_cycle_ = Clock::now();
  // Callers may run the cycle where the transport can be called from any
  // thread (one at a time), unless HVD_CALLER_CYCLES=0.
  caller_cycles_ = cfg_.caller_cycles != 0 && transport_->any_thread() &&
                   (!device_transport_ || device_transport_->any_thread());
  HVD_LOG(log_, HVD_LOG_DEBUG,
          "cycles on waiting callers' threads: "
              << (caller_cycles_ ? "on"
                                 : cfg_.caller_cycles == 0
                                       ? "off (HVD_CALLER_CYCLES=0)"
                                       : "off (the transport is bound to the loop thread)"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (caller_cycles_) signal_->driver = this;
  }
  thread_ = std::thread([this] {
    Loop();
    std::lock_guard<std::mutex> lock(mu_);
    loop_exited_ = true;
    exit_cv_.notify_all();
  });
  return Status::Ok();
}

Status ContextImpl::TimelineCommand(bool start, const std::string& path, bool mark_cycles) {
  const char* fn = start ? "hvd_timeline_start" : "hvd_timeline_stop";
  if (start && path.empty()) return InvalidArgument(std::string(fn) + ": path is empty");
  if (cfg_.rank != 0) return Status::Ok();  // rank 0 writes the timeline
  std::unique_lock<std::mutex> lock(mu_);
  if (loop_exited_ || shutdown_requested_) {
    return Error(HVD_ERR_ABORTED, std::string(fn) + ": the context has been shut down");
  }
  const uint64_t mine = ++tl_asked_;
  tl_cmd_ = TimelineCmd{start, path, mark_cycles};
  tl_pending_ = true;
  cv_.notify_all();
  constexpr int kWaitS = 30;
  if (!exit_cv_.wait_for(lock, std::chrono::seconds(kWaitS),
                         [&] { return tl_done_ >= mine || loop_exited_; })) {
    return Error(HVD_ERR_TIMEOUT, std::string(fn) + ": the background thread did not take it within " +
                                      std::to_string(kWaitS) + " s (busy in a transfer?)");
  }
  if (tl_done_ < mine) return Error(HVD_ERR_ABORTED, std::string(fn) + ": the context has been shut down");
  return tl_result_;
}

Result<std::shared_ptr<Handle>> ContextImpl::Enqueue(Scope* scope, OpRequest&& req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_ || shutdown_requested_) {
    return stopped_ && !stop_reason_.ok()
               ? stop_reason_
               : Error(HVD_ERR_ABORTED, "the context has been shut down");
  }
  if (scope->closed) return scope->closed_reason;
  if (req.type == OpType::kBarrier) {
    req.tensors.front().name = "barrier#" + std::to_string(scope->barrier_count++);
  } else if (req.type == OpType::kJoin) {
    req.tensors.front().name = "join";
  } else if (req.type == OpType::kProcessSet) {
    req.tensors.front().name = "process_set#" + std::to_string(scope->set_count++);
  } else if (req.type == OpType::kCloseSet) {
    req.tensors.front().name = "process_set.destroy";
  }
  // Barriers and process-set calls are named uniquely above: no name to
  // check or intern.
  const bool unique = req.type == OpType::kBarrier || req.type == OpType::kProcessSet;
  for (size_t i = 0; i < req.tensors.size() && !unique; ++i) {
    const uint32_t id = scope->names.Acquire(req.tensors[i].name);
    if (id == kNoNameId) {
      for (size_t j = 0; j < i; ++j) {
        scope->names.Release(req.tensors[j].name_id);
        req.tensors[j].name_id = kNoNameId;
      }
      return Error(HVD_ERR_DUPLICATE_NAME,
                   "an operation on '" + req.tensors[i].name +
                       "' is already in flight; wait for it before reusing the name");
    }
    req.tensors[i].name_id = id;
  }
  std::shared_ptr<Handle> h = req.handle;
  const bool was_empty = queued_ == 0;
  // The clock is read for a burst's first submit only (a clock read costs
  // about a tenth of a submit here); the loop's settle counts the later
  // ones (submits_). The timeline's negotiation spans need every submit's.
  if (was_empty || exact_enqueue_) last_enqueue_ = Clock::now();
  if (was_empty) first_enqueue_ = last_enqueue_;
  req.enqueued = last_enqueue_;
  ++submits_;
  signal_->caller_waits = false;
  req.handle->set_signal(signal_);
  scope->queue.push_back(std::move(req));
  ++queued_;
  // The loop waits for the queues to become non-empty; later submits of a
  // burst need no wake-up (it sees submits_ move when it settles).
  if (was_empty && !lazy_wake_) cv_.notify_all();
  return h;
}

void ContextImpl::Finish(Scope& scope, OpRequest& req, Status status) {
  OpRequest* one = &req;
  FinishAll(scope, &one, 1, status);
}

// One lock for the whole batch: a fused step completes hundreds of requests.
void ContextImpl::FinishAll(Scope& scope, OpRequest* const* reqs, size_t n, const Status& given) {
  // Successes (the hot path) pass through untouched; only failures of an
  // elastic job are reworded.
  Status mapped;
  const Status& status = given.ok() || !cfg_.elastic ? given : (mapped = Membership(given));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      for (TensorSpec& t : reqs[i]->tensors) {
        scope.names.Release(t.name_id);
        t.name_id = kNoNameId;  // a second Finish must not end a later submit's flight
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    OpRequest& req = *reqs[i];
    if (!status.ok() && status.code() != HVD_ERR_ABORTED) {
      HVD_LOG(log_, HVD_LOG_DEBUG, req.handle->description() << " failed: " << status.message());
    }
    req.handle->Complete(status);
  }
}

size_t ContextImpl::pending() const {
  size_t n = root_->controller->pending();
  for (const auto& s : sets_) {
    if (s) n += s->controller->pending();
  }
  return n;
}

Status ContextImpl::Membership(const Status& s) const {
  if (!cfg_.elastic) return s;
  switch (s.code()) {
    case HVD_ERR_TRANSPORT:
    case HVD_ERR_TIMEOUT:
    case HVD_ERR_RENDEZVOUS:
      return Error(HVD_ERR_MEMBERSHIP_CHANGED,
                   "the elastic job lost a peer (epoch " + std::to_string(cfg_.epoch) +
                       "): " + s.message() + "; reset the context (hvd.elastic.run does)");
    default:
      return s;
  }
}

void ContextImpl::FailEverything(const Status& given) {
  const Status why = Membership(given);
  std::vector<std::shared_ptr<Scope>> scopes{root_};
  for (const auto& w : all_sets_) {
    if (auto s = w.lock()) scopes.push_back(std::move(s));
  }
  std::vector<std::vector<OpRequest>> queued(scopes.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) stop_reason_ = why;  // keep the first reason
    stopped_ = true;
    for (size_t i = 0; i < scopes.size(); ++i) {
      queued[i].swap(scopes[i]->queue);
      if (i > 0 && !scopes[i]->closed) {
        scopes[i]->closed = true;
        scopes[i]->closed_reason =
            Error(why.code(), "the process set's parent context stopped: " + why.message());
      }
    }
    queued_ = 0;
  }
  for (size_t i = 0; i < scopes.size(); ++i) {
    Scope& sc = *scopes[i];
    const Status st = i == 0 ? why : sc.closed_reason;
    if (sc.controller) {
      for (OpRequest& r : sc.controller->TakeAll()) Finish(sc, r, st);
    }
    for (OpRequest& r : queued[i]) Finish(sc, r, st);
    for (OpRequest& r : sc.batch) Finish(sc, r, st);
    sc.batch.clear();
  }
}

// The sets' communicators go before the transport they run over (the loop
// has stopped: nothing runs over them).
void ContextImpl::ReleaseSets() {
  std::vector<std::unique_ptr<Comm>> comms;
  std::vector<std::unique_ptr<Transport>> devices;  // before their keys (below)
  std::vector<std::unique_ptr<PluginKv>> kvs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& w : all_sets_) {
      if (auto s = w.lock()) {
        comms.push_back(std::move(s->own_comm));
        kvs.push_back(std::move(s->device_kv));
        devices.push_back(std::move(s->device));
      }
    }
  }
  devices.clear();
  sets_.clear();
}

// A set's device transport, opened the first time its responses hold CUDA
// tensors (the same responses on every member, so every member opens it in
// the same cycle; a set that only ever moves host tensors costs nothing).
// Null where the set has none, or opening failed (device_error says why).
Comm* ContextImpl::SetDevice(Scope& sc) {
  if (sc.device) return sc.device.get();
  if (sc.device_tried) return nullptr;
  bool cuda = false;
  for (const Response& r : sc.responses) {
    if (!r.error.ok() || !r.all) continue;
    for (const RequestDesc& d : *r.all) cuda = cuda || d.device != HVD_DEVICE_CPU;
  }
  if (!cuda) return nullptr;
  sc.device_tried = true;
  Bootstrap::DeviceSet spec;
  spec.members = sc.members;
  spec.set_rank = sc.rank;
  spec.cross_rank = sc.cross_rank;
  spec.cross_size = sc.cross_size;
  spec.generation = sc.generation;
  auto kv = std::make_unique<PluginKv>();
  auto t = boot_->OpenDeviceSet(spec, *transport_, kv.get());
  if (!t.ok()) {
    sc.device_error = t.status().Wrap(
        "opening the " + std::string(device_transport_->name()) + " transport for process " +
        sc.label + " (its CUDA tensors) on rank " + std::to_string(cfg_.rank) + " (set rank " +
        std::to_string(sc.rank) + ")");
    HVD_LOG(log_, HVD_LOG_ERROR, "rank " << cfg_.rank << ": " << sc.device_error.message());
    return nullptr;
  }
  HVD_LOG(log_, HVD_LOG_INFO, "rank " << cfg_.rank << ": process " << sc.label << ": CUDA tensors over "
                                      << t.value()->name() << " (set rank " << sc.rank << " of "
                                      << sc.size << ")");
  std::lock_guard<std::mutex> lock(mu_);
  sc.device_kv = std::move(kv);
  sc.device = std::move(t).value();
  return sc.device.get();
}

void ContextImpl::Shutdown(const Status& why) {
  std::call_once(shutdown_once_, [this, &why] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_reason_ = why;
      shutdown_requested_ = true;
      signal_->driver = nullptr;  // no caller starts a cycle from here on
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      // A live peer enters every negotiation within a heartbeat (0.1 s), so
      // a loop still inside a transport call after the grace is stuck on a
      // peer that stopped answering or on a long transfer this rank is
      // leaving anyway: abort it (the transport makes the call return at
      // once) rather than wait for the transport timeout.
      std::unique_lock<std::mutex> lock(mu_);
      // (A caller's cycle in progress counts as the loop's.)
      if (!exit_cv_.wait_for(lock, std::chrono::seconds(kShutdownGraceS),
                             [this] { return loop_exited_ && !cycle_held_; }) &&
          transport_) {
        lock.unlock();
        // A timeout's status: the peer it waits for may be gone for good.
        const std::string why = "rank " + std::to_string(cfg_.rank) +
                                " is shutting down its context while a collective is blocked";
        bool aborted = transport_->Abort(HVD_ERR_TIMEOUT, why);
        if (device_transport_) aborted = device_transport_->Abort(HVD_ERR_TIMEOUT, why) && aborted;
        {
          std::lock_guard<std::mutex> sets_lock(mu_);
          for (const auto& w : all_sets_) {
            auto set = w.lock();
            if (set && set->device) aborted = set->device->Abort(HVD_ERR_TIMEOUT, why) && aborted;
          }
        }
        HVD_LOG(log_, HVD_LOG_WARNING,
                "shutdown: the background thread is still inside a collective after "
                    << kShutdownGraceS << " s; "
                    << (aborted ? "aborted it" : "the transport cannot abort: waiting for its timeout"));
      }
    }
    if (thread_.joinable()) thread_.join();
    {
      // A caller's cycle ends with the loop's (the transport was aborted if
      // it was stuck), and none starts after it.
      std::unique_lock<std::mutex> lock(mu_);
      exit_cv_.wait(lock, [this] { return !cycle_held_; });
    }
    FailEverything(why);
    ReleaseSets();
    timeline_.Close();
  });
}

void ContextImpl::ReleaseTransport() {
  Shutdown();
  executor_.reset();
  root_->plane.reset();
  root_->comm = nullptr;
  device_transport_.reset();
  transport_.reset();
  boot_.reset();
}

Result<std::shared_ptr<Scope>> ContextImpl::MakeSet(std::vector<int32_t> spec) {
  spec.insert(spec.begin() + 1, HostHash(shm::HostIdentity() + "|" + cfg_.hostname));
  OpRequest req;
  req.type = OpType::kProcessSet;
  TensorSpec t;
  t.dtype = HVD_INT32;
  t.shape = {static_cast<int64_t>(spec.size())};
  t.input = spec.data();
  req.tensors.push_back(std::move(t));
  req.handle = std::make_shared<Handle>("process set creation");
  HVD_ASSIGN_OR_RETURN(std::shared_ptr<Handle> h, Enqueue(root_.get(), std::move(req)));
  // Bounded: every rank of the context takes part, or the stall inspector
  // (or the context stopping) ends it.
  const Status st = h->Wait(-1);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = made_.find(h.get());
  std::shared_ptr<Scope> set;
  if (it != made_.end()) {
    set = std::move(it->second);
    made_.erase(it);
  }
  if (!st.ok()) return st;
  return set;
}

Status ContextImpl::CloseSet(Scope* set) {
  OpRequest req;
  req.type = OpType::kCloseSet;
  TensorSpec t;
  t.dtype = HVD_UINT8;
  t.shape = {0};
  req.tensors.push_back(std::move(t));
  req.handle = std::make_shared<Handle>("process set destruction");
  auto h = Enqueue(set, std::move(req));
  if (!h.ok()) {
    // Already closed, or the context stopped: nothing left to agree on.
    return Status::Ok();
  }
  Status st = (*h)->Wait(-1);
  // The parent stopped (here or on another rank) before the members agreed:
  // the set is gone with it, which is what destroying it asked for.
  if (st.code() == HVD_ERR_ABORTED) return Status::Ok();
  if (!st.ok()) {
    // The members did not agree (a member never destroyed it: the stall
    // inspector ended the wait): this rank leaves the set alone (the loop
    // drops it); its pending requests fail.
    std::lock_guard<std::mutex> lock(mu_);
    if (!set->closed) {
      set->closed = true;
      set->closed_reason = Error(HVD_ERR_ABORTED, "the process set was destroyed on this rank");
    }
    cv_.notify_all();
  }
  return st;
}

// When the loop negotiates:
//  * Work arrives: a submit wakes it at once. It then waits until no further
//    submit has come for a settle time (a burst of submits is one batch, and
//    so one fusion bucket), at most one cycle time after the first. Where
//    submits come one at a time (the last 8 settle windows caught nothing,
//    and only one request is queued) it skips the settle, probing every
//    16th wake-up.
//  * Requests wait on other ranks: if the last negotiation changed anything
//    (something completed, or some rank announced new requests), it goes
//    straight into the next one: the ranks are mid-burst, and the others'
//    remaining submits are on their way. Otherwise it negotiates again every
//    cycle time, counted from the end of the last negotiation (all ranks
//    leave that collective together, so their cycles stay in phase).
//  * Nothing is pending here: it sleeps until a submit, shutdown, or a
//    heartbeat. No operation can complete without this rank's submit, so
//    ranks that do have work simply wait inside the negotiation collective;
//    the heartbeat keeps that wait well below the transport timeout and lets
//    an idle rank notice shutdown, stalls and dead peers.
//  * Silent peers: the loop thread runs whatever the user's threads do, so
//    a live rank enters the negotiation at least once per heartbeat (or as
//    soon as its current transfers end). Where the transport can change its
//    limit per call, the negotiation runs under the peer timeout
//    (HVD_PEER_TIMEOUT): a rank that has not entered it by then is stopped
//    or cut off, and every rank's pending handles fail naming it.
//  * Process sets: one negotiation serves the context and all its sets, so
//    every rank takes part in the rounds that run a set's requests, member
//    or not. While the last negotiation showed a set with pending requests,
//    every rank negotiates again at once (ranks outside it wait inside the
//    collective while its members run their data; a set of every rank not
//    after a round that served every request pending in it), and the
//    heartbeat is 10 ms while sets exist, so a set's first request after a
//    quiet spell waits at most that for the ranks outside it. A rank outside
//    a busy set can wait in the negotiation for as long as the set's
//    transfers take, so with sets the negotiation keeps the transport
//    timeout: no peer timeout.
void ContextImpl::Loop() {
#if defined(__linux__)
  // The default 50 us of timer slack would be added to every wake-up.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  // Named for top -H, perf and debuggers.
  prctl(PR_SET_NAME, "hvd-loop", 0UL, 0UL, 0UL);
#endif
  // Adaptive settle (see below): after kQuietAfter wake-ups in a row whose
  // settle window caught nothing, lone submits are negotiated at once.
  constexpr int kQuietAfter = 8;
  constexpr uint64_t kProbeEvery = 16;
  int quiet_wakeups = 0;
  uint64_t wakeups = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    // Lazy wake-ups (see Drive): submits do not wake this thread; it
    // looks for work every cycle time instead.
    const Clock::duration poll = lazy_wake_ ? std::min(cycle_, heartbeat_) : heartbeat_;
    if (cycle_held_) {
      // A caller runs the cycle: it wakes this thread when it ends with
      // work left for the loop (LoopHasWork), else the heartbeat (or the
      // lazy poll) does.
      cv_.wait_until(lock, Clock::now() + poll, [this] { return !cycle_held_; });
      continue;
    }
    auto ready = [this] {
      return cycle_held_ || shutdown_requested_ || queued_ > 0 || tl_pending_;
    };
    if (pending() == 0 && !sets_busy_) {
      // Negotiate at least once per heartbeat (a caller's cycle counts).
      const auto due = last_cycle_ + (slot_live_.empty() ? heartbeat_ : set_heartbeat_);
      cv_.wait_until(lock, std::min(due, Clock::now() + poll), ready);
      if (!ready() && Clock::now() < due) continue;  // a lazy poll that found nothing
    } else {
      cv_.wait_until(lock, next_, ready);
    }
    if (cycle_held_) continue;
    if (queued_ > 0 && !shutdown_requested_) {
      // Settle only where submits come in bursts: several already queued
      // by the time this thread runs, or a recent settle window caught
      // more; a probe every kProbeEvery-th wake-up notices a change. Where
      // callers run cycles, always: a lone submit that is waited for is
      // run by its caller (the wait ends the settle), and this thread,
      // woken by the submit (on a rank bound to one core, ahead of the
      // caller), must not take the cycle from it.
      ++wakeups;
      const size_t queued = queued_;
      if (caller_cycles_ || queued > 1 || quiet_wakeups < kQuietAfter ||
          wakeups % kProbeEvery == 0) {
        const auto limit = first_enqueue_ + cycle_;
        // A caller blocking on a handle ends the burst at once (and may
        // run the cycle itself).
        auto done = [this] { return shutdown_requested_ || signal_->caller_waits || cycle_held_; };
        // Submits after the first do not read the clock: where some came
        // since the last look, the burst is taken to go on from now.
        uint64_t seen = submits_;
        Clock::time_point mark = last_enqueue_;
        for (;;) {
          const auto until = std::min(mark + settle_, limit);
          if (Clock::now() >= until) break;
          if (cv_.wait_until(lock, until, done)) break;
          if (submits_ != seen) {
            seen = submits_;
            mark = Clock::now();
          }
        }
        quiet_wakeups = queued > 1 || queued_ > queued ? 0 : quiet_wakeups + 1;
      }
      if (cycle_held_) continue;
    }
    // A caller's cycle may have stopped the context while this thread
    // waited (the settle releases the lock): no cycle after that.
    if (stopped_) break;
    if (lazy_wake_ && queued_ > 0) {
      // This thread takes submitted requests: nobody waited for them (or
      // not at once), so submits wake this thread again.
      lazy_wake_ = false;
      callers_took_ = 0;
    }
    if (drive_waiters_ > 0) {
      // A caller waits to run the cycle (see Drive): it takes this one.
      cv_.wait_until(lock, Clock::now() + poll,
                     [this] { return drive_waiters_ == 0 || stopped_ || shutdown_requested_; });
      continue;
    }
    cycle_held_ = true;
    const bool go_on = RunCycle(lock);
    cycle_held_ = false;
    if (drive_waiters_ > 0) cv_.notify_all();  // a caller waits to take the next cycle
    if (!go_on) break;
  }
}

bool ContextImpl::LoopHasWork() const {
  return shutdown_requested_ || queued_ > 0 || tl_pending_ || pending() > 0 || sets_busy_;
}

// Lazy wake-ups: after kLazyAfter drives in a row that took submitted
// requests (their callers waited for them at once), the loop thread's
// wake-up on each submit only costs the submitter a system call and a
// thread that competes for a CPU. Submits then leave the loop asleep; it
// polls every cycle time (HVD_CYCLE_TIME: the longest a submit waits for
// more to fuse with) and goes back to being woken by every submit the first
// time a poll finds one still queued.
bool ContextImpl::Drive(std::unique_lock<std::mutex>& lock, const Handle& h,
                        std::chrono::steady_clock::time_point deadline) {
  constexpr int kLazyAfter = 8;
  if (!caller_cycles_ || stopped_ || shutdown_requested_) return false;
  if (cycle_held_) {
    // The loop (or another caller) is inside a cycle: wait for its end and
    // take the next one, unless that cycle completed the handle. Without
    // this, a caller whose wait came while the loop finished the cycle of
    // its previous operation found the loop in every later cycle too: the
    // loop took each next request, the caller's wait came during that
    // cycle, and so on (6-8 us against 1.2 us per small operation).
    // Until the caller's deadline at the most.
    auto free_or_done = [&] {
      return !cycle_held_ || h.done() || stopped_ || shutdown_requested_;
    };
    ++drive_waiters_;
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      cv_.wait(lock, free_or_done);
    } else {
      cv_.wait_until(lock, deadline, free_or_done);
    }
    // The loop does not start a cycle while callers wait for one: tell it
    // when none does any more.
    if (--drive_waiters_ == 0) cv_.notify_all();
    if (cycle_held_ || h.done() || stopped_ || shutdown_requested_) return false;
  }
  if (queued_ > 0 && ++callers_took_ >= kLazyAfter) lazy_wake_ = true;
  cycle_held_ = true;
  bool go_on = true;
  // Until the handle completes, or a cycle made no progress (the request
  // waits for other ranks: the loop paces the next negotiations). A busy
  // process set alone is no progress: its requests may wait for a submit
  // this very thread has yet to make.
  do {
    go_on = RunCycle(lock);
    ++caller_cycles_run_;
  } while (go_on && cycle_progress_ && !h.done() && !shutdown_requested_);
  cycle_held_ = false;
  if (drive_waiters_ > 0) cv_.notify_all();  // another caller waits for the cycle
  bool round_only = false;
  if (go_on && sets_busy_ && h.done()) {
    // Process sets: the round every rank negotiates after a set's operation
    // (see Loop) is left to the loop thread a settle time later, so that
    // this caller's next wait, if it comes at once, runs that round with
    // its next request in it; run by the loop at once, the round held the
    // cycle when the caller next waited. A lazy loop polls every cycle time
    // and finds the round then: where nothing else waits, it is not woken
    // (a wake-up per operation costs the caller a system call).
    next_ = std::max(next_, Clock::now() + settle_);
    round_only = lazy_wake_ && !shutdown_requested_ && queued_ == 0 && !tl_pending_ &&
                 pending() == 0;
  }
  if (!go_on || stopped_) {
    cv_.notify_all();  // the loop exits (it sees stopped_)
  } else if (LoopHasWork() && !round_only) {
    cv_.notify_all();
  }
  if (shutdown_requested_) exit_cv_.notify_all();
  return true;
}

// One cycle: take what the user threads queued, negotiate, run the
// responses. Called with lock held and cycle_held_ set by the caller (the
// loop thread or Drive), which is the only thread touching the cycle's
// state meanwhile; returns with lock held. False: the context stopped.
bool ContextImpl::RunCycle(std::unique_lock<std::mutex>& lock) {
  const bool shutting_down = shutdown_requested_;
  TimelineCmd tl_take;
  uint64_t tl_seq = 0;
  if (tl_pending_) {
    tl_take = std::move(tl_cmd_);
    tl_seq = tl_asked_;
    tl_pending_ = false;
  }
  root_->batch.swap(root_->queue);
  for (auto& set : sets_) {
    if (!set) continue;
    set->batch.swap(set->queue);
    if (set->closed) dropped_.push_back(std::move(set));  // its destruction failed here
  }
  queued_ = 0;
  lock.unlock();
  const bool go_on = CycleBody(shutting_down, tl_seq, tl_take);
  lock.lock();
  return go_on;
}

bool ContextImpl::CycleBody(bool shutting_down, uint64_t tl_seq, const TimelineCmd& tl_take) {
  using std::chrono::duration;
  using std::chrono::duration_cast;
  for (auto& set : dropped_) {
    for (OpRequest& r : set->batch) Finish(*set, r, set->closed_reason);
    set->batch.clear();
    for (OpRequest& r : set->controller->TakeAll()) Finish(*set, r, set->closed_reason);
    set->own_comm.reset();
  }
  dropped_.clear();
  auto now = Clock::now();
  if (tl_seq != 0) {
    Status r = Status::Ok();
    if (tl_take.start) {
      r = timeline_.Open(tl_take.path);
      mark_cycles_ = r.ok() && tl_take.mark_cycles;
    } else {
      timeline_.Close();
      mark_cycles_ = false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      tl_result_ = r;
      tl_done_ = tl_seq;
      exact_enqueue_ = timeline_.enabled();
    }
    exit_cv_.notify_all();
  }
  if (mark_cycles_) timeline_.Instant("CYCLE_START", now);
  uint64_t full_rounds = 0;
  for (Scope* sc = root_.get(); sc != nullptr;) {
    for (OpRequest& r : sc->batch) sc->controller->Add(std::move(r), now);
    sc->batch.clear();
    full_rounds += sc->controller->full_rounds();
    // Next scope: the member sets in slot order.
    Scope* following = nullptr;
    for (size_t k = sc->slot < 0 ? 0 : static_cast<size_t>(sc->slot) + 1; k < sets_.size(); ++k) {
      if (sets_[k]) {
        following = sets_[k].get();
        break;
      }
    }
    sc = following;
  }

  bool shutdown = false;
  root_->controller->set_proposal(tuner_->Proposal());
  // The negotiation runs under the peer timeout, the transfers under the
  // transport timeout (with process sets, both under the transport's).
  const bool peer_limit = peer_timeout_ > 0 && slot_live_.empty();
  Status s = peer_limit ? transport_->SetTimeout(peer_timeout_, HVD_TRANSPORT_LIMIT_PEER)
                        : Status::Ok();
  if (s.ok()) s = Negotiate(shutting_down, now, &shutdown);
  if (s.ok() && peer_limit) {
    s = transport_->SetTimeout(cfg_.transport_timeout_s, HVD_TRANSPORT_LIMIT_TRANSFER);
  }
  bool progress = !root_->responses.empty();
  uint64_t full_rounds_after = root_->controller->full_rounds();
  for (const auto& set : sets_) {
    if (!set) continue;
    progress = progress || !set->responses.empty();
    full_rounds_after += set->controller->full_rounds();
  }
  progress = progress || full_rounds_after != full_rounds;
  const bool changed = progress || sets_busy_;
  cycle_progress_ = progress;
  cycle_changed_ = changed;
  last_cycle_ = Clock::now();
  next_ = changed ? last_cycle_ : last_cycle_ + cycle_;
  if (!s.ok()) {
    HVD_LOG(log_, HVD_LOG_ERROR, s.message());
    FailEverything(Error(s.code(), "the context can no longer communicate: " + s.message()));
    return false;
  }
  if (shutdown) {
    FailEverything(shutting_down ? shutdown_reason_
                   : cfg_.elastic
                       ? Error(HVD_ERR_MEMBERSHIP_CHANGED,
                               "another rank left the elastic job's epoch " +
                                   std::to_string(cfg_.epoch) +
                                   "; reset the context (hvd.elastic.run does)")
                       : Error(HVD_ERR_ABORTED, "another rank shut down its context"));
    return false;
  }
  TuneParams tuned;
  if (tuner_->Apply(root_->controller->decided(), &tuned)) {
    // Every rank switches in this same cycle, before bucketing its responses.
    fusion_threshold_ = tuned.fusion_threshold;
    cycle_ = duration_cast<Clock::duration>(duration<double, std::milli>(tuned.cycle_time_ms));
    settle_ = std::min<Clock::duration>(cycle_, std::chrono::microseconds(HVD_SETTLE_US));
    if (tuned.hierarchical >= 0) transport_->set_hierarchical(tuned.hierarchical == 1);
    HVD_LOG(log_, HVD_LOG_DEBUG,
            "autotune: fusion threshold " << tuned.fusion_threshold << " bytes, cycle time "
                                          << tuned.cycle_time_ms << " ms"
                                          << (tuned.hierarchical < 0 ? ""
                                              : tuned.hierarchical == 1 ? ", hierarchical on"
                                                                        : ", hierarchical off"));
  }
  // The context's responses first (they may make sets: those take part
  // from the next cycle), then each set's, in slot order: the same order
  // on every rank, so sets sharing ranks never wait on each other.
  uint64_t bytes = 0;
  bool ran = false;
  for (size_t k = 0; k <= sets_.size(); ++k) {
    Scope* sc = k == 0 ? root_.get() : sets_[k - 1].get();
    if (sc == nullptr || (sc->responses.empty() && !sc->close_agreed)) continue;
    ran = true;
    if (k == 0) {
      executor_->Use(sc->comm, device_transport_.get());
    } else {
      Comm* dev = device_transport_ ? SetDevice(*sc) : nullptr;
      executor_->Use(sc->comm, dev, sc->device_error);
    }
    timeline_.set_scope(&sc->label);
    bytes += Execute(*sc);
    timeline_.set_scope(nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return false;
    }
    if (sc->close_agreed) CloseAgreed(*sc);
  }
  if (ran) tuner_->Observe(bytes, now, Clock::now());
  return true;
}

// One allreduce (MIN over bytes) of the context's control bytes followed by
// each slot's (see kSlotHeader), then each busy set's full rounds, if any,
// over the set's own communicator. Every rank contributes to every cycle of
// every set it belongs to, busy or not, so the sets' caches age alike. The
// context's cache is the same on every rank, so its extent is known to all;
// a set's is known to its members, and to the others one negotiation later.
Status ContextImpl::Negotiate(bool shutting_down, Clock::time_point now, bool* shutdown) {
  Controller& rc = *root_->controller;
  const size_t root_slots = rc.slot_extent();
  const size_t head = Controller::control_bytes(root_slots);
  slot_at_.resize(slot_live_.size());
  size_t total = head;
  for (size_t k = 0; k < slot_live_.size(); ++k) {
    slot_at_[k] = total;
    total += kSlotHeader + Controller::control_bytes(slot_extent_[k]);
  }
  ctrl_.assign(total, 0xFF);
  const bool piggy = PiggybackUsable(root_slots);
  rc.Contribute(shutting_down, now, ctrl_.data(), root_slots);
  for (size_t k = 0; k < sets_.size(); ++k) {
    Scope* set = sets_[k].get();
    if (set == nullptr) continue;
    uint8_t* p = ctrl_.data() + slot_at_[k];
    const size_t steps = std::min<size_t>(
        (set->controller->slot_extent() + Controller::kExtentStep - 1) / Controller::kExtentStep,
        0xFFFE);
    p[0] = 0;
    p[1] = static_cast<uint8_t>(
        0xFF - std::min<size_t>(set->controller->pending(), kMaxPendingCount));
    p[2] = static_cast<uint8_t>(steps >> 8);
    p[3] = static_cast<uint8_t>(steps & 0xFF);
    set->controller->Contribute(false, now, p + kSlotHeader, slot_extent_[k]);
  }
  piggy_.served = -1;
  if (piggy) {
    HVD_CHECK(PiggybackAllreduce(head).Wrap("negotiation"));
  } else {
    HVD_CHECK(transport_->Allreduce(ctrl_.data(), ctrl_.size(), HVD_UINT8, HVD_MIN)
                  .Wrap("negotiation"));
  }
  HVD_CHECK(rc.Conclude(root_->plane.get(), ctrl_.data(), root_slots, now, &root_->responses,
                        shutdown));
  if (*shutdown) return Status::Ok();
  if (piggy && ctrl_[Controller::kHeaderBytes + static_cast<size_t>(piggy_.slot)] != 0) {
    piggy_.served = piggy_.slot;
  }
  PlanPiggyback();
  sets_busy_ = false;
  for (size_t k = 0; k < slot_live_.size(); ++k) {
    const uint8_t* p = ctrl_.data() + slot_at_[k];
    const size_t slots = slot_extent_[k];
    if (p[0] != 0) {
      // No member holds the set any more: the slot is free on every rank.
      slot_live_[k] = false;
      slot_extent_[k] = 0;
    } else {
      // Every set's cache has the context's capacity.
      slot_extent_[k] = std::min<size_t>(
          (static_cast<size_t>(p[2]) << 8 | p[3]) * Controller::kExtentStep,
          static_cast<size_t>(rc.cache().capacity()));
    }
    Scope* set = k < sets_.size() ? sets_[k].get() : nullptr;
    if (set != nullptr) set->responses.clear();
    const size_t most_pending = 0xFF - p[1];
    if (most_pending == 0) continue;
    // Busy: this rank negotiates again at once (see Loop), for the ranks
    // outside the set and the members still waiting. A set of every rank
    // has no ranks outside it: its members (all ranks) skip that round
    // after one that served every request any member had pending (each
    // counts the set's responses, the same on all). A rank that judged
    // differently (it left the set on its own) only negotiates sooner; which
    // rounds match does not change.
    bool busy = true;
    if (set != nullptr) {
      bool unused = false;
      HVD_CHECK(set->controller->Conclude(set->plane.get(), p + kSlotHeader, slots, now,
                                          &set->responses, &unused)
                    .Wrap("process set negotiation"));
      busy = set->size < root_->size || most_pending >= kMaxPendingCount ||
             most_pending > set->responses.size();
    }
    sets_busy_ = sets_busy_ || busy;
  }
  while (!slot_live_.empty() && !slot_live_.back()) slot_live_.pop_back();
  slot_extent_.resize(slot_live_.size());
  if (sets_.size() > slot_live_.size()) sets_.resize(slot_live_.size());
  return Status::Ok();
}

bool ContextImpl::PiggybackUsable(size_t root_slots) const {
  const Controller& rc = *root_->controller;
  return piggy_.slot >= 0 && static_cast<size_t>(piggy_.slot) < root_slots &&
         slot_live_.empty() && rc.piggyback_agreed() && rc.cache().Get(piggy_.slot) == piggy_.all;
}

// The negotiation's allreduce with the planned tensor after the control
// bytes (head of them: no process set exists), in the tensor's dtype and op.
Status ContextImpl::PiggybackAllreduce(size_t head) {
  const size_t es = DtypeSize(piggy_.dtype);
  const hvd_reduce_op_t op = piggy_.op == HVD_AVERAGE ? HVD_SUM : piggy_.op;
  const size_t n = head + piggy_.count;
  piggy_.buf.resize(n * es);
  uint8_t* b = piggy_.buf.data();
  EncodeControl(b, ctrl_.data(), head, piggy_.dtype, op, root_->rank == 0);
  piggy_.result_at = head * es;
  uint8_t* mine = b + piggy_.result_at;
  const OpRequest* req = root_->controller->Marked(piggy_.slot);
  // A marked request matches the cached descriptor: one host tensor of the
  // plan's dtype and element count.
  if (req != nullptr && req->tensors.size() == 1 &&
      static_cast<size_t>(req->tensors[0].NumElements()) == piggy_.count &&
      req->tensors[0].dtype == piggy_.dtype && req->tensors[0].device == HVD_DEVICE_CPU) {
    ScaleCopy(mine, req->tensors[0].input, piggy_.count, piggy_.dtype, piggy_.prescale);
  } else {
    // Not ready here (the slot's byte is 0, the result unused), or joined
    // (zeros, as a joined rank's stand-in tensor).
    std::memset(mine, 0, piggy_.count * es);
  }
  HVD_CHECK(transport_->Allreduce(b, n, piggy_.dtype, op));
  DecodeControl(ctrl_.data(), b, head, piggy_.dtype, op, root_->size);
  return Status::Ok();
}

// The plan for the next negotiations, from this one's responses (the same on
// every rank): a cycle that served one request alone, a small allreduce of
// one host tensor in the cache, makes it the plan; any other cycle keeps it.
void ContextImpl::PlanPiggyback() {
  const std::vector<Response>& rs = root_->responses;
  if (rs.size() != 1) return;
  const Response& r = rs.front();
  if (!r.error.ok() || !r.all || r.all->empty() || !r.joined.empty()) return;
  const RequestDesc& d = r.desc(0);
  if (d.type != OpType::kAllreduce || d.names.size() != 1 || d.shapes.size() != 1 ||
      d.reduce_op == HVD_ADASUM) {
    return;
  }
  const double exact = ExactIntegers(d.dtype);
  const bool sum = d.reduce_op == HVD_SUM || d.reduce_op == HVD_AVERAGE;
  if (exact < 255 || (sum && exact < root_->size)) return;
  for (int q = 0; q < root_->size; ++q) {
    if (r.desc(q).device != HVD_DEVICE_CPU) return;
  }
  size_t count = 1;
  for (int64_t x : d.shapes[0]) count *= static_cast<size_t>(x);
  if (count * DtypeSize(d.dtype) > kPiggybackMaxBytes) return;
  const int slot = root_->controller->cache().SlotOf(r.key);
  if (slot < 0 || root_->controller->cache().Get(slot) != r.all) return;
  piggy_.slot = slot;
  piggy_.all = r.all;
  piggy_.dtype = d.dtype;
  piggy_.op = d.reduce_op;
  piggy_.count = count;
  piggy_.prescale = d.prescale;
  piggy_.postscale = d.postscale;
}

// Groups allreduces into fusion batches (same dtype, op, scaling and device,
// at most the fusion threshold of bytes), keeping every other operation in
// response order. All ranks hold the same responses, so all build the same
// batches in the same order.
uint64_t ContextImpl::Execute(Scope& scope) {
  std::vector<Response>& responses = scope.responses;
  // The cycle's scratch, kept with its capacity: a fused step of 1,000
  // tensors would otherwise allocate and free ~100 KiB of requests every
  // cycle, which also makes malloc consolidate its free lists.
  std::vector<OpRequest>& reqs = exec_.reqs;
  std::vector<uint8_t>& have = exec_.have;
  std::vector<ExecUnit>& units = exec_.units;
  std::vector<ExecOpenBatch>& open = exec_.open;
  reqs.clear();
  reqs.resize(responses.size());
  have.assign(responses.size(), 0);
  open.clear();
  size_t nunits = 0;
  // A fresh unit (reusing a kept one's batch capacity).
  auto add_unit = [&]() -> ExecUnit& {
    if (nunits == units.size()) units.emplace_back();
    ExecUnit& u = units[nunits++];
    u.batch.clear();
    u.single = nullptr;
    u.resp = nullptr;
    u.bytes = 0;
    return u;
  };
  // The requests (and their handles) go once the cycle has run them.
  struct ClearRequests {
    std::vector<OpRequest>& r;
    ~ClearRequests() { r.clear(); }
  } clear_requests{reqs};
  std::deque<std::vector<uint8_t>> zeros;  // buffers of a joined rank's stand-in tensors
  const size_t threshold = static_cast<size_t>(fusion_threshold_);
  auto now = Clock::now();

  uint64_t piggybacked = 0;  // bytes served by the negotiation
  for (size_t i = 0; i < responses.size(); ++i) {
    Response& resp = responses[i];
    if (&scope == root_.get() && resp.slot >= 0 && resp.slot == piggy_.served &&
        resp.error.ok()) {
      // Reduced in the negotiation: finish it from there (a joined rank,
      // which has no request, has nothing more to do).
      piggy_.served = -1;
      if (scope.controller->Take(resp, &reqs[i])) {
        OpRequest& req = reqs[i];
        if (timeline_.enabled()) timeline_.Span(resp.key, "NEGOTIATE", req.enqueued, now);
        executor_->FinishPiggybacked(req, piggy_.buf.data() + piggy_.result_at, now);
        piggybacked += piggy_.count * DtypeSize(piggy_.dtype);
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++piggybacked_;  // before the handle completes: its waiter may ask
        }
        Finish(scope, req, Status::Ok());
      }
      continue;
    }
    have[i] = scope.controller->Take(resp, &reqs[i]);
    if (!have[i] && resp.error.ok() && resp.all && !resp.all->empty() &&
        resp.desc(0).type == OpType::kAllreduce &&
        std::find(resp.joined.begin(), resp.joined.end(), scope.rank) != resp.joined.end()) {
      // This rank has joined: it contributes zeros of the same shape and
      // throws the result away.
      const RequestDesc& d = resp.desc(scope.rank);
      OpRequest& ph = reqs[i];
      ph.type = OpType::kAllreduce;
      ph.reduce_op = d.reduce_op;
      ph.prescale = d.prescale;
      ph.postscale = d.postscale;
      ph.zeros_device = d.device;
      for (size_t k = 0; k < d.names.size(); ++k) {
        TensorSpec t;
        t.name = d.names[k];
        t.dtype = d.dtype;
        t.shape = d.shapes[k];
        zeros.emplace_back(static_cast<size_t>(t.NumElements()) * DtypeSize(d.dtype), 0);
        t.input = t.output = zeros.back().data();
        ph.tensors.push_back(std::move(t));
      }
      ph.handle = std::make_shared<Handle>("zeros for allreduce '" + resp.key + "' (joined)");
      ph.enqueued = now;
      have[i] = true;
    }
    if (!have[i]) continue;  // e.g. a stall error for a request this rank never made
    OpRequest& req = reqs[i];
    if (timeline_.enabled()) {
      timeline_.Span(resp.key, "NEGOTIATE", req.enqueued, now);
    }
    if (!resp.error.ok()) {
      Finish(scope, req, resp.error);
      continue;
    }
    if (req.type == OpType::kCloseSet) {
      // Every member agreed: the set goes once this cycle's other
      // responses have run (CloseAgreed).
      scope.close_agreed = true;
      Finish(scope, req, Status::Ok());
      continue;
    }
    if (req.type != OpType::kAllreduce) {
      ExecUnit& u = add_unit();
      u.single = &req;
      u.resp = &resp;
      continue;
    }
    size_t bytes = 0;
    for (const TensorSpec& t : req.tensors) {
      bytes += static_cast<size_t>(t.NumElements()) * DtypeSize(t.dtype);
    }
    const TensorSpec& t0 = req.tensors.front();
    // Batches never mix devices: keyed on every rank's device ordinal (the
    // negotiated descriptors, the same on every rank, so that all ranks
    // build the same batches even where their ordinals differ).
    const Response* devices = resp.desc(0).device == HVD_DEVICE_CPU ? nullptr : &resp;
    auto same_devices = [&](const Response* a) {
      if ((a == nullptr) != (devices == nullptr)) return false;
      if (a == nullptr) return true;
      for (int r = 0; r < scope.size; ++r) {
        if (a->desc(r).device != devices->desc(r).device) return false;
      }
      return true;
    };
    ExecOpenBatch* match = nullptr;
    for (ExecOpenBatch& b : open) {
      if (b.dtype == t0.dtype && b.op == req.reduce_op && b.pre == req.prescale &&
          b.post == req.postscale && same_devices(b.devices)) {
        match = &b;
        break;
      }
    }
    if (match != nullptr && threshold > 0 && units[match->unit].bytes + bytes <= threshold) {
      units[match->unit].batch.push_back(&req);
      units[match->unit].bytes += bytes;
      continue;
    }
    ExecUnit& u = add_unit();
    u.batch.push_back(&req);
    u.bytes = bytes;
    ExecOpenBatch ob{nunits - 1, t0.dtype, req.reduce_op, req.prescale, req.postscale, devices};
    if (match != nullptr) {
      *match = ob;
    } else {
      open.push_back(ob);
    }
  }

  uint64_t moved = piggybacked;
  for (size_t k = 0; k < nunits; ++k) {
    ExecUnit& u = units[k];
    if (u.single != nullptr) {
      for (const TensorSpec& t : u.single->tensors) {
        moved += static_cast<uint64_t>(t.NumElements()) * DtypeSize(t.dtype);
      }
    } else {
      moved += u.bytes;
    }
    Status s = u.single != nullptr ? executor_->RunOne(*u.single, *u.resp)
                                       : executor_->RunAllreduceBatch(u.batch);
    if (s.ok() && u.single != nullptr && u.single->type == OpType::kProcessSet) {
      s = FinishProcessSet(*u.single, *u.resp);
    }
    if (u.single != nullptr) {
      Finish(scope, *u.single, s);
    } else {
      FinishAll(scope, u.batch.data(), u.batch.size(), s);
    }
    // Errors every rank reached alike leave the communicator working (a
    // process set's bad list or tag range: HVD_ERR_UNSUPPORTED too).
    const bool agreed =
        s.code() == HVD_ERR_MISMATCH || s.code() == HVD_ERR_INVALID_ARGUMENT ||
        (s.code() == HVD_ERR_UNSUPPORTED && u.single != nullptr &&
         u.single->type == OpType::kProcessSet);
    if (!s.ok() && !agreed) {
      // The transport failed: peers are gone or out of step.
      Status broken(s.code(), "the context can no longer communicate: " + s.message());
      HVD_LOG(log_, HVD_LOG_ERROR, broken.message());
      for (size_t j = k + 1; j < nunits; ++j) {
        if (units[j].single != nullptr) Finish(scope, *units[j].single, broken);
        for (OpRequest* r : units[j].batch) Finish(scope, *r, broken);
      }
      FailEverything(broken);
      return moved;
    }
  }
  timeline_.Flush();
  return moved;
}


// A process-set request's response, on every rank of the context in the
// same cycle: every rank's spec has been allgathered into the handle's
// output; every rank reaches the same verdict and, if it makes sets, the
// same slots.
Status ContextImpl::FinishProcessSet(OpRequest& req, const Response& resp) {
  const int n = root_->size;
  const int32_t* all = reinterpret_cast<const int32_t*>(req.handle->output.data());
  std::vector<const int32_t*> spec(static_cast<size_t>(n));
  std::vector<size_t> len(static_cast<size_t>(n));
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    spec[r] = all + off;
    len[r] = static_cast<size_t>(resp.desc(r).shapes[0][0]);
    off += len[r];
  }
  const std::string what = "process set call '" + resp.key + "'";
  auto describe = [&](int r) {
    const int32_t* s = spec[r];
    if (len[r] >= 3 && s[0] == kSpecList) {
      return "hvd_process_set_create " + ListText(s + 3, len[r] - 3);
    }
    if (len[r] >= 4 && s[0] == kSpecSplit) {
      return "hvd_context_split (color " + std::to_string(s[2]) + ", key " + std::to_string(s[3]) + ")";
    }
    return std::string("a malformed request");
  };
  for (int r = 0; r < n; ++r) {
    const bool ok = (len[r] >= 3 && spec[r][0] == kSpecList &&
                     len[r] == 3 + static_cast<size_t>(std::max(spec[r][2], 0))) ||
                    (len[r] == 4 && spec[r][0] == kSpecSplit);
    if (!ok) return Error(HVD_ERR_INTERNAL, what + ": rank " + std::to_string(r) + " sent a malformed request");
  }
  for (int r = 1; r < n; ++r) {
    if (spec[r][0] != spec[0][0]) {
      return Error(HVD_ERR_MISMATCH, "ranks disagree on the " + what + ": rank 0 called " +
                                         describe(0) + ", rank " + std::to_string(r) + " called " +
                                         describe(r));
    }
  }
  std::vector<std::vector<int>> groups;
  if (spec[0][0] == kSpecList) {
    for (int r = 0; r < n; ++r) {
      const int32_t* v = spec[r] + 3;
      const size_t m = len[r] - 3;
      std::string bad;
      if (m == 0) bad = "it is empty";
      for (size_t i = 0; i < m && bad.empty(); ++i) {
        if (v[i] < 0 || v[i] >= n) {
          bad = "rank " + std::to_string(v[i]) + " is out of range (the context has " +
                std::to_string(n) + " ranks)";
        } else if (i > 0 && v[i] == v[i - 1]) {
          bad = "it lists rank " + std::to_string(v[i]) + " twice";
        } else if (i > 0 && v[i] < v[i - 1]) {
          bad = "it is not sorted ascending";
        }
      }
      if (!bad.empty()) {
        return Error(HVD_ERR_INVALID_ARGUMENT, "rank " + std::to_string(r) +
                                                   " passed the process-set rank list " +
                                                   ListText(v, m) + ": " + bad);
      }
    }
    for (int r = 1; r < n; ++r) {
      if (len[r] != len[0] || !std::equal(spec[r] + 3, spec[r] + len[r], spec[0] + 3)) {
        return Error(HVD_ERR_MISMATCH, "ranks disagree on the process set's ranks (" + what +
                                           "): rank 0 listed " + ListText(spec[0] + 3, len[0] - 3) +
                                           ", rank " + std::to_string(r) + " listed " +
                                           ListText(spec[r] + 3, len[r] - 3));
      }
    }
    groups.emplace_back(spec[0] + 3, spec[0] + len[0]);
  } else {
    std::map<int32_t, std::vector<std::pair<int32_t, int>>> by_color;
    for (int r = 0; r < n; ++r) {
      const int32_t color = spec[r][2];
      if (color < 0 && color != HVD_UNDEFINED_COLOR) {
        return Error(HVD_ERR_INVALID_ARGUMENT,
                     "rank " + std::to_string(r) + " passed color " + std::to_string(color) +
                         " to hvd_context_split (a color is >= 0, or HVD_UNDEFINED_COLOR)");
      }
      if (color >= 0) by_color[color].emplace_back(spec[r][3], r);
    }
    for (auto& [color, v] : by_color) {
      std::sort(v.begin(), v.end());
      groups.emplace_back();
      for (const auto& kr : v) groups.back().push_back(kr.second);
    }
  }

  // Slots: the lowest free ones, in group order; a set of more than one
  // rank needs a tag band (slot + Transport::kFirstSetBand) within the
  // transport's range.
  std::vector<size_t> slots;
  std::vector<bool> taken = slot_live_;
  for (const auto& g : groups) {
    size_t k = 0;
    while (k < taken.size() && taken[k]) ++k;
    if (k == taken.size()) taken.push_back(false);
    taken[k] = true;
    slots.push_back(k);
    if (g.size() > 1 && k + Transport::kFirstSetBand >= transport_->tag_bands()) {
      return Error(HVD_ERR_UNSUPPORTED,
                   transport_->tag_bands() == 0
                       ? std::string("process sets of more than one rank need a transport with "
                                     "point-to-point; the ") + transport_->name() + " transport has none"
                       : "too many process sets at once for the " + std::string(transport_->name()) +
                             " transport's tag range (" +
                             std::to_string(transport_->tag_bands() - Transport::kFirstSetBand) +
                             " sets of more than one rank); destroy some first");
    }
  }
  std::vector<int32_t> hosts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) hosts[r] = spec[r][1];
  std::shared_ptr<Scope> mine;
  for (size_t i = 0; i < groups.size(); ++i) {
    const size_t k = slots[i];
    if (k >= slot_live_.size()) slot_live_.resize(k + 1, false);
    slot_live_[k] = true;
    slot_extent_.resize(slot_live_.size(), 0);
    slot_extent_[k] = 0;  // a new set's cache is empty
    if (sets_.size() < slot_live_.size()) sets_.resize(slot_live_.size());
    const auto& g = groups[i];
    const uint64_t generation = ++set_generation_;  // every rank counts every group
    auto at = std::find(g.begin(), g.end(), root_->rank);
    if (at == g.end()) continue;
    auto set = std::make_shared<Scope>();
    set->slot = static_cast<int>(k);
    set->members = g;
    {
      std::ostringstream os;
      os << "set [";
      for (size_t j = 0; j < g.size() && j < 16; ++j) os << (j ? ", " : "") << g[j];
      if (g.size() > 16) os << ", ... (" << g.size() << " ranks)";
      os << "]";
      set->label = os.str();
    }
    set->size = static_cast<int>(g.size());
    set->rank = static_cast<int>(at - g.begin());
    // Local ranks: members on this rank's host, in the set's order; cross
    // ranks: members with this rank's local rank (Horovod's definition).
    std::vector<int> local_of(g.size());
    for (size_t j = 0; j < g.size(); ++j) {
      int before = 0;
      for (size_t q = 0; q < j; ++q) before += hosts[g[q]] == hosts[g[j]] ? 1 : 0;
      local_of[j] = before;
    }
    const int me = set->rank;
    set->local_rank = local_of[me];
    set->local_size = 0;
    set->cross_rank = 0;
    set->cross_size = 0;
    for (size_t j = 0; j < g.size(); ++j) {
      if (hosts[g[j]] == hosts[g[me]]) ++set->local_size;
      if (local_of[j] == set->local_rank) {
        if (static_cast<int>(j) < me) ++set->cross_rank;
        ++set->cross_size;
      }
    }
    set->generation = generation;
    auto comm = transport_->OpenSubset(g, static_cast<uint32_t>(k + Transport::kFirstSetBand));
    if (!comm.ok()) return comm.status().Wrap("making a process set");
    set->own_comm = std::move(comm).value();
    set->comm = set->own_comm.get();
    set->plane = std::make_unique<CommPlane>(set->comm);
    set->controller = std::make_unique<Controller>(
        set->rank, set->size, cfg_.cache_capacity,
        StallConfig{cfg_.stall_warning_s, cfg_.stall_shutdown_s}, &log_);
    sets_[k] = set;
    mine = set;
    HVD_LOG(log_, HVD_LOG_DEBUG,
            "process set in slot " << k << ": " << set->size << " ranks, this rank is its rank "
                                   << set->rank);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (mine) all_sets_.push_back(mine);
  // Forget sets already gone, so 1,000 create/destroy cycles keep this short.
  all_sets_.erase(std::remove_if(all_sets_.begin(), all_sets_.end(),
                                 [](const std::weak_ptr<Scope>& w) { return w.expired(); }),
                  all_sets_.end());
  made_[req.handle.get()] = mine;
  return Status::Ok();
}

// Every member agreed to destroy the set (its kCloseSet response ran this
// cycle): what is still pending in it fails, and its slot is released (the
// next negotiation shows every rank that it is free).
void ContextImpl::CloseAgreed(Scope& set) {
  const Status why = Error(HVD_ERR_ABORTED, "the process set was destroyed");
  std::vector<OpRequest> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    set.closed = true;
    set.closed_reason = why;
    queued.swap(set.queue);
    queued_ -= std::min(queued_, queued.size());
  }
  for (OpRequest& r : set.controller->TakeAll()) Finish(set, r, why);
  for (OpRequest& r : queued) Finish(set, r, why);
  set.close_agreed = false;
  set.own_comm.reset();
  set.comm = nullptr;
  const int slot = set.slot;
  sets_[static_cast<size_t>(slot)].reset();  // may release the set: last use of `set`
}

// ---- Context -------------------------------------------------------------

Context::Context(std::shared_ptr<ContextImpl> impl, std::shared_ptr<Scope> scope)
    : impl_(std::move(impl)), scope_(std::move(scope)) {}
Context::~Context() { (void)Shutdown(); }

namespace {

// An epoch's rank and size; the rest of the topology comes from every
// rank's host name at its rendezvous.
void ApplyAssignment(const ElasticMember::Assignment& a, Config* cfg) {
  cfg->rank = a.rank;
  cfg->size = a.size;
  cfg->epoch = a.epoch;
  const int known = a.size == 1 ? 0 : -1;
  cfg->local_rank = cfg->cross_rank = known;
  cfg->local_size = cfg->cross_size = a.size == 1 ? 1 : -1;
  cfg->kv_prefix = "hvd/e" + std::to_string(a.epoch) + "/";
}

}  // namespace

Result<std::unique_ptr<Context>> Context::Create(const hvd_params_t* params) {
  return Create(params, ProcessEnv());
}

Result<std::unique_ptr<Context>> Context::Create(const hvd_params_t* params,
                                                 const EnvLookup& env) {
  HVD_ASSIGN_OR_RETURN(Config cfg, ResolveConfig(params, env));
  std::shared_ptr<ElasticMember> elastic;
  if (cfg.elastic) {
    HVD_ASSIGN_OR_RETURN(std::unique_ptr<ElasticMember> member, ElasticMember::Connect(cfg));
    HVD_ASSIGN_OR_RETURN(ElasticMember::Assignment a, member->Join());
    ApplyAssignment(a, &cfg);
    elastic = std::move(member);
  }
  auto impl = std::make_shared<ContextImpl>(std::move(cfg));
  HVD_CHECK(impl->Start());
  std::shared_ptr<Scope> root = impl->root();
  auto ctx = std::unique_ptr<Context>(new Context(std::move(impl), std::move(root)));
  ctx->elastic_ = std::move(elastic);
  return ctx;
}

Status Context::Reset() {
  if (is_process_set() || !elastic_) {
    return Error(HVD_ERR_UNSUPPORTED,
                 is_process_set()
                     ? "a process set cannot be reset: reset its parent context, then make the set "
                       "again"
                     : "this context is not in an elastic job (launch with hvdrun --min-np / "
                       "--max-np / --host-discovery-script)");
  }
  if (shut_) return Error(HVD_ERR_NOT_INITIALIZED, "the context has been shut down");
  Config cfg = impl_->cfg();
  // Leave the epoch: pending operations (and the sets') fail; the
  // connections close now, so peers still inside a collective with this
  // rank learn at once that it left.
  impl_->Shutdown(Error(HVD_ERR_MEMBERSHIP_CHANGED,
                        "the context is being reset (leaving elastic epoch " +
                            std::to_string(cfg.epoch) + ")"));
  impl_->ReleaseTransport();
  HVD_ASSIGN_OR_RETURN(ElasticMember::Assignment a, elastic_->Join());
  ApplyAssignment(a, &cfg);
  auto impl = std::make_shared<ContextImpl>(std::move(cfg));
  Status st = impl->Start();
  if (!st.ok()) {
    // Peers lost again while forming: the caller resets again. The stopped
    // context stays (its calls fail with the old reason).
    return st.code() == HVD_ERR_MEMBERSHIP_CHANGED || st.code() == HVD_ERR_INVALID_ARGUMENT
               ? st
               : Error(HVD_ERR_MEMBERSHIP_CHANGED,
                       "forming elastic epoch " + std::to_string(a.epoch) + " failed: " +
                           st.message() + "; reset again");
  }
  scope_ = impl->root();
  impl_ = std::move(impl);
  return Status::Ok();
}

Result<Context::Membership> Context::membership() {
  Membership m;
  if (!elastic_ && !impl_->cfg().elastic) return m;
  m.elastic = true;
  m.epoch = impl_->cfg().epoch;
  if (elastic_) {
    HVD_ASSIGN_OR_RETURN(m.hosts_updated, elastic_->HostsUpdated());
  }
  return m;
}

int Context::rank() const { return scope_->rank; }
int Context::size() const { return scope_->size; }
int Context::local_rank() const { return scope_->local_rank; }
int Context::local_size() const { return scope_->local_size; }
int Context::cross_rank() const { return scope_->cross_rank; }
int Context::cross_size() const { return scope_->cross_size; }
bool Context::is_process_set() const { return scope_->slot >= 0; }
const std::vector<int>& Context::parent_ranks() const { return scope_->members; }
const char* Context::transport_name() const { return impl_->transport_name(); }
Status Context::StartTimeline(const std::string& path, bool mark_cycles) {
  return impl_->TimelineCommand(true, path, mark_cycles);
}
Status Context::StopTimeline() { return impl_->TimelineCommand(false, "", false); }
Result<int64_t> Context::Query(const std::string& key) const { return impl_->Query(key); }
Context::BufferStats Context::buffer_stats() const { return impl_->buffer_stats(); }
Status Context::CheckDevice(int device, const std::string& name, const void* data) {
  return impl_->CheckDevice(device, name, data);
}

Result<std::shared_ptr<Handle>> Context::Enqueue(OpRequest request) {
  if (!request.handle) return Error(HVD_ERR_INTERNAL, "request without a handle");
  if (request.tensors.empty()) return Error(HVD_ERR_INTERNAL, "request without tensors");
  return impl_->Enqueue(scope_.get(), std::move(request));
}

Result<std::unique_ptr<Context>> Context::Split(int color, int key) {
  if (is_process_set()) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "process sets of process sets are not supported: split the parent context");
  }
  HVD_ASSIGN_OR_RETURN(std::shared_ptr<Scope> set, impl_->MakeSet({1, color, key}));
  if (!set) return std::unique_ptr<Context>();
  auto child = std::unique_ptr<Context>(new Context(impl_, std::move(set)));
  child->elastic_ = elastic_;  // answers membership for its parent's job
  return child;
}

Result<std::unique_ptr<Context>> Context::CreateProcessSet(const std::vector<int32_t>& ranks) {
  if (is_process_set()) {
    return Error(HVD_ERR_UNSUPPORTED,
                 "process sets of process sets are not supported: create the set from the "
                 "parent context");
  }
  std::vector<int32_t> spec{0, static_cast<int32_t>(ranks.size())};
  spec.insert(spec.end(), ranks.begin(), ranks.end());
  HVD_ASSIGN_OR_RETURN(std::shared_ptr<Scope> set, impl_->MakeSet(std::move(spec)));
  if (!set) return std::unique_ptr<Context>();
  auto child = std::unique_ptr<Context>(new Context(impl_, std::move(set)));
  child->elastic_ = elastic_;  // answers membership for its parent's job
  return child;
}

Status Context::Shutdown() {
  if (shut_ || !impl_) return Status::Ok();
  shut_ = true;
  if (is_process_set()) return impl_->CloseSet(scope_.get());
  impl_->Shutdown();
  return Status::Ok();
}

}  // namespace hvd
