// A scope: one communicator the background loop drives (the context itself
// or one of its process sets), with its queue, names in flight and
// negotiation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/comm.h"
#include "core/loop/name_table.h"
#include "core/loop/request.h"
#include "core/negotiation/comm_plane.h"
#include "core/negotiation/controller.h"
#include "core/observability/metrics.h"
#include "core/observability/stragglers.h"
#include "transport/transport.h"

namespace hvd {

// One communicator the loop drives: the context itself (slot -1) or one of
// its process sets. The identity fields are fixed once made.
struct Scope {
  int slot = -1;             // the set's slot in the loop's table; -1: the context
  std::vector<int> members;  // ranks of the context, in this scope's rank order
  std::string label;         // a set's timeline rows: "set [0, 2]"; "" for the context
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  Comm* comm = nullptr;      // the transport, or own_comm
  std::unique_ptr<Comm> own_comm;
  std::unique_ptr<CommPlane> plane;
  std::unique_ptr<Controller> controller;
  // Under the context's mu_.
  std::vector<OpRequest> queue;  // swapped with batch: both keep their capacity
  NameTable names;  // names in flight (submitted, not yet completed)
  uint64_t barrier_count = 0;
  uint64_t set_count = 0;  // process-set calls on this scope (names their requests)
  uint64_t recorded = 0;   // requests the flight recorder numbered on this scope
  bool closed = false;     // a destroyed process set, or a stopped context's
  Status closed_reason;
  // Background thread only.
  std::vector<OpRequest> batch;
  std::vector<Response> responses;
  bool close_agreed = false;  // the set's destruction was agreed this cycle
  // A set's own device transport (its CUDA tensors, beside a device-only
  // transport such as NCCL): opened by every member in the first cycle one
  // of the set's responses holds CUDA tensors (ContextImpl::SetDevice).
  // Written by the loop thread under the context's mu_ (the shutdown
  // aborts it from another thread).
  uint64_t generation = 0;  // the set's creation count in the context: its store keys
  std::unique_ptr<PluginKv> device_kv;  // before device: outlives it
  std::unique_ptr<Transport> device;
  bool device_tried = false;
  Status device_error;  // why it could not be opened: its CUDA operations fail with it
  ScopeMetrics metrics;  // written by the cycle's holder, read by any thread
  Stragglers stragglers;  // a set's (set_stragglers.h); the context's is ContextImpl's
};

}  // namespace hvd
