// The collectives, written once over point-to-point (links.h). Every rank
// chooses the same algorithm and the same plan from the arguments alone, so
// the ranks' message sequences always match. Every reduction gives, on
// every rank, the bits of the left fold s0 op s1 op ... op s(size-1) in rank
// order (docs/reproducibility.md): each element is folded once, on the rank
// owning it, then copied (ring, reducescatter), or every rank folds all
// contributions (direct).
//
// Algorithms (names as HVD_ALGORITHM_<COLLECTIVE> takes them):
//   allreduce      direct  every rank sends its buffer to every other and
//                          reduces the contributions in rank order: one
//                          latency, (size-1) x bytes per rank; small messages.
//                  ring    reduce-scatter (each part's pieces sent to its
//                          owner, folded there in rank order), then allgather
//                          around the ring, segments pipelined (depth
//                          kRingDepth); 2 (size-1)/size x bytes per rank.
//   reducescatter  ring    the first half of the ring allreduce, per block.
//   allgatherv     ring    the ring's second half, per block (uneven blocks).
//   broadcast      tree    binomial tree from the root; small messages.
//                  chain   pipelined chain root -> root+1 -> ... by segments.
//   alltoallv      pairwise  step i exchanges with rank +i and -i.
//   barrier        dissemination  ceil(log2 size) rounds of 1-byte tokens.
// The shared-memory collectives (shm/shm.h) and a transport's native ones are
// chosen around these by the core (selection.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/links.h"
#include "algorithms/selection.h"
#include "common/status.h"
#include "algorithms/span.h"
#include "hvd_transport.h"

namespace hvd {
namespace algo {

// Tags: one per algorithm, so a stray message can never match another
// algorithm's receive. All below 32767 (the smallest max_tag a plugin has).
enum Tag : uint32_t {
  kTagDirect = 1,  // then 2, 3, ... in this order
  kTagRing,
  kTagReducescatter,
  kTagAllgatherv,
  kTagTree,
  kTagChain,
  kTagAlltoallv,
  kTagBarrier,
};
static_assert(kTagBarrier == 8, "the tags' values are part of the wire protocol");

// How many segments of the ring and chain pipelines are in flight at once
// beyond the one being worked on (the segment size is the transport's:
// Links::segment_bytes).
constexpr size_t kRingDepth = 2;

// Scratch memory an algorithm needs, allocated (and touched) once and kept by
// the communicator: the steady state allocates nothing proportional to data.
class Scratch {
 public:
  // At least `bytes` bytes, 64-byte aligned; grows (never shrinks) on demand.
  Result<uint8_t*> Get(size_t bytes);
  size_t capacity() const { return bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], Free> mem_;
  size_t bytes_ = 0;
};

// In place over count elements of dtype; op SUM/MIN/MAX/PRODUCT.
Status AllreduceDirect(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce, void* buf, size_t count,
                       hvd_dtype_t dtype, hvd_reduce_op_t op);
Status AllreduceRing(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce, void* buf, size_t count,
                     hvd_dtype_t dtype, hvd_reduce_op_t op);
// The ring over the concatenation of spans (the tensors of a fused batch
// where they lie), in place: as AllreduceRing of the spans packed, without
// the packing (a segment that straddles spans goes through a staging slot).
Status AllreduceRingSpans(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce,
                          const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                          hvd_reduce_op_t op);

// In place: buf holds sum(counts) elements; on return this rank's block
// (counts[rank] elements at offset sum(counts[..rank))) holds its reduction;
// the rest of buf is scratch.
Status ReducescatterRing(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce, void* buf,
                         const size_t* counts, hvd_dtype_t dtype, hvd_reduce_op_t op);

// recv = rank-ordered concatenation of recv_bytes[r] from each rank r; this
// rank's part is read from send (which may already sit at its place).
Status AllgathervRing(Links& l, const void* send, void* recv, const size_t* recv_bytes);

Status BroadcastTree(Links& l, void* buf, size_t bytes, int root);
Status BroadcastChain(Links& l, void* buf, size_t bytes, int root);

// send holds size blocks of send_bytes[r] (to rank r), recv receives size
// blocks of recv_bytes[r] (from rank r).
Status AlltoallvPairwise(Links& l, const void* send, const size_t* send_bytes, void* recv,
                         const size_t* recv_bytes);

Status BarrierDissemination(Links& l);

}  // namespace algo
}  // namespace hvd
