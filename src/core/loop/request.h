// What a user call enqueues, and the shared state behind an hvd_handle_t.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/exec/cuda_runtime.h"
#include "core/loop/name_table.h"
#include "hvd.h"

namespace hvd {

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  // Internal (the loop makes and runs them; no user call submits them directly):
  kProcessSet = 7,  // hvd_process_set_create / hvd_context_split: an allgather of int32 specs
  kCloseSet = 8,    // destroying a process set: no data, like a barrier
};
const char* OpTypeName(OpType t);

// A tensor's dimensions: up to kInline of them held in place, more on the
// heap. A submit builds one per tensor; in place, a step of 1,000 tensors
// allocates and frees 1,000 fewer blocks (almost every tensor has at most
// four dimensions).
class Shape {
 public:
  static constexpr size_t kInline = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.data() + dims.size()); }  // NOLINT
  // Copies only the dimensions in use (the implicit copy would copy every
  // in-place slot and assign the heap vector even when both are in place: a
  // submit copies a shape twice).
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape(Shape&&) noexcept = default;
  Shape& operator=(Shape&&) noexcept = default;
  Shape& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  Shape& operator=(const std::vector<int64_t>& dims) {
    assign(dims.data(), dims.data() + dims.size());
    return *this;
  }
  void assign(const int64_t* first, const int64_t* last) {
    size_ = static_cast<size_t>(last - first);
    if (size_ <= kInline) {
      heap_.clear();
      std::copy(first, last, inline_);
    } else {
      heap_.assign(first, last);
    }
  }
  void resize(size_t n) {
    if (n > kInline && size_ <= kInline) {
      heap_.assign(inline_, inline_ + size_);
    } else if (n <= kInline && size_ > kInline) {
      std::copy(heap_.begin(), heap_.begin() + static_cast<std::ptrdiff_t>(n), inline_);
      heap_.clear();
    }
    if (n > kInline) heap_.resize(n, 0);
    for (size_t i = size_; i < n && n <= kInline; ++i) inline_[i] = 0;
    size_ = n;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int64_t* data() const { return size_ <= kInline ? inline_ : heap_.data(); }
  int64_t* data() { return size_ <= kInline ? inline_ : heap_.data(); }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& operator[](size_t i) { return data()[i]; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  bool operator==(const Shape& o) const { return Equal(begin(), size_, o.begin(), o.size_); }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  // An element loop, not std::equal: that calls memcmp, which costs more
  // than the compare for the few dimensions a tensor has.
  static bool Equal(const int64_t* a, size_t na, const int64_t* b, size_t nb) {
    if (na != nb) return false;
    for (size_t i = 0; i < na; ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }

 private:
  int64_t inline_[kInline] = {};
  std::vector<int64_t> heap_;  // used when size_ > kInline
  size_t size_ = 0;
};
inline bool operator==(const Shape& a, const std::vector<int64_t>& b) {
  return Shape::Equal(a.begin(), a.size(), b.data(), b.size());
}
inline bool operator==(const std::vector<int64_t>& b, const Shape& a) { return a == b; }
inline bool operator!=(const Shape& a, const std::vector<int64_t>& b) { return !(a == b); }
inline bool operator!=(const std::vector<int64_t>& b, const Shape& a) { return !(a == b); }

// One tensor of a request. Pointers are the user's; they must stay valid until
// the handle completes. A field added here is also copied where a
// single-tensor submit fills a recycled one (ContextImpl::Enqueue).
struct TensorSpec {
  std::string name;
  uint32_t name_id = kNoNameId;  // the scope's NameTable id while in flight (set by the core)
  hvd_dtype_t dtype = HVD_FLOAT32;
  Shape shape;
  int32_t device = HVD_DEVICE_CPU;
  void* stream = nullptr;
  const void* input = nullptr;
  void* output = nullptr;  // allreduce/broadcast only; the handle owns other results

  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class Handle;

// A counted reference to a Handle (the count is the handle's own): the
// user's wrapper and the core's request each hold one. The last one dropped
// gives the handle to its home (HandleHome: the C API keeps it for the next
// submit) or deletes it. A submitted tensor makes and drops several: one
// atomic each, no control block.
class HandleRef {
 public:
  HandleRef() = default;
  HandleRef(std::nullptr_t) {}  // NOLINT: as a null pointer converts
  explicit HandleRef(Handle* h) noexcept;  // takes a reference of its own
  HandleRef(const HandleRef& o) noexcept : HandleRef(o.p_) {}
  HandleRef(HandleRef&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  HandleRef& operator=(const HandleRef& o) noexcept {
    HandleRef copy(o);
    std::swap(p_, copy.p_);
    return *this;
  }
  HandleRef& operator=(HandleRef&& o) noexcept {
    if (this != &o) {
      reset();  // the reference held before goes now, not with o
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  ~HandleRef() { reset(); }
  inline void reset() noexcept;
  Handle* get() const { return p_; }
  Handle& operator*() const { return *p_; }
  Handle* operator->() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator==(const HandleRef& o) const { return p_ == o.p_; }
  bool operator!=(const HandleRef& o) const { return p_ != o.p_; }

 private:
  Handle* p_ = nullptr;
};

// Where a handle goes when its last reference is dropped, instead of being
// deleted: the C API's pool (api/handle_pool.h) keeps it, reset, for the
// next submit.
class HandleHome {
 public:
  virtual void Recycle(Handle* h) noexcept = 0;

 protected:
  ~HandleHome() = default;
};

// One user call: a single tensor, or a group (grouped allreduce) that is
// negotiated and fused as a unit. Arguments are validated by the C shim
// before they get here (dtype, op, shapes, pointers, root in range).
struct OpRequest {
  OpType type = OpType::kAllreduce;
  hvd_reduce_op_t reduce_op = HVD_SUM;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  std::vector<int64_t> splits;    // alltoall: rows to each rank; empty = even
  std::vector<TensorSpec> tensors;  // >= 1; barrier: one tensor of 0 elements
  HandleRef handle;
  std::chrono::steady_clock::time_point enqueued;  // set by the core
  uint64_t record = 0;  // its flight-recorder entry (0: none), set by the core
  // A joined rank's stand-in allreduce (host zeros): the device the other
  // ranks' tensors are on (HVD_DEVICE_CPU: host), so that the executor runs
  // it where they run theirs (a device transport takes device zeros).
  int32_t zeros_device = HVD_DEVICE_CPU;
};

// Bytes that are never value-initialised: results are written over them.
class ByteBuffer {
 public:
  uint8_t* data() { return p_.get(); }
  const uint8_t* data() const { return p_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return cap_; }
  // Sets the size; reallocates (contents lost) only beyond the capacity.
  // False when out of memory.
  bool Resize(size_t n);

 private:
  std::unique_ptr<uint8_t[]> p_;
  size_t size_ = 0, cap_ = 0;
};

// Result buffers of released handles, kept for the next operation: without
// it every allgather, alltoall and reducescatter would fault in fresh pages
// for its result (a large allocation is a fresh mmap), which costs more than
// moving the data here. Thread-safe.
class BufferPool {
 public:
  explicit BufferPool(size_t max_bytes) : max_bytes_(max_bytes) {}
  // A buffer of size n: the smallest spare that fits, else a new one.
  // Out of memory: capacity() < n.
  ByteBuffer Take(size_t n);
  // Keeps b while the spares stay within max_bytes (oldest dropped first).
  void Give(ByteBuffer b);
  size_t spare_bytes() const;

 private:
  mutable std::mutex mu_;
  std::deque<ByteBuffer> spare_;
  size_t spare_bytes_ = 0;
  size_t max_bytes_;
};

// Runs the context's cycle (negotiate, run, complete) on the thread of a
// caller about to block on a handle, where the loop thread is idle: the
// caller then needs no hand-off to the loop and back. Implemented by the
// context.
class CycleDriver {
 public:
  virtual ~CycleDriver() = default;
  // With `lock` (LoopSignal::mu) held, and held again on return. True if
  // this thread ran at least one cycle (it has told the loop what it needs
  // to know); false if it could not (another thread held the cycle past
  // `deadline` or completed h, or the context is stopping), and the caller
  // should wake the loop as before. A cycle, once started, ends when it ends
  // (bounded by the peer and transport timeouts), whatever the deadline.
  virtual bool Drive(std::unique_lock<std::mutex>& lock, const Handle& h,
                     std::chrono::steady_clock::time_point deadline) = 0;
};

// The background loop's lock and wake-up, shared with its handles so that a
// caller about to block on one can tell the loop that its burst of submits
// is over (the loop then stops waiting for more to fuse with), or run the
// cycle itself (driver). Outlives the context while handles hold it.
struct LoopSignal {
  std::mutex mu;
  std::condition_variable cv;
  bool caller_waits = false;  // a caller blocked since the last submit
  // Under mu: set while callers may run the cycle; cleared when the context
  // starts shutting down (it then outlives no call into it).
  CycleDriver* driver = nullptr;
};

// Completion state shared by the user's handle and the core. Thread-safe.
class Handle {
 public:
  explicit Handle(std::string description) : description_(std::move(description)) {}
  // Described as "<op> '<name>'", formatted only when asked for (a submit
  // should not pay for text that only errors show). op: a string literal.
  // A name of up to kInlineName characters is held in place: a frontend's
  // ("DistributedOptimizer.<parameter>") are longer than the 15 a
  // std::string holds without allocating, and a step submits hundreds.
  Handle(const char* op, std::string_view name) { SetName(op, name); }
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  // For a home that keeps handles (HandleHome): Clear makes a released one
  // as new (its results given back, not done, no waiting text), keeping the
  // locks, strings and vectors it has; Rename names it for the next
  // operation, as the constructors do.
  void Clear() noexcept;
  void Rename(const char* op, std::string_view name) { SetName(op, name); }
  void Rename(std::string description) {
    op_ = nullptr;
    name_len_ = kNameElsewhere;
    description_ = std::move(description);
  }
  // Where it goes when its last reference is dropped (null: deleted).
  void set_home(HandleHome* home) { home_ = home; }

  // First call wins; later calls are ignored.
  void Complete(Status status);
  bool done() const;
  // Done, with success: a waiter's fast path (no status copied).
  bool succeeded() const { return done() && status_.ok(); }
  // The operation's status once done; HVD_ERR_TIMEOUT (naming what it waits
  // for) if timeout_s (>= 0) passes first.
  Status Wait(double timeout_s) const;
  Status status() const;  // HVD_IN_PROGRESS status while pending

  // Set by the core when the request is queued (see LoopSignal); a
  // recycled handle has its context's already.
  void set_signal(const std::shared_ptr<LoopSignal>& s) {
    if (signal_ != s) signal_ = s;
  }

  // What the core knows about who has not submitted yet (for timeout messages).
  void SetWaitingOn(std::string text);

  std::string description() const {
    if (op_ == nullptr) return description_;
    const std::string name =
        name_len_ == kNameElsewhere ? description_ : std::string(name_, name_len_);
    return std::string(op_) + " '" + name + "'";
  }

  // Results owned by the handle (allgather, alltoall, reducescatter). Written
  // by the core before Complete(), read by the user after; finished_ (set
  // last by Complete, read first by done() and Wait) orders the two.
  ByteBuffer output;
  std::shared_ptr<BufferPool> output_pool;  // where output goes back on release
  std::vector<int64_t> output_shape;
  std::vector<int64_t> recv_splits;
  // Where the result lies: HVD_DEVICE_CPU (output), or the CUDA device
  // whose memory holds it (device_output, device_bytes of it; from
  // device_pool, given back on release). A device result is copied into
  // output only when HostOutput is first asked for.
  int output_device = HVD_DEVICE_CPU;
  DeviceBlock device_output;
  size_t device_bytes = 0;
  std::shared_ptr<DevicePool> device_pool;
  // Stream-ordered completion (HVD_CUDA_ASYNC_COMPLETION) of an operation
  // on CUDA tensors: the handle completed once the results were queued on
  // the tensors' stream (the first tensor's; the others' streams wait for
  // it), and this event, recorded there after them, marks when they are in
  // place. Null where the handle completed with the results in place
  // (host tensors, or the default host-synchronized completion). Set before
  // Complete().
  std::shared_ptr<CudaFence> cuda_fence;
  // The result in host memory: output, after copying a device result
  // there on the first call (any thread; later calls return the copy).
  Result<const ByteBuffer*> HostOutput();

 private:
  friend class HandleRef;
  void Unref() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (home_ != nullptr) {
      home_->Recycle(this);
    } else {
      delete this;
    }
  }
  // What ~Handle and Clear give back: pooled buffers, device blocks.
  void ReleaseResults() noexcept;
  void SetName(const char* op, std::string_view name) {
    op_ = op;
    if (name.size() <= kInlineName) {
      std::memcpy(name_, name.data(), name.size());
      name_len_ = static_cast<uint8_t>(name.size());
      description_.clear();
    } else {
      name_len_ = kNameElsewhere;
      description_.assign(name.data(), name.size());
    }
  }

  std::atomic<int32_t> refs_{0};
  HandleHome* home_ = nullptr;
  std::mutex host_mu_;
  bool host_copied_ = false;
  static constexpr size_t kInlineName = 95;
  static constexpr uint8_t kNameElsewhere = 255;  // name_len_: in description_
  const char* op_ = nullptr;  // set: the name is in name_ (or description_), not the op
  std::shared_ptr<LoopSignal> signal_;
  std::string description_;
  uint8_t name_len_ = kNameElsewhere;
  char name_[kInlineName];
  mutable std::mutex mu_;  // waiting_on_, and the sleep of a waiter on cv_
  mutable std::condition_variable cv_;
  // Complete's first call claims the handle (0 -> 1), sets status_, then
  // finished_ (after which status_ never changes: a waiter that sees it
  // reads status_ without a lock; a fused step's caller waits on hundreds
  // of completed handles). A completion takes mu_ only where a waiter
  // sleeps (waiters_ > 0): most complete before anyone waits, and a fused
  // step completes hundreds. The two are seq_cst, so that a waiter that
  // registered before the completion is seen, and one that registered
  // after sees finished_ (see Complete).
  std::atomic<uint8_t> claimed_{0};
  std::atomic<bool> finished_{false};
  mutable std::atomic<int> waiters_{0};
  Status status_;
  std::string waiting_on_;
};

inline HandleRef::HandleRef(Handle* h) noexcept : p_(h) {
  if (p_ != nullptr) p_->refs_.fetch_add(1, std::memory_order_relaxed);
}

inline void HandleRef::reset() noexcept {
  Handle* h = p_;
  p_ = nullptr;
  if (h != nullptr) h->Unref();
}

// A handle of its own (deleted with its last reference): the core's
// internal operations and tests; the C API's come from its pool.
template <typename... A>
HandleRef MakeHandle(A&&... a) {
  return HandleRef(new Handle(std::forward<A>(a)...));
}

}  // namespace hvd
