// The shared-memory collectives over a Segment (shm.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/shm/layout.h"
#include "algorithms/shm/shm.h"
#include "common/kernels.h"

namespace hvd {
namespace shm {

// ---------------------------------------------------------------------------
// Collectives. Every rank runs the same sequence of rounds (chosen from the
// arguments alone), each writing one slot set (Segment::NextRound,
// TakeRounds), so the barrier counters, flags and sets agree on every rank.

namespace {

// Sub-range [*b, return) of m elements owned by rank k in the chunked
// allreduce; boundaries are multiples of 64 bytes.
size_t Part(size_t m, int n, int k, size_t es, size_t* b) {
  const size_t g = 64 / es;
  const size_t per = ((m + n - 1) / n + g - 1) / g * g;
  *b = std::min(m, static_cast<size_t>(k) * per);
  return std::min(m, *b + per);
}

// True if a op b == b op a bit for bit, so rank 1 may start from its own
// contribution: integer ops, SUM and PRODUCT (IEEE + and * commute; the
// half-precision kernels round the same float either way). Not float
// MIN/MAX, which pick between +0 and -0 by operand order.
bool Commutes(hvd_dtype_t dtype, hvd_reduce_op_t op) {
  return !IsFloatingDtype(dtype) || op == HVD_SUM || op == HVD_PRODUCT;
}

// dst (this rank's own contribution, count elements of slot column `off`)
// becomes s_0 op s_1 op ... op s_{n-1}, in rank order, where s_k is rank k's
// contribution at byte offset off of its slot in `set` (this rank's own
// comes from dst, not from its slot). Uses `scratch` (this rank's slot at
// off, not read by anyone during the reduction) when the order has to be
// rebuilt; returns where the result is: dst or scratch.
uint8_t* ReduceColumn(Segment& s, hvd_reduce_kernel_fn reduce, uint32_t set, size_t off,
                      uint8_t* dst, uint8_t* scratch, size_t count, size_t es, hvd_dtype_t dtype,
                      hvd_reduce_op_t op) {
  const int n = s.size();
  const int r = s.rank();
  if (r == 0 || (r == 1 && Commutes(dtype, op))) {
    // dst holds s_r; r == 0: s_0 op s_1 ...; r == 1: s_1 op s_0 == s_0 op s_1.
    for (int k = 0; k < n; ++k) {
      if (k != r) reduce(dst, s.Slot(set, k) + off, count, dtype, op);
    }
    return dst;
  }
  std::memcpy(scratch, s.Slot(set, 0) + off, count * es);
  for (int k = 1; k < n; ++k) {
    reduce(scratch, k == r ? dst : s.Slot(set, k) + off, count, dtype, op);
  }
  return scratch;
}

}  // namespace

namespace {

// The spans of an allreduce as one sequence of elements.
class SpanList {
 public:
  SpanList(const hvd_transport_span_t* spans, size_t nspans, size_t es)
      : spans_(spans), es_(es), start_(nspans + 1, 0) {
    for (size_t i = 0; i < nspans; ++i) start_[i + 1] = start_[i] + spans[i].count;
  }
  size_t count() const { return start_.back(); }
  // f(ptr, rel, len) for each piece of elements [b, e) that lies in one span:
  // ptr is the piece in its span, rel its first element's offset from b, len
  // its length in elements; pieces come in order.
  template <class F>
  void ForEach(size_t b, size_t e, F&& f) const {
    if (b >= e) return;
    size_t i = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), b) -
                                   start_.begin()) - 1;
    for (size_t pos = b; pos < e; ++i) {
      if (start_[i + 1] <= pos) continue;  // an empty span
      const size_t len = std::min(e, start_[i + 1]) - pos;
      f(static_cast<uint8_t*>(spans_[i].data) + (pos - start_[i]) * es_, pos - b, len);
      pos += len;
    }
  }
  // Copies elements [b, e) into dst, or dst into them.
  void Gather(size_t b, size_t e, uint8_t* dst) const {
    ForEach(b, e, [&](uint8_t* p, size_t rel, size_t len) { std::memcpy(dst + rel * es_, p, len * es_); });
  }
  void Scatter(size_t b, size_t e, const uint8_t* src) const {
    ForEach(b, e, [&](uint8_t* p, size_t rel, size_t len) { std::memcpy(p, src + rel * es_, len * es_); });
  }

 private:
  const hvd_transport_span_t* spans_;
  size_t es_;
  std::vector<size_t> start_;  // element offset of each span; the total last
};

}  // namespace

