#include "algorithms/collectives.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "common/kernels.h"

namespace hvd {
namespace algo {

// ---- scratch ----------------------------------------------------------------

void Scratch::Free::operator()(uint8_t* p) const { std::free(p); }

Result<uint8_t*> Scratch::Get(size_t bytes) {
  if (bytes <= bytes_ && mem_) return mem_.get();
  const size_t rounded = (std::max<size_t>(bytes, 64) + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  if (p == nullptr) {
    return Error(HVD_ERR_NO_MEMORY, "cannot allocate " + std::to_string(rounded) +
                                        " bytes of collective scratch memory");
  }
  std::memset(p, 0, rounded);  // fault the pages in now, not inside a transfer
  mem_.reset(p);
  bytes_ = rounded;
  return p;
}

// ---- helpers ---------------------------------------------------------------

namespace {

size_t Mod(long long a, size_t p) {
  const long long m = static_cast<long long>(p);
  return static_cast<size_t>(((a % m) + m) % m);
}

Status CheckReduction(const char* what, void* buf, size_t count, hvd_dtype_t dtype,
                      hvd_reduce_op_t op, size_t* es) {
  *es = DtypeSize(dtype);
  if (*es == 0) return InvalidArgument(std::string(what) + ": invalid dtype " + std::to_string(dtype));
  if (op != HVD_SUM && op != HVD_MIN && op != HVD_MAX && op != HVD_PRODUCT) {
    return InvalidArgument(std::string(what) + ": unsupported op " + ReduceOpName(op) +
                           " (the core turns AVERAGE into SUM)");
  }
  if (count > 0 && buf == nullptr) return InvalidArgument(std::string(what) + ": NULL buffer");
  if (count > SIZE_MAX / *es) return InvalidArgument(std::string(what) + ": byte count overflows");
  return Status::Ok();
}

// The ring's division: P parts with element boundaries start[0..P], each cut
// into K segments of at most seg elements (K the same for every part, so the
// ranks agree on the transfer count; a short part's last segments are empty
// and are neither sent nor received).
struct Plan {
  const size_t* start;
  size_t P, K, seg;
  size_t Seg(size_t p, size_t k, size_t* off) const {
    const size_t plen = start[p + 1] - start[p];
    const size_t begin = std::min(plen, k * seg);
    *off = start[p] + begin;
    return std::min(seg, plen - begin);
  }
};

Plan MakePlan(const size_t* start, size_t P, size_t es, size_t segment_bytes) {
  size_t max_part = 0;
  for (size_t p = 0; p < P; ++p) max_part = std::max(max_part, start[p + 1] - start[p]);
  const size_t seg_max = std::max<size_t>(1, segment_bytes / es);
  const size_t K = std::max<size_t>(1, (max_part + seg_max - 1) / seg_max);
  return Plan{start, P, K, std::max<size_t>(1, (max_part + K - 1) / K)};
}

// Drives one ring phase of T transfers; transfer u receives from the left and
// sends to the right. Up to kRingDepth + 1 receives are in flight (posted
// early so the left neighbour can write as soon as it is ready), and send u
// goes out once its data exists: transfer u - K must have completed, because
// the segment sent at u is the one received (and, reducing, reduced) K
// transfers earlier.
template <typename PostRecv, typename PostSend, typename FinishRecv, typename FinishSend>
Status RingPhase(size_t T, size_t K, PostRecv post_recv, PostSend post_send,
                 FinishRecv finish_recv, FinishSend finish_send) {
  size_t next_recv = 0;
  size_t next_send = 0;
  for (size_t t = 0; t < T; ++t) {
    for (; next_recv < T && next_recv <= t + kRingDepth; ++next_recv) HVD_CHECK(post_recv(next_recv));
    for (; next_send < T && next_send < t + K && next_send <= t + kRingDepth; ++next_send) {
      HVD_CHECK(post_send(next_send));
    }
    HVD_CHECK(finish_recv(t));
    HVD_CHECK(finish_send(t));
  }
  return Status::Ok();
}

// One ring gather pass over the plan: transfer t = s*K + k sends segment k
// of part (rank + send_shift - s) to the right and receives segment k of
// part (rank + send_shift - 1 - s) from the left, in place.
struct PhaseArgs {
  const Plan& plan;
  size_t es;
  long long send_shift;
  uint32_t tag;
  Scratch* scratch;  // spans only (staging)
};

// Where the ring's elements live. FlatView: one contiguous buffer (every
// segment is addressed in place). SpanView: the concatenation of spans (the
// tensors of a fused batch where they lie): a segment inside one span is
// addressed in place; one that straddles spans is packed into a staging
// slot to be sent, and received into one to be unpacked or reduced piece
// by piece.
struct FlatView {
  static constexpr bool kStaged = false;
  uint8_t* base;
  size_t es;
  uint8_t* Direct(size_t off, size_t) const { return base + off * es; }
  template <typename F>
  void Pieces(size_t off, size_t len, F f) const { f(base + off * es, len, size_t{0}); }
};

class SpanView {
 public:
  static constexpr bool kStaged = true;
  SpanView(const hvd_transport_span_t* spans, size_t n, size_t es) : spans_(spans), es_(es) {
    start_.reserve(n + 1);
    start_.push_back(0);
    for (size_t i = 0; i < n; ++i) start_.push_back(start_.back() + spans[i].count);
  }
  size_t count() const { return start_.back(); }
  // [off, off + len) elements in place if they lie in one span, else nullptr.
  uint8_t* Direct(size_t off, size_t len) const {
    const size_t i = Find(off);
    if (off + len > start_[i + 1]) return nullptr;
    return static_cast<uint8_t*>(spans_[i].data) + (off - start_[i]) * es_;
  }
  // f(pointer, elements, elements before this piece) for each span's piece.
  template <typename F>
  void Pieces(size_t off, size_t len, F f) const {
    size_t done = 0;
    for (size_t i = Find(off); done < len; ++i) {
      const size_t from = off + done - start_[i];
      const size_t n = std::min(len - done, start_[i + 1] - start_[i] - from);
      if (n > 0) f(static_cast<uint8_t*>(spans_[i].data) + from * es_, n, done);
      done += n;
    }
  }

 private:
  // The span holding element off (the last non-empty one at or before it).
  size_t Find(size_t off) const {
    const auto it = std::upper_bound(start_.begin(), start_.end(), off);
    return static_cast<size_t>(it - start_.begin()) - 1;
  }
  const hvd_transport_span_t* spans_;
  size_t es_;
  std::vector<size_t> start_;  // element offset of each span, and the total
};

template <typename View>
Status RingPass(Links& l, const View& v, const PhaseArgs& a) {
  const Plan& plan = a.plan;
  const size_t P = plan.P, K = plan.K, es = a.es, r = static_cast<size_t>(l.rank());
  const int right = static_cast<int>((r + 1) % P), left = static_cast<int>((r + P - 1) % P);
  constexpr size_t kSlots = kRingDepth + 1;
  const size_t slot_bytes = (plan.seg * es + 63) / 64 * 64;
  // Spans: staged sends and staged receives (segments that straddle spans).
  uint8_t* send_stage = nullptr;
  uint8_t* recv_stage = nullptr;
  if constexpr (View::kStaged) {
    HVD_ASSIGN_OR_RETURN(send_stage, a.scratch->Get(slot_bytes * 2 * kSlots));
    recv_stage = send_stage + slot_bytes * kSlots;
  }
  Req recv[kSlots] = {}, send[kSlots] = {};
  bool staged[kSlots] = {};  // receive t % kSlots landed in recv_stage
  auto seg = [&](long long shift, size_t t, size_t* off) {
    return plan.Seg(Mod(static_cast<long long>(r) + shift - static_cast<long long>(t / K), P), t % K, off);
  };
  auto send_seg = [&](size_t t, size_t* off) { return seg(a.send_shift, t, off); };
  auto recv_seg = [&](size_t t, size_t* off) { return seg(a.send_shift - 1, t, off); };
  return RingPhase(
      (P - 1) * K, K,
      [&](size_t t) {
        size_t off;
        const size_t len = recv_seg(t, &off);
        if (!len) return Status::Ok();
        uint8_t* into = v.Direct(off, len);
        if constexpr (View::kStaged) {
          staged[t % kSlots] = into == nullptr;
          if (into == nullptr) into = recv_stage + (t % kSlots) * slot_bytes;
        }
        return l.Irecv(left, a.tag, into, len * es, &recv[t % kSlots]);
      },
      [&](size_t t) {
        size_t off;
        const size_t len = send_seg(t, &off);
        if (!len) return Status::Ok();
        const uint8_t* from = v.Direct(off, len);
        if constexpr (View::kStaged) {
          if (from == nullptr) {  // this slot's last send was waited for at t - kSlots
            uint8_t* stage = send_stage + (t % kSlots) * slot_bytes;
            v.Pieces(off, len, [&](uint8_t* p, size_t n, size_t done) {
              std::memcpy(stage + done * es, p, n * es);
            });
            from = stage;
          }
        }
        return l.Isend(right, a.tag, from, len * es, &send[t % kSlots]);
      },
      [&](size_t t) {
        size_t off;
        const size_t len = recv_seg(t, &off);
        if (!len) return Status::Ok();
        HVD_CHECK(l.Wait(recv[t % kSlots]));
        if constexpr (View::kStaged) {
          if (staged[t % kSlots]) {
            const uint8_t* got = recv_stage + (t % kSlots) * slot_bytes;
            v.Pieces(off, len, [&](uint8_t* p, size_t n, size_t done) {
              std::memcpy(p, got + done * es, n * es);
            });
          }
        }
        return Status::Ok();
      },
      [&](size_t t) {
        size_t off;
        return send_seg(t, &off) ? l.Wait(send[t % kSlots]) : Status::Ok();
      });
}

// Phase 1 (reduce-scatter) in the canonical order: afterwards this rank
// holds part (rank + o) % P reduced as s0 op s1 op ... op s(P-1) (a left
// fold in rank order). Every rank sends its piece of each other part to the
// part's owner, segment by segment (the same bytes as a ring's reduce-scatter,
// in one hop instead of P - 1); the owner folds the pieces in rank order.
// Two sets of slots alternate, so the receives of segment k + 1 are posted
// while segment k is folded.
// The segments are the transport's, smaller with more than 8 ranks so that
// the slots (2 x P segments, twice that for spans) stay within 16 MiB.
template <typename View>
Status ReducePhase(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce, const View& v,
                   const size_t* start, size_t es, size_t o, uint32_t tag, hvd_dtype_t dtype,
                   hvd_reduce_op_t op) {
  const size_t P = static_cast<size_t>(l.size()), r = static_cast<size_t>(l.rank());
  const size_t seg_bytes =
      std::min(l.segment_bytes(), std::max<size_t>(size_t{64} << 10, (size_t{8} << 20) / P));
  const Plan plan = MakePlan(start, P, es, seg_bytes);
  const size_t K = plan.K;
  const size_t mine = (r + o) % P;
  const size_t slot = (plan.seg * es + 63) / 64 * 64;
  // Per set: P slots by source rank (this rank's own: the accumulator where
  // one is needed), then (spans) P staged sends by part.
  const size_t per_set = View::kStaged ? 2 * P : P;
  HVD_ASSIGN_OR_RETURN(uint8_t* mem, s.Get(2 * per_set * slot));
  auto slot_of = [&](size_t k, size_t i) { return mem + ((k % 2) * per_set + i) * slot; };
  std::vector<Req> recv(2 * P, nullptr), send(2 * P, nullptr);
  auto post_recvs = [&](size_t k) {
    size_t off;
    const size_t len = plan.Seg(mine, k, &off);
    for (size_t j = 0; j < P && len > 0; ++j) {
      if (j != r) HVD_CHECK(l.Irecv(static_cast<int>(j), tag, slot_of(k, j), len * es, &recv[(k % 2) * P + j]));
    }
    return Status::Ok();
  };
  auto post_sends = [&](size_t k) {
    for (size_t i = 1; i < P; ++i) {  // to the owners after this rank first
      const size_t q = (mine + i) % P, to = (q + P - o) % P;
      size_t off;
      const size_t len = plan.Seg(q, k, &off);
      if (len == 0) continue;
      const uint8_t* from = v.Direct(off, len);
      if constexpr (View::kStaged) {
        if (from == nullptr) {
          uint8_t* stage = slot_of(k, P + q);
          v.Pieces(off, len, [&](uint8_t* p, size_t n, size_t done) {
            std::memcpy(stage + done * es, p, n * es);
          });
          from = stage;
        }
      }
      HVD_CHECK(l.Isend(static_cast<int>(to), tag, from, len * es, &send[(k % 2) * P + q]));
    }
    return Status::Ok();
  };
  // Folds segment k of this rank's part, waiting for each piece in rank
  // order (a timeout names the first rank whose piece is missing).
  auto fold = [&](size_t k) {
    size_t off;
    const size_t len = plan.Seg(mine, k, &off);
    if (len == 0) return Status::Ok();
    uint8_t* own = v.Direct(off, len);
    uint8_t* acc = r == 0 && own != nullptr ? own : slot_of(k, 0);
    if constexpr (View::kStaged) {  // a flat view's segment is always in place
      if (r == 0 && own == nullptr) {
        v.Pieces(off, len,
                 [&](uint8_t* p, size_t n, size_t done) { std::memcpy(acc + done * es, p, n * es); });
      }
    }
    for (size_t j = 0; j < P; ++j) {
      if (j != r) HVD_CHECK(l.Wait(recv[(k % 2) * P + j]));
      if (j == 0) continue;
      if (j != r) {
        reduce(acc, slot_of(k, j), len, dtype, op);
      } else {
        v.Pieces(off, len, [&](uint8_t* p, size_t n, size_t done) { reduce(acc + done * es, p, n, dtype, op); });
      }
    }
    if (acc != own) {
      v.Pieces(off, len, [&](uint8_t* p, size_t n, size_t done) { std::memcpy(p, acc + done * es, n * es); });
    }
    return Status::Ok();
  };
  auto wait_sends = [&](size_t k) {
    for (size_t q = 0; q < P; ++q) {
      Req& rq = send[(k % 2) * P + q];
      if (rq != nullptr) HVD_CHECK(l.Wait(rq));
      rq = nullptr;
    }
    return Status::Ok();
  };
  HVD_CHECK(post_recvs(0));
  for (size_t k = 0; k < K; ++k) {
    if (k + 1 < K) HVD_CHECK(post_recvs(k + 1));
    HVD_CHECK(post_sends(k));
    HVD_CHECK(fold(k));
    HVD_CHECK(wait_sends(k));
  }
  return Status::Ok();
}

// Phase 2 (allgather): this rank holds part (rank + o) % P; afterwards every
// part everywhere. scratch: spans only (staging).
template <typename View>
Status GatherPhase(Links& l, const View& v, const Plan& plan, size_t es, size_t o, uint32_t tag,
                   Scratch* scratch = nullptr) {
  return RingPass(l, v, PhaseArgs{plan, es, static_cast<long long>(o), tag, scratch});
}

// The ring's parts: P near-equal runs of count elements.
std::vector<size_t> RingParts(size_t count, size_t P) {
  std::vector<size_t> start(P + 1);
  for (size_t p = 0; p <= P; ++p) start[p] = p * (count / P) + std::min(p, count % P);
  return start;
}

}  // namespace

// ---- allreduce ---------------------------------------------------------------

Status AllreduceDirect(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce, void* buf, size_t count,
                       hvd_dtype_t dtype, hvd_reduce_op_t op) {
  size_t es = 0;
  HVD_CHECK(CheckReduction("allreduce", buf, count, dtype, op, &es));
  const int P = l.size(), r = l.rank();
  if (count == 0 || P == 1) return Status::Ok();
  const size_t bytes = count * es, stride = (bytes + 63) / 64 * 64;
  HVD_ASSIGN_OR_RETURN(uint8_t* slots, s.Get(stride * static_cast<size_t>(P)));
  std::vector<Req> recv(static_cast<size_t>(P)), send(static_cast<size_t>(P));
  for (int j = 0; j < P; ++j) {
    if (j != r) HVD_CHECK(l.Irecv(j, kTagDirect, slots + static_cast<size_t>(j) * stride, bytes, &recv[j]));
  }
  for (int i = 1; i < P; ++i) {
    const int to = (r + i) % P;
    HVD_CHECK(l.Isend(to, kTagDirect, buf, bytes, &send[to]));
  }
  // In rank order: a timeout names the first rank whose contribution is missing.
  for (int j = 0; j < P; ++j) {
    if (j != r) HVD_CHECK(l.Wait(recv[j]));
  }
  for (int i = 1; i < P; ++i) HVD_CHECK(l.Wait(send[(r + i) % P]));
  uint8_t* out = static_cast<uint8_t*>(buf);
  std::memcpy(slots + static_cast<size_t>(r) * stride, out, bytes);
  std::memcpy(out, slots, bytes);
  for (int j = 1; j < P; ++j) reduce(out, slots + static_cast<size_t>(j) * stride, count, dtype, op);
  return Status::Ok();
}

Status AllreduceRing(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce, void* buf, size_t count,
                     hvd_dtype_t dtype, hvd_reduce_op_t op) {
  size_t es = 0;
  HVD_CHECK(CheckReduction("allreduce", buf, count, dtype, op, &es));
  const size_t P = static_cast<size_t>(l.size());
  if (count == 0 || P == 1) return Status::Ok();
  const std::vector<size_t> start = RingParts(count, P);
  const Plan plan = MakePlan(start.data(), P, es, l.segment_bytes());
  const FlatView v{static_cast<uint8_t*>(buf), es};
  HVD_CHECK(ReducePhase(l, s, reduce, v, start.data(), es, 1, kTagRing, dtype, op));
  return GatherPhase(l, v, plan, es, 1, kTagRing);
}

Status AllreduceRingSpans(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce,
                          const hvd_transport_span_t* spans, size_t nspans, hvd_dtype_t dtype,
                          hvd_reduce_op_t op) {
  if (nspans > 0 && spans == nullptr) return InvalidArgument("allreduce: NULL spans");
  size_t es = 0;
  for (size_t i = 0; i < nspans; ++i) {
    HVD_CHECK(CheckReduction("allreduce", spans[i].data, spans[i].count, dtype, op, &es));
  }
  const SpanView v(spans, nspans, std::max<size_t>(es, 1));
  const size_t P = static_cast<size_t>(l.size());
  if (v.count() == 0 || P == 1) return Status::Ok();
  const std::vector<size_t> start = RingParts(v.count(), P);
  const Plan plan = MakePlan(start.data(), P, es, l.segment_bytes());
  HVD_CHECK(ReducePhase(l, s, reduce, v, start.data(), es, 1, kTagRing, dtype, op));
  return GatherPhase(l, v, plan, es, 1, kTagRing, &s);
}

// ---- reducescatter ---------------------------------------------------------------

Status ReducescatterRing(Links& l, Scratch& s, hvd_reduce_kernel_fn reduce, void* buf,
                         const size_t* counts, hvd_dtype_t dtype, hvd_reduce_op_t op) {
  const size_t P = static_cast<size_t>(l.size());
  if (counts == nullptr) return InvalidArgument("reducescatter: NULL counts");
  std::vector<size_t> start(P + 1, 0);
  for (size_t p = 0; p < P; ++p) {
    if (counts[p] > SIZE_MAX - start[p]) return InvalidArgument("reducescatter: counts overflow");
    start[p + 1] = start[p] + counts[p];
  }
  size_t es = 0;
  HVD_CHECK(CheckReduction("reducescatter", buf, start[P], dtype, op, &es));
  if (start[P] == 0 || P == 1) return Status::Ok();
  return ReducePhase(l, s, reduce, FlatView{static_cast<uint8_t*>(buf), es}, start.data(), es, 0,
                     kTagReducescatter, dtype, op);
}

// ---- allgatherv ---------------------------------------------------------------

Status AllgathervRing(Links& l, const void* send, void* recv, const size_t* recv_bytes) {
  const size_t P = static_cast<size_t>(l.size()), r = static_cast<size_t>(l.rank());
  if (recv_bytes == nullptr) return InvalidArgument("allgatherv: NULL recv_bytes");
  std::vector<size_t> start(P + 1, 0);
  for (size_t p = 0; p < P; ++p) {
    if (recv_bytes[p] > SIZE_MAX - start[p]) return InvalidArgument("allgatherv: sizes overflow");
    start[p + 1] = start[p] + recv_bytes[p];
  }
  if (start[P] > 0 && recv == nullptr) return InvalidArgument("allgatherv: NULL recv buffer");
  if (recv_bytes[r] > 0 && send == nullptr) return InvalidArgument("allgatherv: NULL send buffer");
  uint8_t* out = static_cast<uint8_t*>(recv);
  if (recv_bytes[r] > 0 && out + start[r] != send) std::memmove(out + start[r], send, recv_bytes[r]);
  if (P == 1 || start[P] == 0) return Status::Ok();
  const Plan plan = MakePlan(start.data(), P, 1, l.segment_bytes());
  return GatherPhase(l, FlatView{out, 1}, plan, 1, 0, kTagAllgatherv);
}

// ---- broadcast ------------------------------------------------------------------

namespace {

// The broadcasts' argument checks: this rank's place relative to the
// root, or -1 where there is nothing to move (no bytes, or one rank).
Result<int> BroadcastStart(const Links& l, const void* buf, size_t bytes, int root) {
  const int P = l.size();
  if (root < 0 || root >= P) {
    return InvalidArgument("broadcast: root " + std::to_string(root) + " out of range");
  }
  if (bytes == 0 || P == 1) return -1;
  if (buf == nullptr) return InvalidArgument("broadcast: NULL buffer");
  return (l.rank() - root + P) % P;
}

}  // namespace

Status BroadcastTree(Links& l, void* buf, size_t bytes, int root) {
  HVD_ASSIGN_OR_RETURN(const int rel, BroadcastStart(l, buf, bytes, root));
  if (rel < 0) return Status::Ok();
  const int P = l.size();
  // Binomial tree over ranks relative to the root: rel receives from rel
  // minus its lowest set bit, then sends to rel + 2^k for every 2^k below it.
  int mask = 1;
  while (mask < P) {
    if (rel & mask) {
      Req rq = nullptr;
      HVD_CHECK(l.Irecv((rel - mask + root) % P, kTagTree, buf, bytes, &rq));
      HVD_CHECK(l.Wait(rq));
      break;
    }
    mask <<= 1;
  }
  std::vector<Req> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (rel + mask < P) {
      sends.emplace_back();
      HVD_CHECK(l.Isend((rel + mask + root) % P, kTagTree, buf, bytes, &sends.back()));
    }
  }
  for (Req rq : sends) HVD_CHECK(l.Wait(rq));
  return Status::Ok();
}

Status BroadcastChain(Links& l, void* buf, size_t bytes, int root) {
  HVD_ASSIGN_OR_RETURN(const int rel, BroadcastStart(l, buf, bytes, root));
  if (rel < 0) return Status::Ok();
  const int P = l.size();
  const int prev = (l.rank() - 1 + P) % P, next = (l.rank() + 1) % P;
  const bool recvs = rel != 0, sends = rel != P - 1;
  uint8_t* base = static_cast<uint8_t*>(buf);
  const size_t S = std::max<size_t>(1, l.segment_bytes());
  const size_t K = (bytes + S - 1) / S;
  auto seg = [&](size_t k, size_t* len) {
    *len = std::min(S, bytes - k * S);
    return base + k * S;
  };
  Req rq[kRingDepth + 1] = {}, sq[kRingDepth + 1] = {};
  size_t next_recv = 0;
  for (size_t k = 0; k < K; ++k) {
    size_t len = 0;
    if (recvs) {
      for (; next_recv < K && next_recv <= k + kRingDepth; ++next_recv) {
        size_t n = 0;
        uint8_t* p = seg(next_recv, &n);
        HVD_CHECK(l.Irecv(prev, kTagChain, p, n, &rq[next_recv % (kRingDepth + 1)]));
      }
      HVD_CHECK(l.Wait(rq[k % (kRingDepth + 1)]));
    }
    if (sends) {
      if (k > kRingDepth) HVD_CHECK(l.Wait(sq[k % (kRingDepth + 1)]));  // its slot's last send
      uint8_t* p = seg(k, &len);
      HVD_CHECK(l.Isend(next, kTagChain, p, len, &sq[k % (kRingDepth + 1)]));
    }
  }
  if (sends) {
    for (size_t k = K > kRingDepth + 1 ? K - (kRingDepth + 1) : 0; k < K; ++k) {
      HVD_CHECK(l.Wait(sq[k % (kRingDepth + 1)]));
    }
  }
  return Status::Ok();
}

// ---- alltoallv --------------------------------------------------------------------

Status AlltoallvPairwise(Links& l, const void* send, const size_t* send_bytes, void* recv,
                         const size_t* recv_bytes) {
  const int P = l.size(), r = l.rank();
  if (send_bytes == nullptr || recv_bytes == nullptr) return InvalidArgument("alltoallv: NULL sizes");
  std::vector<size_t> soff(static_cast<size_t>(P) + 1, 0), roff(static_cast<size_t>(P) + 1, 0);
  for (int p = 0; p < P; ++p) {
    if (send_bytes[p] > SIZE_MAX - soff[p] || recv_bytes[p] > SIZE_MAX - roff[p]) {
      return InvalidArgument("alltoallv: sizes overflow");
    }
    soff[p + 1] = soff[p] + send_bytes[p];
    roff[p + 1] = roff[p] + recv_bytes[p];
  }
  if ((soff[P] > 0 && send == nullptr) || (roff[P] > 0 && recv == nullptr)) {
    return InvalidArgument("alltoallv: NULL buffer");
  }
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  if (recv_bytes[r] != send_bytes[r]) {
    return InvalidArgument("alltoallv: this rank sends itself " + std::to_string(send_bytes[r]) +
                           " bytes but expects " + std::to_string(recv_bytes[r]));
  }
  if (send_bytes[r] > 0) std::memmove(out + roff[r], in + soff[r], send_bytes[r]);
  // Step i: receive from rank - i, send to rank + i; every message is posted
  // at once (a request each), then completed in step order.
  std::vector<Req> rq(static_cast<size_t>(P), nullptr), sq(static_cast<size_t>(P), nullptr);
  for (int i = 1; i < P; ++i) {
    const int from = (r - i + P) % P;
    if (recv_bytes[from] > 0) HVD_CHECK(l.Irecv(from, kTagAlltoallv, out + roff[from], recv_bytes[from], &rq[from]));
  }
  for (int i = 1; i < P; ++i) {
    const int to = (r + i) % P;
    if (send_bytes[to] > 0) HVD_CHECK(l.Isend(to, kTagAlltoallv, in + soff[to], send_bytes[to], &sq[to]));
  }
  for (int i = 1; i < P; ++i) {
    const int from = (r - i + P) % P;
    if (rq[from] != nullptr) HVD_CHECK(l.Wait(rq[from]));
  }
  for (int i = 1; i < P; ++i) {
    const int to = (r + i) % P;
    if (sq[to] != nullptr) HVD_CHECK(l.Wait(sq[to]));
  }
  return Status::Ok();
}

// ---- barrier ----------------------------------------------------------------------

Status BarrierDissemination(Links& l) {
  const int P = l.size(), r = l.rank();
  uint8_t out = 1, in = 0;
  for (int k = 1; k < P; k <<= 1) {
    Req rq = nullptr, sq = nullptr;
    HVD_CHECK(l.Irecv((r - k + P) % P, kTagBarrier, &in, 1, &rq));
    HVD_CHECK(l.Isend((r + k) % P, kTagBarrier, &out, 1, &sq));
    HVD_CHECK(l.Wait(rq));
    HVD_CHECK(l.Wait(sq));
  }
  return Status::Ok();
}

}  // namespace algo
}  // namespace hvd
