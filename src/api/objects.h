// The opaque objects behind hvd.h's handles: a context and an operation's
// handle, each guarded by a magic number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "api/block_pool.h"
#include "core/context.h"
#include "core/loop/request.h"
#include "hvd.h"

namespace hvd::api {

constexpr uint64_t kContextMagic = 0x6876642d63747831ULL;  // "hvd-ctx1"
constexpr uint64_t kHandleMagic = 0x6876642d686e6431ULL;   // "hvd-hnd1"
constexpr uint64_t kDeadMagic = 0xdeadc0dedeadc0deULL;     // written on destroy/release

constexpr size_t kMaxNameBytes = 1024;

}  // namespace hvd::api

// The opaque types of hvd.h. The magic number comes first and is poisoned
// when the object is destroyed, so a destroyed or foreign pointer is usually
// caught with an error instead of a crash. "Usually": reading freed memory is
// undefined behaviour, and the allocator may have reused it; the check is a
// diagnostic aid, not a guarantee.
struct hvd_context_s {
  uint64_t magic = hvd::api::kContextMagic;
  std::unique_ptr<hvd::Context> impl;
  // Where its handles are made (block_pool.h); handles share it.
  std::shared_ptr<hvd::api::BlockPool> handles = std::make_shared<hvd::api::BlockPool>();
};

struct hvd_handle_s {
  uint64_t magic = hvd::api::kHandleMagic;
  std::shared_ptr<hvd::Handle> impl;
  hvd::OpType type = hvd::OpType::kAllreduce;
  int32_t size = 1;  // the context's size when the op was submitted (recv_splits)
  // Lives in a HandleBox with the handle it wraps: impl owns the box, and
  // so this wrapper (release moves impl out before dropping it).
};

namespace hvd::api {

// A submit's handle and its C wrapper in one allocation (a fused step of
// 1,000 tensors makes 1,000 of each). The box lives while the wrapper (its
// impl) or the core holds the handle.
struct HandleBox {
  template <typename... A>
  explicit HandleBox(A&&... a) : core(std::forward<A>(a)...) {}
  hvd_handle_s wrapper;
  hvd::Handle core;
};

}  // namespace hvd::api
