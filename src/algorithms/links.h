// The point-to-point view of a communicator that the collective algorithms
// run over: a transport plugin's isend/irecv/wait (the core's
// PluginLinks in transport/transport.cc), an in-memory fabric in the unit
// tests, and a subset of ranks of either (SubsetLinks: for process sets and
// the inter-host step of a hierarchical algorithm).
//
// Contract (as hvd_transport.h's version 4 point-to-point): messages between
// two ranks with one tag match in posting order; a receive's size equals the
// matching send's (every algorithm here computes both sides from the same
// arguments); buffers stay untouched until their request completes. After a
// failed call the communicator is broken: an algorithm returns the error at
// once and leaves its other requests to the transport (finalize releases
// them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "hvd_transport.h"

namespace hvd {
namespace algo {

using Req = hvd_transport_request_t*;

class Links {
 public:
  virtual ~Links() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Non-blocking; on success *req is a request to complete with Wait.
  virtual Status Isend(int peer, uint32_t tag, const void* data, size_t bytes, Req* req) = 0;
  virtual Status Irecv(int peer, uint32_t tag, void* data, size_t bytes, Req* req) = 0;
  // Blocks until req completes, bounded by the transport's limit; releases it.
  virtual Status Wait(Req req) = 0;
  // The message size pipelined algorithms cut large transfers into (the
  // transport's hvd_transport_info_t.segment_bytes, else 1 MiB).
  virtual size_t segment_bytes() const { return size_t{1} << 20; }
};

// A subset of another Links' ranks as a communicator of its own: rank i here
// is members[i] there, and every tag is moved into a band of its own
// (tag_base + tag), so collectives of several subsets (process sets, the
// inter-host step of a hierarchical algorithm) can run over one set of
// connections without their messages meeting. The algorithms' tags stay
// below kTagBand. The parent must outlive this, and this rank must be a
// member (rank() is its index in members).
class SubsetLinks : public Links {
 public:
  static constexpr uint32_t kTagBand = 64;

  // members: parent ranks, distinct, in this subset's rank order.
  SubsetLinks(Links* parent, std::vector<int> members, uint32_t tag_base)
      : parent_(parent), members_(std::move(members)), tag_base_(tag_base) {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i] == parent_->rank()) rank_ = static_cast<int>(i);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int parent_rank(int r) const { return members_[static_cast<size_t>(r)]; }
  Status Isend(int peer, uint32_t tag, const void* data, size_t bytes, Req* req) override {
    return parent_->Isend(members_[static_cast<size_t>(peer)], tag_base_ + tag, data, bytes, req);
  }
  Status Irecv(int peer, uint32_t tag, void* data, size_t bytes, Req* req) override {
    return parent_->Irecv(members_[static_cast<size_t>(peer)], tag_base_ + tag, data, bytes, req);
  }
  Status Wait(Req req) override { return parent_->Wait(req); }
  size_t segment_bytes() const override { return parent_->segment_bytes(); }

 private:
  Links* parent_;
  std::vector<int> members_;
  uint32_t tag_base_;
  int rank_ = -1;
};

}  // namespace algo
}  // namespace hvd
