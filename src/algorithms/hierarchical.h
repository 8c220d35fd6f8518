// The hierarchical compositions: a collective over ranks on several hosts
// as an intra-host step (each host's ranks: shared memory where the host
// allows it) and an inter-host step (the ranks with one local index on
// every host, or, where hosts have different rank counts, the hosts' first
// ranks), each over a communicator of its own (Comm). Every rank runs the
// same steps, chosen from the arguments alone, and ends with the same bits.
// The transport opens the two communicators (Transport::StartHierarchy)
// and calls these where the hierarchy is on.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "common/status.h"
#include "core/comm.h"

namespace hvd {
namespace algo {

// Below this many bytes in all, an allgather runs flat even across hosts:
// the negotiation's own small allgathers (two per full round, a few bytes
// per rank) were slower in three steps (sim 2x2: 4-5x on allreduce steps
// that each follow a barrier, whose negotiation is a full round).
constexpr size_t kHierAllgatherMin = 64 << 10;

// The ranks grouped by host, and the two steps' communicators.
struct Hierarchy {
  std::unique_ptr<Comm> local, cross;  // this host's ranks; across hosts (null off the leaders)
  int rank = 0, size = 0;        // this rank in the whole communicator, and its size
  bool even = true;              // every host has the same number of ranks
  bool contiguous = true;        // each host's ranks consecutive (hosts then in rank order)
  std::vector<std::vector<int>> hosts;  // each host's ranks, hosts in order of their first
  std::vector<int> host_of;      // rank -> host index (first appearance order)
  std::vector<int> local_index;  // rank -> index among its host's ranks
};

// Groups ranks by host identity (ids[r]: rank r's), without communicators.
std::unique_ptr<Hierarchy> GroupByHost(const std::vector<std::string>& ids, int rank);

// Even hosts: host reduce-scatter, cross allreduce of each block, host
// allgather; uneven: host allreduce, leaders across hosts, host broadcast.
Status AllreduceHier(Hierarchy& h, void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op);
// Host gather, leaders exchange the hosts' blocks, host broadcast; total:
// the sum of recv_bytes. Where hosts' ranks are not consecutive, gathers in
// scratch and copies each rank's piece to its place.
Status AllgathervHier(Hierarchy& h, Scratch& scratch, const void* send, void* recv,
                      const size_t* recv_bytes, size_t total);
// Even hosts only: start[r] is rank r's block offset (elements), start[size] the total.
Status ReducescatterHier(Hierarchy& h, Scratch& scratch, void* buf, const size_t* counts,
                         const std::vector<size_t>& start, hvd_dtype_t dtype, hvd_reduce_op_t op);
// Even hosts only.
Status BroadcastHier(Hierarchy& h, void* buf, size_t bytes, int root);

}  // namespace algo
}  // namespace hvd
