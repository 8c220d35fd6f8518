// A lock for critical sections of a few instructions that two threads rarely
// contend for (a pool's free list: the submitting thread takes a block, the
// releasing one gives it back). std::mutex costs a tenth of a submitted
// tensor's path there (a lock and an unlock through pthread, twice a
// tensor); this is one exchange and one store when free. A waiter spins
// briefly, then yields its CPU: the holder may have been preempted (ranks
// share CPUs). Not for waits of any length: use std::mutex and a
// condition variable there.
#pragma once

#include <atomic>
#include <thread>

namespace hvd {

class SpinMutex {
 public:
  void lock() noexcept {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins >= kSpinsBeforeYield) {
          std::this_thread::yield();
          spins = 0;
        }
      }
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 64;
  std::atomic<bool> locked_{false};
};

}  // namespace hvd
