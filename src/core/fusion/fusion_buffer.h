// The context's fusion buffer: one persistent, 64-byte aligned byte buffer
// that only grows. Its contents are not kept across a growth (every user
// writes what it then reads), so growing frees the old block and takes a
// fresh one without copying or clearing.
//
// Page faults: the caller writes the first `bytes` of a reservation at once,
// which faults those pages in, so Reserve does not touch them (a memset
// there would write every byte twice). Only the part past them (the headroom
// a doubling adds) is pre-faulted, one write per page, so that the next,
// larger batch does not fault in the middle of a step. ReserveFaulted
// (at start, before the first steps) faults the whole reservation in.
// Background thread only.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace hvd {

class FusionBuffer {
 public:
  FusionBuffer() = default;
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;
  ~FusionBuffer() { std::free(data_); }

  // At least `bytes` bytes; null when out of memory (the old buffer stays).
  uint8_t* Reserve(size_t bytes) {
    if (bytes <= cap_ && data_ != nullptr) return data_;
    const size_t cap = std::max({bytes, cap_ * 2, size_t{64}});
    void* p = nullptr;
    if (posix_memalign(&p, 64, cap) != 0) return nullptr;
    std::free(data_);
    data_ = static_cast<uint8_t*>(p);
    cap_ = cap;
    Touch(bytes, cap);  // the headroom only: the caller writes [0, bytes)
    return data_;
  }

  // Reserve, with every page of [0, bytes) faulted in now.
  uint8_t* ReserveFaulted(size_t bytes) {
    uint8_t* p = Reserve(bytes);
    if (p != nullptr) Touch(0, std::min(bytes, cap_));
    return p;
  }

  size_t capacity() const { return cap_; }
  const uint8_t* data() const { return data_; }

 private:
  // One write per page of [from, to).
  void Touch(size_t from, size_t to) {
    if (from >= to) return;
    static const size_t page = [] {
      long v = sysconf(_SC_PAGESIZE);
      return v > 0 ? static_cast<size_t>(v) : size_t{4096};
    }();
    volatile uint8_t* d = data_;
    for (size_t i = from; i < to; i = (i / page + 1) * page) d[i] = 0;
  }

  uint8_t* data_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace hvd
