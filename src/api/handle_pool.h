// The handles a context's submits are made of, kept for the next submits: a
// fused step of 1,000 tensors makes and releases 1,000 handles at once. A
// handle is a large object (locks, a condition variable, strings, result
// buffers); made and destroyed per submit, with a shared_ptr's control
// block and its atomic counts, it was a sixth of what a submitted tensor
// cost (bench/tensor_cost.py). Here a released handle is cleared (its
// results given back at once) and kept as it is; the next submit only names
// it. Thread-safe: a submit takes a handle on the caller's thread, the last
// reference (the user's release, or the loop's) gives it back. The pool
// outlives its context while handles live: the context drops it, and the
// last handle given back after that deletes it. Its lock is a SpinMutex:
// held for a pop or a push.
#pragma once

#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

#include "common/spin_mutex.h"
#include "core/loop/request.h"
#include "hvd.h"

namespace hvd::api {

constexpr uint64_t kContextMagic = 0x6876642d63747831ULL;  // "hvd-ctx1"
constexpr uint64_t kHandleMagic = 0x6876642d686e6431ULL;   // "hvd-hnd1"
constexpr uint64_t kDeadMagic = 0xdeadc0dedeadc0deULL;     // written on destroy/release

}  // namespace hvd::api

// The opaque handle of hvd.h. The magic number comes first and is poisoned
// on release, so a released or foreign pointer is usually caught with an
// error instead of a crash. "Usually": a released handle is kept for the
// next submit, which makes it valid again; the check is a diagnostic aid,
// not a guarantee.
struct hvd_handle_s {
  uint64_t magic = hvd::api::kHandleMagic;
  hvd::HandleRef impl;  // the handle it is the wrapper of: its own box
  hvd::OpType type = hvd::OpType::kAllreduce;
  int32_t size = 1;  // the context's size when the op was submitted (recv_splits)
};

namespace hvd::api {

// A submit's handle and its C wrapper in one object. While the user holds
// the wrapper, its impl references the box itself; release moves it out.
struct HandleBox : hvd::Handle {
  HandleBox() : hvd::Handle(std::string()) {}
  hvd_handle_s wrapper;
};

class HandlePool final : public hvd::HandleHome {
 public:
  // Handles kept, at most; beyond that they are deleted.
  static constexpr size_t kKeep = 4096;

  HandlePool() { free_.reserve(kKeep); }
  HandlePool(const HandlePool&) = delete;
  HandlePool& operator=(const HandlePool&) = delete;

  // A cleared handle whose home is this pool, unnamed and unreferenced: the
  // caller names it and takes the first reference. Throws std::bad_alloc.
  HandleBox* Take() {
    {
      std::lock_guard<SpinMutex> lock(mu_);
      ++out_;
      if (!free_.empty()) {
        HandleBox* b = free_.back();
        free_.pop_back();
        return b;
      }
    }
    try {
      auto* b = new HandleBox();
      b->set_home(this);
      return b;
    } catch (...) {
      std::lock_guard<SpinMutex> lock(mu_);
      --out_;
      throw;
    }
  }

  // The last reference to h (one of this pool's) was dropped.
  void Recycle(hvd::Handle* h) noexcept override {
    auto* b = static_cast<HandleBox*>(h);
    b->Clear();
    b->wrapper.magic = kDeadMagic;
    bool kept = false, last = false;
    {
      std::lock_guard<SpinMutex> lock(mu_);
      --out_;
      if (!dropped_ && free_.size() < kKeep) {
        free_.push_back(b);  // within the reserved capacity: no allocation
        kept = true;
      }
      last = dropped_ && out_ == 0;
    }
    if (!kept) delete b;
    if (last) delete this;
  }

  // The context is gone: the kept handles go now, the pool with the last
  // handle out (or now, if none is).
  void Drop() noexcept {
    std::vector<HandleBox*> kept;
    bool last = false;
    {
      std::lock_guard<SpinMutex> lock(mu_);
      dropped_ = true;
      kept.swap(free_);
      last = out_ == 0;
    }
    for (HandleBox* b : kept) delete b;
    if (last) delete this;
  }

  struct Dropper {
    void operator()(HandlePool* p) const noexcept { p->Drop(); }
  };

  // For tests: handles out (referenced) and kept.
  size_t out() {
    std::lock_guard<SpinMutex> lock(mu_);
    return out_;
  }
  size_t kept() {
    std::lock_guard<SpinMutex> lock(mu_);
    return free_.size();
  }

 private:
  ~HandlePool() = default;  // through Drop and Recycle only

  SpinMutex mu_;  // held for a few instructions
  std::vector<HandleBox*> free_;
  size_t out_ = 0;  // handles taken and not given back
  bool dropped_ = false;
};

}  // namespace hvd::api
