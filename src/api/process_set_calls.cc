// The C calls on process sets and membership: split, create from a rank
// list, parent ranks, the elastic reset and membership.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/default_context.h"
#include "api/errors.h"
#include "api/objects.h"
#include "api/submit.h"
#include "api/validate.h"
#include "common/kernels.h"
#include "hvd.h"

using namespace hvd::api;  // NOLINT: the C calls below are this module's shims

namespace {

// A process-set call's result: the child (nullptr where this rank is not a
// member) wrapped as an hvd_context_t.
hvd_status_t WrapChild(const char* fn, hvd::Result<std::unique_ptr<hvd::Context>> r,
                       hvd_context_t* child) {
  if (!r.ok()) return Report(r.status().Wrap(fn));
  std::unique_ptr<hvd::Context> made = std::move(r).value();
  if (!made) return HVD_OK;
  auto wrapper = std::make_unique<hvd_context_s>();
  wrapper->impl = std::move(made);
  *child = wrapper.release();
  return HVD_OK;
}

}  // namespace

extern "C" {

// ===========================================================================
// Process sets.
// ===========================================================================

hvd_status_t hvd_context_split(hvd_context_t parent, int color, int key, hvd_context_t* child) {
  HVD_API_BEGIN();
  if (child == nullptr) return Report(Invalid(__func__, "child is NULL"));
  *child = nullptr;
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, parent, &c);
  if (!s.ok()) return Report(s);
  // A bad color still takes part, so every rank fails together naming it.
  return WrapChild(__func__, c->impl->Split(color, key), child);
  HVD_API_END();
}

hvd_status_t hvd_process_set_create(hvd_context_t parent, int32_t n, const int32_t* ranks,
                                    hvd_context_t* child) {
  HVD_API_BEGIN();
  if (child == nullptr) return Report(Invalid(__func__, "child is NULL"));
  *child = nullptr;
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, parent, &c);
  if (!s.ok()) return Report(s);
  // NULL ranks or a negative n are caught here; a bad list otherwise takes
  // part, so every rank fails together naming it.
  if (n < 0) return Report(Invalid(__func__, Cat("n is negative (", n, ")")));
  if (n > 0 && ranks == nullptr) return Report(Invalid(__func__, "ranks is NULL"));
  std::vector<int32_t> list(ranks, ranks + n);
  return WrapChild(__func__, c->impl->CreateProcessSet(list), child);
  HVD_API_END();
}

hvd_status_t hvd_context_parent_ranks(hvd_context_t ctx, int32_t* ranks, int32_t n) {
  HVD_API_BEGIN();
  if (n < 0) return Report(Invalid(__func__, Cat("n is negative (", n, ")")));
  if (n > 0 && ranks == nullptr) return Report(Invalid(__func__, "ranks is NULL"));
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  const std::vector<int>& m = c->impl->parent_ranks();
  for (int32_t i = 0; i < n && i < static_cast<int32_t>(m.size()); ++i) ranks[i] = m[static_cast<size_t>(i)];
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_context_reset(hvd_context_t ctx) {
  HVD_API_BEGIN();
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  s = c->impl->Reset();
  if (!s.ok()) return Report(s.Wrap(__func__));
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_context_membership(hvd_context_t ctx, hvd_membership_t* out) {
  HVD_API_BEGIN();
  hvd::Status s = CheckOutPointer(__func__, "out", out);
  if (!s.ok()) return Report(s);
  constexpr size_t kFirst = offsetof(hvd_membership_t, elastic) + sizeof(int32_t);
  if (out->struct_size < kFirst) {
    return Report(Invalid(__func__, Cat("out->struct_size (", out->struct_size,
                                        ") is too small: set it to sizeof(hvd_membership_t)")));
  }
  hvd_context_s* c = nullptr;
  s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  auto m = c->impl->membership();
  if (!m.ok()) return Report(m.status().Wrap(__func__));
  const size_t have = out->struct_size;
  out->elastic = m->elastic ? 1 : 0;
  if (have >= offsetof(hvd_membership_t, hosts_updated) + sizeof(int32_t)) {
    out->hosts_updated = m->hosts_updated ? 1 : 0;
  }
  if (have >= offsetof(hvd_membership_t, epoch) + sizeof(int64_t)) out->epoch = m->epoch;
  return HVD_OK;
  HVD_API_END();
}

}  // extern "C"
