// The point-to-point view of a communicator that the collective algorithms
// run over: a version 4 transport plugin's isend/irecv/wait (the core's
// PluginLinks in core/transport_loader.cc), an in-memory fabric in the unit
// tests, and later a subset of ranks of either (process sets, the inter-host
// step of a hierarchical algorithm).
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
};

}  // namespace algo
}  // namespace hvd
