// The opaque objects behind hvd.h's handles: a context and an operation's
// handle (handle_pool.h), each guarded by a magic number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "api/handle_pool.h"
#include "core/context.h"
#include "hvd.h"

namespace hvd::api {

constexpr size_t kMaxNameBytes = 1024;

}  // namespace hvd::api

// The opaque context of hvd.h. The magic number comes first and is poisoned
// when the object is destroyed, so a destroyed or foreign pointer is usually
// caught with an error instead of a crash. "Usually": reading freed memory is
// undefined behaviour, and the allocator may have reused it; the check is a
// diagnostic aid, not a guarantee.
struct hvd_context_s {
  uint64_t magic = hvd::api::kContextMagic;
  std::unique_ptr<hvd::Context> impl;
  // Where its handles come from (handle_pool.h); it outlives the context
  // while handles live.
  std::unique_ptr<hvd::api::HandlePool, hvd::api::HandlePool::Dropper> handles{
      new hvd::api::HandlePool()};
};
