// Checks of process sets over a parent context, shared by the thread-rank
// suite (unit.test_process_sets) and the multi-process check (mp_check, under
// hvdrun and mpirun): overlapping and disjoint sets, every collective and
// dtype inside them with exact checks (floats within reference.h's
// tolerances), the same names used at once in every set and in the parent,
// submitted in a different order on every rank, a mismatch inside one set
// while another runs, and bad lists. Every rank of the parent calls
// ProcessSetChecks; each check reports through `report`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hvd.h"
#include "reference.h"

namespace hvd::test {

using Report = std::function<void(bool ok, const std::string& what)>;

namespace ps_detail {

inline std::string Err(hvd_status_t s) {
  return std::string(hvd_status_string(s)) + ": " + hvd_last_error();
}

// One submitted operation: its handle and how to check its result.
struct Op {
  std::string label;
  std::function<hvd_status_t(hvd_handle_t*)> submit;
  std::function<void(hvd_handle_t, const Report&)> verify;
  hvd_handle_t h = nullptr;
  // Buffers the operation reads and writes (kept until it completes).
  std::vector<std::shared_ptr<std::vector<unsigned char>>> keep;
};

inline std::shared_ptr<std::vector<unsigned char>> Bytes(size_t n, unsigned char fill = 0) {
  return std::make_shared<std::vector<unsigned char>>(n, fill);
}

// The operations one rank runs in one communicator (a set, or the parent)
// where it is rank r of m; `members` are its parent ranks. Names are the
// same in every communicator.
inline void AddOps(hvd_context_t ctx, const std::string& label, int r, int m,
                   const std::vector<int>& members, std::vector<Op>* ops) {
  // Who is in it: the sum of the members' parent ranks.
  {
    Op op;
    op.label = label + " membership";
    auto buf = Bytes(sizeof(int64_t));
    int64_t mine = members[static_cast<size_t>(r)];
    std::memcpy(buf->data(), &mine, sizeof(mine));
    int64_t want = 0;
    for (int p : members) want += p;
    op.keep = {buf};
    op.submit = [ctx, buf](hvd_handle_t* h) {
      static const int64_t shape[1] = {1};
      hvd_tensor_t t = {buf->data(), HVD_INT64, 1, shape, HVD_DEVICE_CPU, nullptr};
      return hvd_allreduce_async(ctx, "members", &t, buf->data(), HVD_SUM, 1.0, 1.0, h);
    };
    op.verify = [buf, want, label](hvd_handle_t, const Report& report) {
      int64_t got = 0;
      std::memcpy(&got, buf->data(), sizeof(got));
      report(got == want, label + ": sum of member ranks " + std::to_string(got) + ", want " +
                              std::to_string(want));
    };
    ops->push_back(std::move(op));
  }
  // Allreduce: every dtype x op.
  const size_t count = 37;
  for (hvd_dtype_t d : kDtypes) {
    for (hvd_reduce_op_t rop : kOps) {
      if (d == HVD_BOOL && rop == HVD_AVERAGE) continue;
      Op op;
      const std::string name = std::string("ar.") + std::to_string(d) + "." + std::to_string(rop);
      op.label = label + " allreduce " + name;
      const size_t es = [&] {
        size_t s = 0;
        hvd_dtype_size(d, &s);
        return s;
      }();
      auto buf = Bytes(count * es);
      for (size_t i = 0; i < count; ++i) Store(d, buf->data(), i, Value(d, rop, r, i));
      op.keep = {buf};
      op.submit = [ctx, buf, d, rop, name](hvd_handle_t* h) {
        static const int64_t shape[1] = {37};
        hvd_tensor_t t = {buf->data(), d, 1, shape, HVD_DEVICE_CPU, nullptr};
        return hvd_allreduce_async(ctx, name.c_str(), &t, buf->data(), rop, 1.0, 1.0, h);
      };
      op.verify = [buf, d, rop, m, label = op.label](hvd_handle_t, const Report& report) {
        int bad = 0;
        for (size_t i = 0; i < count && bad < 2; ++i) {
          const double got = Load(d, buf->data(), i), want = Expected(d, rop, m, i);
          if (std::abs(got - want) > Tolerance(d, rop) * std::max(1.0, std::abs(want))) {
            ++bad;
            report(false, label + "[" + std::to_string(i) + "] = " + std::to_string(got) +
                              ", want " + std::to_string(want));
          }
        }
        if (bad == 0) report(true, label);
      };
      ops->push_back(std::move(op));
    }
  }
  // Allgather: rank r gives r + 1 rows of 2 int32.
  {
    Op op;
    op.label = label + " allgather";
    auto buf = Bytes(static_cast<size_t>(r + 1) * 2 * sizeof(int32_t));
    auto* v = reinterpret_cast<int32_t*>(buf->data());
    for (int row = 0; row <= r; ++row) {
      v[2 * row] = r * 100 + row;
      v[2 * row + 1] = -r;
    }
    op.keep = {buf};
    op.submit = [ctx, buf, r](hvd_handle_t* h) {
      const int64_t shape[2] = {r + 1, 2};
      hvd_tensor_t t = {buf->data(), HVD_INT32, 2, shape, HVD_DEVICE_CPU, nullptr};
      return hvd_allgather_async(ctx, "ag", &t, h);
    };
    op.verify = [m, label = op.label](hvd_handle_t h, const Report& report) {
      const void* data = nullptr;
      size_t bytes = 0;
      hvd_status_t s = hvd_handle_output(h, &data, &bytes);
      const size_t rows = static_cast<size_t>(m) * (m + 1) / 2;
      bool ok = s == HVD_OK && bytes == rows * 2 * sizeof(int32_t);
      const auto* out = static_cast<const int32_t*>(data);
      size_t k = 0;
      for (int src = 0; ok && src < m; ++src) {
        for (int row = 0; row <= src; ++row, ++k) {
          ok = ok && out[2 * k] == src * 100 + row && out[2 * k + 1] == -src;
        }
      }
      report(ok, label + " (" + std::to_string(bytes) + " bytes)");
    };
    ops->push_back(std::move(op));
  }
  // Broadcast from the set's last rank (a rank within the set).
  {
    Op op;
    op.label = label + " broadcast";
    auto buf = Bytes(1000 * sizeof(int32_t));
    auto* v = reinterpret_cast<int32_t*>(buf->data());
    for (int i = 0; i < 1000; ++i) v[i] = r * 7 + i;
    op.keep = {buf};
    op.submit = [ctx, buf, m](hvd_handle_t* h) {
      static const int64_t shape[1] = {1000};
      hvd_tensor_t t = {buf->data(), HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
      return hvd_broadcast_async(ctx, "bc", &t, buf->data(), m - 1, h);
    };
    op.verify = [buf, m, label = op.label](hvd_handle_t, const Report& report) {
      const auto* v = reinterpret_cast<const int32_t*>(buf->data());
      bool ok = true;
      for (int i = 0; i < 1000; ++i) ok = ok && v[i] == (m - 1) * 7 + i;
      report(ok, label);
    };
    ops->push_back(std::move(op));
  }
  // Alltoall: r sends (r + j) % m + 1 rows to j.
  {
    Op op;
    op.label = label + " alltoall";
    std::vector<int64_t> in;
    auto splits = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(m));
    for (int j = 0; j < m; ++j) {
      (*splits)[j] = (r + j) % m + 1;
      for (int64_t k = 0; k < (*splits)[j]; ++k) in.push_back(r * 1000 + j * 10 + k);
    }
    auto buf = Bytes(in.size() * sizeof(int64_t));
    std::memcpy(buf->data(), in.data(), buf->size());
    op.keep = {buf};
    const int64_t rows = static_cast<int64_t>(in.size());
    op.submit = [ctx, buf, splits, rows](hvd_handle_t* h) {
      const int64_t shape[1] = {rows};
      hvd_tensor_t t = {buf->data(), HVD_INT64, 1, shape, HVD_DEVICE_CPU, nullptr};
      return hvd_alltoall_async(ctx, "a2a", &t, splits->data(), h);
    };
    op.verify = [r, m, label = op.label](hvd_handle_t h, const Report& report) {
      const void* data = nullptr;
      size_t bytes = 0;
      hvd_status_t s = hvd_handle_output(h, &data, &bytes);
      bool ok = s == HVD_OK;
      const auto* out = static_cast<const int64_t*>(data);
      size_t k = 0;
      for (int src = 0; ok && src < m; ++src) {
        for (int64_t row = 0; row < (src + r) % m + 1; ++row, ++k) {
          ok = ok && (k + 1) * sizeof(int64_t) <= bytes && out[k] == src * 1000 + r * 10 + row;
        }
      }
      report(ok && bytes == k * sizeof(int64_t), label);
    };
    ops->push_back(std::move(op));
  }
  // Reducescatter: 2m + 1 rows of 3 float32, in[i] = i + r.
  {
    Op op;
    op.label = label + " reducescatter";
    const int64_t rows = 2 * m + 1;
    auto buf = Bytes(static_cast<size_t>(rows) * 3 * sizeof(float));
    auto* v = reinterpret_cast<float*>(buf->data());
    for (int64_t i = 0; i < rows * 3; ++i) v[i] = static_cast<float>(i + r);
    op.keep = {buf};
    op.submit = [ctx, buf, rows](hvd_handle_t* h) {
      const int64_t shape[2] = {rows, 3};
      hvd_tensor_t t = {buf->data(), HVD_FLOAT32, 2, shape, HVD_DEVICE_CPU, nullptr};
      return hvd_reducescatter_async(ctx, "rs", &t, HVD_SUM, 1.0, 1.0, h);
    };
    op.verify = [r, m, rows, label = op.label](hvd_handle_t h, const Report& report) {
      const int64_t base = rows / m, extra = rows % m;
      const int64_t my_rows = base + (r < extra ? 1 : 0);
      const int64_t first = r * base + std::min<int64_t>(r, extra);
      const void* data = nullptr;
      size_t bytes = 0;
      hvd_status_t s = hvd_handle_output(h, &data, &bytes);
      bool ok = s == HVD_OK && bytes == static_cast<size_t>(my_rows * 3) * sizeof(float);
      const auto* out = static_cast<const float*>(data);
      const double ranksum = m * (m - 1) / 2.0;
      for (int64_t i = 0; ok && i < my_rows * 3; ++i) {
        ok = out[i] == static_cast<float>(m * static_cast<double>(first * 3 + i) + ranksum);
      }
      report(ok, label);
    };
    ops->push_back(std::move(op));
  }
}

// Makes a set from `ranks` (every rank calls); checks what it reports.
inline hvd_context_t MakeSet(hvd_context_t parent, int rank, const std::vector<int32_t>& ranks,
                             const std::string& label, const Report& report) {
  hvd_context_t set = nullptr;
  hvd_status_t s = hvd_process_set_create(parent, static_cast<int32_t>(ranks.size()),
                                          ranks.data(), &set);
  report(s == HVD_OK, label + ": hvd_process_set_create: " + (s == HVD_OK ? "" : Err(s)));
  const auto at = std::find(ranks.begin(), ranks.end(), rank);
  const bool member = at != ranks.end();
  report(member == (set != nullptr), label + ": a member gets a set, others NULL");
  if (set != nullptr) {
    int r = -1, m = -1;
    hvd_context_rank(set, &r);
    hvd_context_size(set, &m);
    report(r == static_cast<int>(at - ranks.begin()) && m == static_cast<int>(ranks.size()),
           label + ": rank " + std::to_string(r) + " of " + std::to_string(m));
    std::vector<int32_t> back(ranks.size(), -1);
    hvd_context_parent_ranks(set, back.data(), static_cast<int32_t>(back.size()));
    report(back == ranks, label + ": hvd_context_parent_ranks");
  }
  return set;
}

}  // namespace ps_detail

inline void ProcessSetChecks(hvd_context_t parent, int rank, int n, const Report& report) {
  using namespace ps_detail;  // NOLINT
  // Disjoint: split by parity, ordered by descending rank (key = -rank).
  hvd_context_t half = nullptr;
  hvd_status_t s = hvd_context_split(parent, rank % 2, -rank, &half);
  report(s == HVD_OK && half != nullptr, "split: " + (s == HVD_OK ? std::string() : Err(s)));
  std::vector<int32_t> half_ranks;
  for (int p = n - 1; p >= 0; --p) {
    if (p % 2 == rank % 2) half_ranks.push_back(p);
  }
  if (half != nullptr) {
    int r = -1, m = -1;
    hvd_context_rank(half, &r);
    hvd_context_size(half, &m);
    const int want_r = static_cast<int>(
        std::find(half_ranks.begin(), half_ranks.end(), rank) - half_ranks.begin());
    report(r == want_r && m == static_cast<int>(half_ranks.size()),
           "split: rank " + std::to_string(r) + " of " + std::to_string(m));
    std::vector<int32_t> back(half_ranks.size(), -1);
    hvd_context_parent_ranks(half, back.data(), static_cast<int32_t>(back.size()));
    report(back == half_ranks, "split: hvd_context_parent_ranks");
    int lr = -1, ls = -1, cr = -1, cs = -1;
    hvd_context_local_rank(half, &lr);
    hvd_context_local_size(half, &ls);
    hvd_context_cross_rank(half, &cr);
    hvd_context_cross_size(half, &cs);
    report(lr >= 0 && lr < ls && ls <= m && cr >= 0 && cr < cs && cs <= m,
           "split: local " + std::to_string(lr) + "/" + std::to_string(ls) + ", cross " +
               std::to_string(cr) + "/" + std::to_string(cs));
  }
  // A color nobody else uses, and HVD_UNDEFINED_COLOR.
  hvd_context_t lone = nullptr;
  s = hvd_context_split(parent, rank == 0 ? HVD_UNDEFINED_COLOR : 1000 + rank, 0, &lone);
  report(s == HVD_OK && (rank == 0) == (lone == nullptr),
         "split with HVD_UNDEFINED_COLOR / a color of one: " + (s == HVD_OK ? std::string() : Err(s)));
  if (lone != nullptr) {
    int m = 0;
    hvd_context_size(lone, &m);
    report(m == 1, "a set of one rank");
  }
  // Overlapping: A = 0 .. n-2, B = 1 .. n-1, and all ranks.
  std::vector<int32_t> a_ranks, b_ranks, all_ranks;
  for (int p = 0; p < n; ++p) {
    if (p < std::max(1, n - 1)) a_ranks.push_back(p);
    if (p >= std::min(1, n - 1)) b_ranks.push_back(p);
    all_ranks.push_back(p);
  }
  hvd_context_t a = MakeSet(parent, rank, a_ranks, "set A", report);
  hvd_context_t b = MakeSet(parent, rank, b_ranks, "set B", report);
  hvd_context_t all = MakeSet(parent, rank, all_ranks, "set ALL", report);

  // Every communicator this rank is in, the parent too: the same names in
  // all of them, in a different order on every rank.
  std::vector<Op> ops;
  struct Member {
    hvd_context_t ctx;
    const char* label;
    const std::vector<int32_t>* ranks;
  };
  std::vector<int32_t> parent_ranks(all_ranks);
  for (const Member& mb : {Member{half, "split half", &half_ranks}, Member{a, "set A", &a_ranks},
                           Member{b, "set B", &b_ranks}, Member{all, "set ALL", &all_ranks},
                           Member{parent, "parent", &parent_ranks},
                           Member{lone, "set of one", nullptr}}) {
    if (mb.ctx == nullptr) continue;
    int r = 0, m = 1;
    hvd_context_rank(mb.ctx, &r);
    hvd_context_size(mb.ctx, &m);
    std::vector<int> members;
    if (mb.ranks != nullptr) {
      members.assign(mb.ranks->begin(), mb.ranks->end());
    } else {
      members.push_back(rank);
    }
    AddOps(mb.ctx, mb.label, r, m, members, &ops);
  }
  std::mt19937 rng(7919u * static_cast<unsigned>(rank) + 1);
  std::shuffle(ops.begin(), ops.end(), rng);
  for (Op& op : ops) {
    s = op.submit(&op.h);
    report(s == HVD_OK, op.label + ": submit: " + (s == HVD_OK ? std::string() : Err(s)));
  }
  for (Op& op : ops) {
    if (op.h == nullptr) continue;
    s = hvd_handle_wait(op.h, 120);
    report(s == HVD_OK, op.label + ": " + (s == HVD_OK ? std::string("done") : Err(s)));
    if (s == HVD_OK) op.verify(op.h, report);
    hvd_handle_release(op.h);
  }
  for (hvd_context_t c : {half, a, b, all, lone}) {
    if (c != nullptr) {
      s = hvd_barrier(c);
      report(s == HVD_OK, "barrier in a set: " + (s == HVD_OK ? std::string() : Err(s)));
    }
  }

  // A mismatch inside set A: its members all get it while set B runs, and
  // both sets work afterwards.
  if (n >= 3) {
    std::vector<float> buf(8, 1.0f);
    hvd_handle_t ha = nullptr, hb = nullptr;
    int ra = -1, ma = 0;
    if (a != nullptr) {
      hvd_context_rank(a, &ra);
      hvd_context_size(a, &ma);
      const int64_t shape[1] = {ra == ma - 1 ? 7 : 8};
      hvd_tensor_t t = {buf.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
      report(hvd_allreduce_async(a, "mismatch", &t, buf.data(), HVD_SUM, 1, 1, &ha) == HVD_OK,
             "set A: submit the mismatch");
    }
    std::vector<float> bb(8, 1.0f);
    if (b != nullptr) {
      const int64_t shape[1] = {8};
      hvd_tensor_t t = {bb.data(), HVD_FLOAT32, 1, shape, HVD_DEVICE_CPU, nullptr};
      report(hvd_allreduce_async(b, "mismatch", &t, bb.data(), HVD_SUM, 1, 1, &hb) == HVD_OK,
             "set B: submit the same name");
    }
    if (ha != nullptr) {
      s = hvd_handle_wait(ha, 120);
      report(s == HVD_ERR_MISMATCH && std::strstr(hvd_last_error(), "shape") != nullptr,
             std::string("set A: the mismatch: ") + Err(s));
      hvd_handle_release(ha);
    }
    if (hb != nullptr) {
      s = hvd_handle_wait(hb, 120);
      report(s == HVD_OK && bb[0] == static_cast<float>(b_ranks.size()),
             "set B beside set A's mismatch: " + Err(s));
      hvd_handle_release(hb);
    }
    for (hvd_context_t c : {a, b}) {
      if (c == nullptr) continue;
      int m = 0;
      hvd_context_size(c, &m);
      std::vector<int32_t> ok(4, 2);
      const int64_t shape[1] = {4};
      hvd_tensor_t t = {ok.data(), HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
      s = hvd_allreduce(c, "after.mismatch", &t, ok.data(), HVD_SUM);
      report(s == HVD_OK && ok[3] == 2 * m, "a set after the mismatch: " + Err(s));
    }
  }

  // Bad lists: every rank fails alike, naming the rank and the list; the
  // parent goes on.
  {
    std::vector<int32_t> unsorted;
    for (int p = n - 1; p >= 0; --p) unsorted.push_back(p);
    if (n == 1) unsorted = {0, 0};
    hvd_context_t bad = nullptr;
    s = hvd_process_set_create(parent, static_cast<int32_t>(unsorted.size()), unsorted.data(), &bad);
    report(s == HVD_ERR_INVALID_ARGUMENT && bad == nullptr &&
               std::strstr(hvd_last_error(), "rank 0 passed") != nullptr,
           "an unsorted list: " + Err(s));
    const std::vector<int32_t> out_of_range{0, n};
    s = hvd_process_set_create(parent, 2, out_of_range.data(), &bad);
    report(s == HVD_ERR_INVALID_ARGUMENT && std::strstr(hvd_last_error(), "out of range") != nullptr,
           "an out-of-range rank: " + Err(s));
    const std::vector<int32_t> mine{rank};
    s = hvd_process_set_create(parent, 1, mine.data(), &bad);
    if (n > 1) {
      report(s == HVD_ERR_MISMATCH && std::strstr(hvd_last_error(), "rank 0 listed [0]") != nullptr,
             "ranks passing different lists: " + Err(s));
    } else {
      report(s == HVD_OK && bad != nullptr, "a list of one on a world of one");
      if (bad != nullptr) hvd_context_destroy(bad);
    }
    s = rank == 0 ? hvd_context_split(parent, 0, 0, &bad)
                  : hvd_process_set_create(parent, 1, all_ranks.data(), &bad);
    if (n > 1) {
      report(s == HVD_ERR_MISMATCH && std::strstr(hvd_last_error(), "hvd_context_split") != nullptr,
             "split on one rank, create on the others: " + Err(s));
    } else if (bad != nullptr) {
      hvd_context_destroy(bad);
    }
    s = hvd_context_split(parent, rank == n - 1 ? -5 : 0, 0, &bad);
    report(s == HVD_ERR_INVALID_ARGUMENT && std::strstr(hvd_last_error(), "color -5") != nullptr,
           "a negative color: " + Err(s));
    if (all != nullptr) {
      hvd_context_t nested = nullptr;
      s = hvd_context_split(all, 0, 0, &nested);
      report(s == HVD_ERR_UNSUPPORTED && nested == nullptr, "a set of a set: " + Err(s));
    }
    std::vector<int32_t> ok(2, 1);
    const int64_t shape[1] = {2};
    hvd_tensor_t t = {ok.data(), HVD_INT32, 1, shape, HVD_DEVICE_CPU, nullptr};
    s = hvd_allreduce(parent, "after.bad.lists", &t, ok.data(), HVD_SUM);
    report(s == HVD_OK && ok[0] == n, "the parent after bad lists: " + Err(s));
  }

  for (hvd_context_t c : {half, a, b, all, lone}) {
    if (c == nullptr) continue;
    s = hvd_context_destroy(c);
    report(s == HVD_OK, "destroying a set: " + (s == HVD_OK ? std::string() : Err(s)));
  }
}

}  // namespace hvd::test
