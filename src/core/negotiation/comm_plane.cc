#include "core/negotiation/comm_plane.h"

#include <algorithm>
#include <cstddef>

namespace hvd {

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

}  // namespace hvd
