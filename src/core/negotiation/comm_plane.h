// The negotiation's two control-plane collectives (ControlPlane) over one
// communicator: a context's transport or a process set's subset.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/comm.h"
#include "core/negotiation/controller.h"

namespace hvd {

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

}  // namespace hvd
