// shm::Setup's exchange over a communicator (TransportExchange).
#pragma once

#include <string>
#include <vector>

#include "algorithms/shm/shm.h"
#include "core/comm.h"

namespace hvd {

// shm::Setup's allgather of strings, over the transport itself (its
// allgatherv, before the shared-memory path exists): needs no store, so it
// serves MPI too.
class TransportExchange : public shm::Exchange {
 public:
  TransportExchange(Comm* t, int size) : t_(t), size_(size) {}
  Status Allgather(const char*, const std::string& mine, std::vector<std::string>* all) override {
    std::vector<uint64_t> lens(static_cast<size_t>(size_));
    const uint64_t my_len = mine.size();
    std::vector<size_t> eight(static_cast<size_t>(size_), sizeof(uint64_t));
    Status st = t_->Allgatherv(&my_len, lens.data(), eight.data());
    std::vector<size_t> bytes(lens.begin(), lens.end());
    size_t total = 0;
    for (size_t b : bytes) total += b;
    std::string joined(total, '\0');
    if (st.ok()) st = t_->Allgatherv(mine.data(), &joined[0], bytes.data());
    HVD_CHECK(st);
    all->clear();
    size_t at = 0;
    for (size_t b : bytes) {
      all->push_back(joined.substr(at, b));
      at += b;
    }
    return Status::Ok();
  }

 private:
  Comm* t_;
  int size_;
};

}  // namespace hvd
