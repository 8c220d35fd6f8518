// The table's header, and entries that are the same in every plugin whose
// communicator keeps the fields they use: set_timeout (limit_s, peer_limit),
// async_error and last_error (failure, Failed(), last_error).
#pragma once

#include <cstdint>
#include <cstring>

#include "hvd.h"
#include "hvd_transport.h"
#include "comm_base.h"

namespace hvd::kit {

// A table with its header filled (version, size, name, capabilities) and
// every entry NULL, for the plugin to fill.
template <typename Table>
Table NewTable(uint32_t abi_version, const char* name, uint64_t caps) {
  Table t;
  std::memset(&t, 0, sizeof(t));
  t.abi_version = abi_version;
  t.struct_size = sizeof(Table);
  t.name = name;
  t.caps = caps;
  return t;
}

// A communicator that watches for silent peers keeps the peer timeout.
inline void KeepPeerLimit(CommBase* c, double s) { c->peer_s.store(s); }
inline void KeepPeerLimit(const void*, double) {}

// set_timeout: the limit of waits given no timeout, and whether it is the
// core's peer timeout (then also kept as peer_s, for the transfers' silence).
template <typename Comm>
int SetTimeout(void* comm, double timeout_s, int32_t kind) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return HVD_ERR_INVALID_ARGUMENT;
  c->limit_s = timeout_s;
  c->peer_limit = kind == HVD_TRANSPORT_LIMIT_PEER;
  if (c->peer_limit) KeepPeerLimit(c, timeout_s);
  return HVD_OK;
}

// async_error: the communicator's first failure (any thread, never blocks).
template <typename Comm>
int AsyncError(void* comm) noexcept {
  const Comm* c = static_cast<const Comm*>(comm);
  return c == nullptr ? HVD_ERR_INVALID_ARGUMENT : c->failure.status.load();
}

// last_error: the loop thread's last message, or the first failure's (an
// abort's reason, say) once there is one; `none` without a communicator.
template <typename Comm>
const char* LastError(void* comm, const char* none) noexcept {
  Comm* c = static_cast<Comm*>(comm);
  if (c == nullptr) return none;
  try {
    if (c->failure.status.load() != HVD_OK) c->Failed();
  } catch (...) {
  }
  return c->last_error.c_str();
}

}  // namespace hvd::kit