namespace {

// Elements per block of the own part's reduction: the block's destination
// and one source fit in L1 together, so the n - 1 folds and the publishing
// copy read it from there.
size_t BlockElems(size_t es) { return std::max<size_t>(1, (size_t{8} << 10) / es); }

// Rank r's part [b, e) of the chunk at element `done` (round set `set`):
// folds it in rank order, block by block, into the caller's spans and into
// this rank's slot (where peers copy it from).
void ReduceOwn(Segment& s, hvd_reduce_kernel_fn reduce, const SpanList& list, uint32_t set,
               size_t done, size_t b, size_t e, size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  uint8_t* mine = s.Slot(set, s.rank());
  const size_t blk = BlockElems(es);
  list.ForEach(done + b, done + e, [&](uint8_t* p, size_t rel, size_t len) {
    for (size_t i = 0; i < len; i += blk) {
      const size_t k = std::min(blk, len - i);
      const size_t off = (b + rel + i) * es;
      uint8_t* dst = p + i * es;
      uint8_t* res = ReduceColumn(s, reduce, set, off, dst, mine + off, k, es, dtype, op);
      std::memcpy(res == dst ? mine + off : dst, res, k * es);
    }
  });
}

// Copies every peer's reduced part of round t's chunk (m elements at
// `done`) into the caller's spans: those whose reduced flag is up first,
// waiting (for the first one left) only when none is.
Status CopyOut(Segment& s, const SpanList& list, uint32_t t, size_t done, size_t m, size_t es) {
  const int n = s.size();
  const int r = s.rank();
  std::vector<int> left;
  left.reserve(static_cast<size_t>(n));
  for (int j = 1; j < n; ++j) left.push_back((r + j) % n);
  while (!left.empty()) {
    size_t i = 0;
    while (i < left.size() && !s.HasFlag(Segment::Flag::kReduced, t + 1, left[i])) ++i;
    if (i == left.size()) {
      i = 0;
      HVD_CHECK(s.WaitFlag(Segment::Flag::kReduced, t + 1, left[0], "allreduce"));
    }
    const int k = left[i];
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(i));
    size_t kb = 0;
    const size_t ke = Part(m, n, k, es, &kb);
    if (ke > kb) list.Scatter(done + kb, done + ke, s.Slot(t % kSets, k) + kb * es);
  }
  return Status::Ok();
}

// The large allreduce: chunks of one slot per rank, one round each. Each
// chunk is cut into one part per rank (Part); rank k reduces part k. No
// barriers: per round every rank raises two flags and waits for just the
// flags it needs:
//   publish every part but its own into its slot
//   written = t + 1
//   reduce its own part in rank order, publish it  (after every peer's written)
//   reduced = t + 1
//   publish the next chunk's parts                 (so peers have time to reduce)
//   copy each peer's part out                      (after that peer's reduced)
// Why a set is free when it is rewritten: Segment::NextRound. The caller's
// spans are read and written in place: no packing. The fold order of each
// element is the rank order, whatever the timing.
Status Pipelined(Segment& s, hvd_reduce_kernel_fn reduce, const SpanList& list, size_t es,
                 hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const int n = s.size();
  const int r = s.rank();
  const size_t count = list.count();
  const size_t chunk = s.slot() / es;
  const uint32_t chunks = static_cast<uint32_t>((count + chunk - 1) / chunk);
  const uint32_t t0 = s.TakeRounds(chunks);
  auto publish = [&](uint32_t i) {
    const uint32_t t = t0 + i;
    const size_t done = static_cast<size_t>(i) * chunk;
    const size_t m = std::min(chunk, count - done);
    uint8_t* mine = s.Slot(t % kSets, r);
    size_t b = 0;
    const size_t e = Part(m, n, r, es, &b);
    list.Gather(done, done + b, mine);
    list.Gather(done + e, done + m, mine + e * es);
    s.Signal(Segment::Flag::kWritten, t + 1);
  };
  publish(0);
  for (uint32_t i = 0; i < chunks; ++i) {
    const uint32_t t = t0 + i;
    const uint32_t set = t % kSets;
    const size_t done = static_cast<size_t>(i) * chunk;
    const size_t m = std::min(chunk, count - done);
    size_t b = 0;
    const size_t e = Part(m, n, r, es, &b);
    HVD_CHECK(s.WaitFlag(Segment::Flag::kWritten, t + 1, -1, "allreduce"));
    ReduceOwn(s, reduce, list, set, done, b, e, es, dtype, op);
    s.Signal(Segment::Flag::kReduced, t + 1);
    if (i + 1 < chunks) publish(i + 1);
    HVD_CHECK(CopyOut(s, list, t, done, m, es));
  }
  return Status::Ok();
}

}  // namespace

Status Allreduce(Segment& s, hvd_reduce_kernel_fn reduce, uint8_t* buf, size_t count, size_t es,
               hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const hvd_transport_span_t one = {buf, count};
  return AllreduceSpans(s, reduce, &one, 1, es, dtype, op);
}

