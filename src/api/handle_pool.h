// Blocks a context's handles are made in, kept for the next submits: a fused
// step of 1,000 tensors makes and frees 1,000 handles at once, more than
// malloc's per-thread cache holds (7 blocks a size), so each went to
// malloc's shared bins (about 300 instructions for the pair, 12 % of what a
// submitted tensor cost; bench/tensor_cost.py). Thread-safe: a submit takes
// a block on the caller's thread, the last owner of a handle (the user's
// release, or the loop) gives it back. Shared by every handle made from it,
// through the allocator each holds, so it outlives its context while
// handles live. Its lock is a SpinMutex: held for a pop or a push.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "common/spin_mutex.h"

namespace hvd::api {

class BlockPool {
 public:
  // Blocks kept per size, at most; beyond that they go back to the heap.
  static constexpr size_t kKeep = 4096;

  ~BlockPool() {
    for (Bin& b : bins_) {
      for (void* p : b.free) ::operator delete(p);
    }
  }

  void* Take(size_t bytes) {
    {
      std::lock_guard<SpinMutex> lock(mu_);
      Bin* b = Find(bytes);
      if (b != nullptr && !b->free.empty()) {
        void* p = b->free.back();
        b->free.pop_back();
        return p;
      }
    }
    return ::operator new(bytes);
  }

  void Give(void* p, size_t bytes) noexcept {
    {
      std::lock_guard<SpinMutex> lock(mu_);
      Bin* b = Find(bytes);
      if (b != nullptr && b->free.size() < kKeep) {
        try {
          b->free.push_back(p);
          return;
        } catch (...) {  // no room to keep it: the heap takes it
        }
      }
    }
    ::operator delete(p);
  }

 private:
  // A handle is one of two sizes (a submit's box, a blocking call's
  // handle): a bin per size, claimed by the first block of that size.
  struct Bin {
    size_t bytes = 0;
    std::vector<void*> free;
  };
  Bin* Find(size_t bytes) {
    for (Bin& b : bins_) {
      if (b.bytes == bytes) return &b;
      if (b.bytes == 0) {
        b.bytes = bytes;
        return &b;
      }
    }
    return nullptr;
  }
  SpinMutex mu_;  // held for a few instructions
  std::array<Bin, 4> bins_;
};

// std::allocate_shared's allocator over a BlockPool: single objects (the
// control block with the handle in it) from the pool, arrays from the heap.
template <typename T>
struct PoolAllocator {
  using value_type = T;
  std::shared_ptr<BlockPool> pool;

  explicit PoolAllocator(std::shared_ptr<BlockPool> p) : pool(std::move(p)) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& o) : pool(o.pool) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n != 1 || alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
      return std::allocator<T>().allocate(n);
    }
    return static_cast<T*>(pool->Take(sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n != 1 || alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__) {
      std::allocator<T>().deallocate(p, n);
      return;
    }
    pool->Give(p, sizeof(T));
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>& o) const {
    return pool == o.pool;
  }
  template <typename U>
  bool operator!=(const PoolAllocator<U>& o) const {
    return pool != o.pool;
  }
};

}  // namespace hvd::api
