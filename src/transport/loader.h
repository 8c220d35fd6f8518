// Finds and checks a transport's table: built-in tables first (the
// single-rank "local" transport, and gloo where the static library compiled
// it in), then libhvd_transport_<name>.so in the folders of the transport
// path (params.transport_path or HVD_TRANSPORT_PATH) and next to libhvd.so.
#pragma once

#include <string>

#include "common/status.h"
#include "hvd_transport.h"

namespace hvd {

// A usable table: checked (the required entries, the caps' entries) and
// copied zero-extended to this core's size.
struct LoadedTable {
  hvd_transport_t table{};
  void* dl = nullptr;  // the plugin's dlopen handle (the caller closes it); null: built in
};

// The table for `name` (search_path: ':'-separated folders). A candidate
// that does not load or holds no usable table does not end the search;
// when none serves, the message names every folder tried and what went
// wrong in each (HVD_ERR_NOT_FOUND, or HVD_ERR_VERSION where a file loaded
// but held no usable table).
Result<LoadedTable> FindTransport(const std::string& name, const std::string& search_path);

// The table's native entry for collective c (HVD_TRANSPORT_* index), or
// null where it has none.
const void* NativeEntry(const hvd_transport_t& t, int collective);

// The transport's name, owned by libhvd with static storage: it stays valid
// after the transport's plugin is unloaded, until libhvd itself is. The
// built-in names ("local", "gloo", "mpi") are string literals of libhvd;
// any other name is copied once into a process-wide table that is never
// freed (one entry per distinct name: bounded by the plugins there are).
// nullptr for nullptr.
const char* PersistentTransportName(const char* name);

}  // namespace hvd