Status AllreduceSpans(Segment& s, hvd_reduce_kernel_fn reduce, const hvd_transport_span_t* spans,
                    size_t nspans, size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const int n = s.size();
  const int r = s.rank();
  const SpanList list(spans, nspans, es);
  const size_t count = list.count();
  if (count == 0) return Status::Ok();
  const size_t bytes = count * es;
  if (bytes <= s.small_max()) {
    // One barrier: publish, then every rank reduces all contributions itself
    // in rank order (identical bits everywhere).
    const uint32_t set = s.NextRound();
    list.Gather(0, count, s.Slot(set, r));
    HVD_CHECK(s.Barrier("allreduce"));
    const bool own_first = r == 0 || (r == 1 && Commutes(dtype, op));
    list.ForEach(0, count, [&](uint8_t* p, size_t rel, size_t len) {
      if (own_first) {
        ReduceColumn(s, reduce, set, rel * es, p, nullptr, len, es, dtype, op);
      } else {
        // Peers read this rank's slot meanwhile: no scratch; start from s_0.
        std::memcpy(p, s.Slot(set, 0) + rel * es, len * es);
        for (int k = 1; k < n; ++k) reduce(p, s.Slot(set, k) + rel * es, len, dtype, op);
      }
    });
    return Status::Ok();
  }
  return Pipelined(s, reduce, list, es, dtype, op);
}

// Each slot is cut into one column per rank (64-byte multiples). Round t:
// every rank writes piece t of every other rank's block into that rank's
// column of its own slot; barrier; each rank reduces piece t of its own block
// over all columns addressed to it, in rank order (its own column of its own
// slot, written by nobody, is the scratch). One barrier per round.
Status Reducescatter(Segment& s, hvd_reduce_kernel_fn reduce, uint8_t* base, const size_t* start,
                   size_t es, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const int n = s.size();
  const int r = s.rank();
  const size_t col_bytes = s.slot() / static_cast<size_t>(n) / 64 * 64;
  const size_t piece = col_bytes / es;  // elements per block per round
  if (piece == 0) {
    // More ranks than 64-byte columns fit in a slot: the whole allreduce
    // (the rest of the buffer is scratch to the caller).
    return Allreduce(s, reduce, base, start[n], es, dtype, op);
  }
  size_t longest = 0;
  for (int k = 0; k < n; ++k) longest = std::max(longest, start[k + 1] - start[k]);
  for (size_t done = 0; done < longest; done += piece) {
    const uint32_t set = s.NextRound();
    uint8_t* mine = s.Slot(set, r);
    for (int k = 0; k < n; ++k) {
      const size_t len = start[k + 1] - start[k];
      if (k == r || len <= done) continue;
      std::memcpy(mine + k * col_bytes, base + (start[k] + done) * es,
                  std::min(piece, len - done) * es);
    }
    HVD_CHECK(s.Barrier("reducescatter"));
    const size_t my_len = start[r + 1] - start[r];
    if (my_len > done) {
      const size_t m = std::min(piece, my_len - done);
      const size_t off = static_cast<size_t>(r) * col_bytes;
      uint8_t* dst = base + (start[r] + done) * es;
      uint8_t* res = ReduceColumn(s, reduce, set, off, dst, mine + off, m, es, dtype, op);
      if (res != dst) std::memcpy(dst, res, m * es);
    }
  }
  return Status::Ok();
}

// The root copies up to a whole slot set per round; the others copy it out.
Status Broadcast(Segment& s, uint8_t* buf, size_t bytes, int root) {
  const size_t cap = s.slot() * static_cast<size_t>(s.size());
  for (size_t done = 0; done < bytes; done += cap) {
    const size_t m = std::min(cap, bytes - done);
    const uint32_t set = s.NextRound();
    if (s.rank() == root) std::memcpy(s.Slot(set, 0), buf + done, m);
    HVD_CHECK(s.Barrier("broadcast"));
    if (s.rank() != root) std::memcpy(buf + done, s.Slot(set, 0), m);
  }
  return Status::Ok();
}

// Each rank publishes up to a slot of its contribution per round; everyone
// copies every other rank's piece to its place.
Status Allgatherv(Segment& s, const uint8_t* send, uint8_t* out, const size_t* recv_bytes) {
  const int n = s.size();
  const int r = s.rank();
  std::vector<size_t> offs(n);
  size_t most = 0, total = 0;
  for (int k = 0; k < n; ++k) {
    offs[k] = total;
    total += recv_bytes[k];
    most = std::max(most, recv_bytes[k]);
  }
  const size_t mine = recv_bytes[r];
  if (mine > 0 && out + offs[r] != send) std::memmove(out + offs[r], send, mine);
  const uint8_t* src = out + offs[r];  // this rank's contribution, now in place
  for (size_t done = 0; done < most; done += s.slot()) {
    const uint32_t set = s.NextRound();
    if (mine > done) std::memcpy(s.Slot(set, r), src + done, std::min(s.slot(), mine - done));
    HVD_CHECK(s.Barrier("allgatherv"));
    for (int k = 0; k < n; ++k) {
      if (k == r || recv_bytes[k] <= done) continue;
      std::memcpy(out + offs[k] + done, s.Slot(set, k), std::min(s.slot(), recv_bytes[k] - done));
    }
  }
  return Status::Ok();
}

}  // namespace shm
}  // namespace hvd
