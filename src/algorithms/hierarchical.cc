// The hierarchical compositions (hierarchical.h).
#include "algorithms/hierarchical.h"

#include <algorithm>
#include <cstring>

#include "common/kernels.h"

namespace hvd {
namespace algo {

std::unique_ptr<Hierarchy> GroupByHost(const std::vector<std::string>& ids, int rank) {
  auto h = std::make_unique<Hierarchy>();
  const int size = static_cast<int>(ids.size());
  h->rank = rank;
  h->size = size;
  std::vector<std::string> order;
  h->host_of.assign(static_cast<size_t>(size), 0);
  std::vector<std::vector<int>>& hosts = h->hosts;
  h->local_index.assign(static_cast<size_t>(size), 0);
  for (int r = 0; r < size; ++r) {
    size_t k = std::find(order.begin(), order.end(), ids[r]) - order.begin();
    if (k == order.size()) {
      order.push_back(ids[r]);
      hosts.emplace_back();
    }
    h->host_of[r] = static_cast<int>(k);
    h->local_index[r] = static_cast<int>(hosts[k].size());
    hosts[k].push_back(r);
  }
  for (const auto& g : hosts) h->even = h->even && g.size() == hosts[0].size();
  // Each host's ranks consecutive, hosts in rank order: a host's block of
  // an allgather is then where the ranks' pieces go.
  for (size_t k = 0, next = 0; k < hosts.size(); ++k) {
    for (int r : hosts[k]) h->contiguous = h->contiguous && r == static_cast<int>(next++);
  }
  return h;
}

// Even hosts: each host's ranks reduce-scatter the buffer among themselves
// (shared memory), every block is allreduced across hosts by the ranks
// holding it (one cross group per local index, all at once), and each host
// allgathers its blocks back. Only 1x the buffer leaves each host.
// Uneven hosts: host allreduce, leaders across hosts, host broadcast.
// Every rank ends with the same bits: each block is reduced once per cross
// group in one order, then copied.
Status AllreduceHier(Hierarchy& h, void* buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const size_t es = DtypeSize(dtype);
  uint8_t* base = static_cast<uint8_t*>(buf);
  if (!h.even) {
    HVD_CHECK(h.local->Allreduce(buf, count, dtype, op));
    if (h.cross) HVD_CHECK(h.cross->Allreduce(buf, count, dtype, op));
    HVD_CHECK(h.local->Broadcast(buf, count * es, 0));
    return Status::Ok();
  }
  const int L = h.local->size();
  const int li = h.local->rank();
  std::vector<size_t> counts(static_cast<size_t>(L)), bytes(static_cast<size_t>(L));
  size_t start = 0, my_start = 0;
  for (int i = 0; i < L; ++i) {
    counts[i] = count / L + (static_cast<size_t>(i) < count % L ? 1 : 0);
    bytes[i] = counts[i] * es;
    if (i == li) my_start = start;
    start += counts[i];
  }
  HVD_CHECK(h.local->Reducescatter(buf, counts.data(), dtype, op));
  if (counts[li] > 0) HVD_CHECK(h.cross->Allreduce(base + my_start * es, counts[li], dtype, op));
  HVD_CHECK(h.local->Allgatherv(base + my_start * es, buf, bytes.data()));
  return Status::Ok();
}

// Each host gathers its ranks' pieces (shared memory), the hosts' first
// ranks exchange the hosts' blocks (one point-to-point allgather of one
// rank per host, instead of a ring through every rank), and each host
// broadcasts the whole from its first rank. Every piece crosses to each
// other host once, and no byte goes over loopback TCP. Where a host's ranks
// are not consecutive, the blocks are gathered in a scratch buffer in host
// order and each rank's piece copied to its place.
Status AllgathervHier(Hierarchy& h, Scratch& scratch, const void* send, void* recv, const size_t* recv_bytes, size_t total) {
  const size_t nhosts = h.hosts.size();
  const int me_host = h.host_of[static_cast<size_t>(h.rank)];
  std::vector<size_t> offset(static_cast<size_t>(h.size) + 1, 0);  // of each rank's piece in recv
  for (int r = 0; r < h.size; ++r) offset[r + 1] = offset[r] + recv_bytes[r];
  std::vector<size_t> host_bytes(nhosts, 0), host_at(nhosts + 1, 0);
  for (size_t k = 0; k < nhosts; ++k) {
    for (int r : h.hosts[k]) host_bytes[k] += recv_bytes[r];
    host_at[k + 1] = host_at[k] + host_bytes[k];
  }
  uint8_t* g = static_cast<uint8_t*>(recv);
  if (!h.contiguous) {
    HVD_ASSIGN_OR_RETURN(g, scratch.Get(total));
  }
  const std::vector<int>& mine = h.hosts[static_cast<size_t>(me_host)];
  std::vector<size_t> local_bytes(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) local_bytes[i] = recv_bytes[mine[i]];
  uint8_t* block = g + host_at[static_cast<size_t>(me_host)];
  HVD_CHECK(h.local->Allgatherv(send, block, local_bytes.data()));
  if (h.local->rank() == 0) {  // a host's first rank: its cross communicator is the leaders'
    HVD_CHECK(h.cross->Allgatherv(block, g, host_bytes.data()));
  }
  HVD_CHECK(h.local->Broadcast(g, total, 0));
  if (!h.contiguous) {
    uint8_t* out = static_cast<uint8_t*>(recv);
    for (size_t k = 0; k < nhosts; ++k) {
      size_t at = host_at[k];
      for (int r : h.hosts[k]) {
        if (recv_bytes[r] > 0) std::memcpy(out + offset[r], g + at, recv_bytes[r]);
        at += recv_bytes[r];
      }
    }
  }
  return Status::Ok();
}

// Even hosts: the buffer is rearranged (scratch) so that the blocks of the
// ranks with local index c, host by host, are contiguous (partition c);
// each host reduce-scatters the partitions among its ranks (shared memory),
// then each cross group reduce-scatters its partition among the hosts, and
// every rank copies its block back. Each rank sends 1/L of the buffer
// across hosts (L ranks per host), none over loopback TCP.
Status ReducescatterHier(Hierarchy& h, Scratch& scratch, void* buf, const size_t* counts, const std::vector<size_t>& start,
                                    hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const size_t es = DtypeSize(dtype);
  const size_t H = h.hosts.size(), L = h.hosts[0].size();
  const size_t li = static_cast<size_t>(h.local_index[static_cast<size_t>(h.rank)]);
  const size_t hm = static_cast<size_t>(h.host_of[static_cast<size_t>(h.rank)]);
  uint8_t* g = nullptr;
  HVD_ASSIGN_OR_RETURN(g, scratch.Get(std::max<size_t>(start.back() * es, 1)));
  const uint8_t* in = static_cast<const uint8_t*>(buf);
  std::vector<size_t> part(L, 0);  // elements of each partition
  size_t at = 0, my_part = 0;
  for (size_t c = 0; c < L; ++c) {
    if (c == li) my_part = at;
    for (size_t k = 0; k < H; ++k) {
      const int r = h.hosts[k][c];
      if (counts[r] > 0) std::memcpy(g + at * es, in + start[r] * es, counts[r] * es);
      at += counts[r];
      part[c] += counts[r];
    }
  }
  HVD_CHECK(h.local->Reducescatter(g, part.data(), dtype, op));
  std::vector<size_t> cross(H);
  size_t mine = my_part;
  for (size_t k = 0; k < H; ++k) {
    cross[k] = counts[h.hosts[k][li]];
    if (k < hm) mine += cross[k];
  }
  HVD_CHECK(h.cross->Reducescatter(g + my_part * es, cross.data(), dtype, op));
  if (counts[h.rank] > 0) {
    std::memcpy(static_cast<uint8_t*>(buf) + start[h.rank] * es, g + mine * es, counts[h.rank] * es);
  }
  return Status::Ok();
}

// Even hosts: the root's cross group (the ranks with its local index)
// broadcasts from it, then every host broadcasts from that local index.
Status BroadcastHier(Hierarchy& h, void* buf, size_t bytes, int root) {
  const int lr = h.local_index[static_cast<size_t>(root)];
  if (h.local->rank() == lr) HVD_CHECK(h.cross->Broadcast(buf, bytes, h.host_of[static_cast<size_t>(root)]));
  HVD_CHECK(h.local->Broadcast(buf, bytes, lr));
  return Status::Ok();
}

}  // namespace algo
}  // namespace hvd
