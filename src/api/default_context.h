// The default context (hvd_init / hvd_shutdown) and resolving a context
// argument (NULL: the default context).
//
// The only process-global state in the library is the default context below
// (hvd_init / hvd_shutdown): a pointer and a reference count under a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "api/errors.h"
#include "api/objects.h"
#include "common/status.h"

namespace hvd::api {

struct DefaultContext {
  // Serialises hvd_init and hvd_shutdown; held across Context::Create (a
  // collective that may take long) and across destruction, so a concurrent
  // hvd_init waits and then counts instead of creating a second context.
  std::mutex lifecycle_mu;
  // Guards ctx and refs; held only briefly, never across a collective, so a
  // log callback that calls hvd_rank() during creation cannot deadlock.
  std::mutex mu;
  // Written under mu; read without it on every call that passes NULL (the
  // hot path of a submit), which needs only the pointer.
  std::atomic<hvd_context_s*> ctx{nullptr};
  int64_t refs = 0;
};

// Never destroyed: calls during static destruction (atexit handlers, other
// libraries' destructors) still find a valid mutex. A default context still
// initialised at exit is not torn down; call hvd_shutdown.
DefaultContext& Default();

// NULL means the default context. The returned pointer is valid until the
// context is destroyed; hvd_shutdown must not race with other threads' calls
// on the default context (as in Horovod).
hvd::Status ResolveContext(const char* fn, hvd_context_t ctx, hvd_context_s** out);

// Resolves ctx and returns body(context); a bad ctx is reported instead.
template <typename F>
hvd_status_t WithContext(const char* fn, hvd_context_t ctx, F&& body) {
  hvd_context_s* c = nullptr;
  const hvd::Status s = ResolveContext(fn, ctx, &c);
  if (!s.ok()) return Report(s);
  return body(c);
}

}  // namespace hvd::api
