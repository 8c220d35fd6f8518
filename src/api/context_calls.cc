// The C calls on contexts: explicit contexts, the default context
// (hvd_init / hvd_shutdown), ranks and sizes, the transport, the timeline,
// the flight recorder's dump.

#include <dlfcn.h>

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
#include "transport/loader.h"

using namespace hvd::api;  // NOLINT: the C calls below are this module's shims

namespace {

template <typename Getter>
hvd_status_t GetInt(const char* fn, hvd_context_t ctx, int* out, Getter get) {
  hvd::Status s = CheckOutPointer(fn, "out", out);
  if (!s.ok()) return Report(s);
  hvd_context_s* c = nullptr;
  s = ResolveContext(fn, ctx, &c);
  if (!s.ok()) return Report(s);
  *out = get(*c->impl);
  return HVD_OK;
}

}  // namespace

extern "C" {

// ===========================================================================
// Explicit contexts.
// ===========================================================================

hvd_status_t hvd_context_create(const hvd_params_t* params, hvd_context_t* out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  *out = nullptr;
  auto wrapper = std::make_unique<hvd_context_s>();  // before the collective
  auto r = hvd::Context::Create(params);
  if (!r.ok()) return Report(r.status().Wrap("hvd_context_create"));
  wrapper->impl = std::move(r).value();
  if (!wrapper->impl) return Fail(HVD_ERR_INTERNAL, "hvd_context_create: Create returned NULL");
  *out = wrapper.release();
  return HVD_OK;
  HVD_API_END();
}

// NULL is refused rather than read as "the default context": the default
// context is released only through hvd_shutdown (it is reference counted).
hvd_status_t hvd_context_destroy(hvd_context_t ctx) {
  HVD_API_BEGIN();
  if (ctx == nullptr) {
    return Report(Invalid(__func__, "ctx is NULL; the default context is released with "
                                    "hvd_shutdown, not hvd_context_destroy"));
  }
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  {
    DefaultContext& d = Default();
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.ctx == c) {
      return Report(Invalid(__func__, "ctx is the default context (from hvd_init); release it "
                                      "with hvd_shutdown"));
    }
  }
  c->magic = kDeadMagic;
  std::unique_ptr<hvd::Context> impl = std::move(c->impl);
  delete c;
  // Pending ops complete with HVD_ERR_ABORTED; peers are told. A process
  // set: its members agree first (the status says if they did not).
  const hvd::Status st = impl->Shutdown();
  impl.reset();
  if (!st.ok()) return Report(st.Wrap(__func__));
  return HVD_OK;
  HVD_API_END();
}

// hvd_context_<what>(ctx, out) and hvd_<what>(out), the same query on the
// default context.
#define HVD_CONTEXT_GETTERS(what)                                                  \
  hvd_status_t hvd_context_##what(hvd_context_t ctx, int* out) {                   \
    HVD_API_BEGIN();                                                               \
    return GetInt(__func__, ctx, out,                                              \
                  [](const hvd::Context& c) { return c.what(); });                 \
    HVD_API_END();                                                                 \
  }                                                                                \
  hvd_status_t hvd_##what(int* out) {                                              \
    HVD_API_BEGIN();                                                               \
    return GetInt(__func__, nullptr, out,                                          \
                  [](const hvd::Context& c) { return c.what(); });                 \
    HVD_API_END();                                                                 \
  }

HVD_CONTEXT_GETTERS(rank)
HVD_CONTEXT_GETTERS(size)
HVD_CONTEXT_GETTERS(local_rank)
HVD_CONTEXT_GETTERS(local_size)
HVD_CONTEXT_GETTERS(cross_rank)
HVD_CONTEXT_GETTERS(cross_size)

#undef HVD_CONTEXT_GETTERS

hvd_status_t hvd_context_transport(hvd_context_t ctx, const char** out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  return WithContext(__func__, ctx, [out](hvd_context_s* c) {
    const char* name = c->impl->transport_name();
    *out = name != nullptr ? name : "";
    return HVD_OK;
  });
  HVD_API_END();
}

hvd_status_t hvd_transport_probe(const char* name, const char* transport_path) {
  HVD_API_BEGIN();
  if (name == nullptr || *name == '\0') return Report(Invalid(__func__, "name is NULL or empty"));
  auto found = hvd::FindTransport(name, transport_path != nullptr ? transport_path : "");
  if (!found.ok()) return Report(found.status());
  // The plugin stays loaded (src/transport/transport.cc, Transport::Check):
  // a job that probes UCX and then uses it must not unload and reload it.
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_timeline_start(hvd_context_t ctx, const char* path, int mark_cycles) {
  HVD_API_BEGIN();
  if (path == nullptr) return Report(Invalid(__func__, "path is NULL"));
  return WithContext(__func__, ctx, [&](hvd_context_s* c) {
    return Report(c->impl->StartTimeline(path, mark_cycles != 0));
  });
  HVD_API_END();
}

hvd_status_t hvd_timeline_stop(hvd_context_t ctx) {
  HVD_API_BEGIN();
  return WithContext(__func__, ctx,
                     [](hvd_context_s* c) { return Report(c->impl->StopTimeline()); });
  HVD_API_END();
}

hvd_status_t hvd_flight_recorder_dump(hvd_context_t ctx, const char* path) {
  HVD_API_BEGIN();
  if (path != nullptr && *path == '\0') return Report(Invalid(__func__, "path is empty"));
  return WithContext(__func__, ctx, [&](hvd_context_s* c) {
    return Report(c->impl->DumpFlightRecorder(path != nullptr ? path : ""));
  });
  HVD_API_END();
}

// The core does not expose transport queries yet (needs e.g.
// Result<int64_t> Context::QueryTransport(const char* key) over the plugin's
// optional `query` entry); until it does, an MPI context answers
// HVD_ERR_UNSUPPORTED too, with a message saying why.
hvd_status_t hvd_mpi_threads_supported(hvd_context_t ctx, int* out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  const char* name = c->impl->transport_name();
  if (name == nullptr || std::strcmp(name, "mpi") != 0) {
    return Report(hvd::Status(HVD_ERR_UNSUPPORTED,
                              Cat(__func__, ": the context's transport is '",
                                  name != nullptr ? name : "", "', not 'mpi'")));
  }
  // The plugin compares against its own MPI's MPI_THREAD_MULTIPLE, whose
  // value differs between MPI implementations.
  auto multiple = c->impl->Query("mpi_thread_multiple");
  if (!multiple.ok()) return Report(multiple.status());
  *out = multiple.value() != 0 ? 1 : 0;
  return HVD_OK;
  HVD_API_END();
}

// ===========================================================================
// The default context.
// ===========================================================================

// The first call creates the context from params; later calls only count, and
// their params are ignored (the context already exists).
hvd_status_t hvd_init(const hvd_params_t* params) {
  HVD_API_BEGIN();
  DefaultContext& d = Default();
  std::lock_guard<std::mutex> lifecycle(d.lifecycle_mu);
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.refs > 0) {
      ++d.refs;
      return HVD_OK;
    }
  }
  auto wrapper = std::make_unique<hvd_context_s>();
  auto r = hvd::Context::Create(params);
  if (!r.ok()) return Report(r.status().Wrap("hvd_init"));
  wrapper->impl = std::move(r).value();
  if (!wrapper->impl) return Fail(HVD_ERR_INTERNAL, "hvd_init: Create returned NULL");
  std::lock_guard<std::mutex> lock(d.mu);
  d.ctx.store(wrapper.release(), std::memory_order_release);
  d.refs = 1;
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_shutdown(void) {
  HVD_API_BEGIN();
  DefaultContext& d = Default();
  std::lock_guard<std::mutex> lifecycle(d.lifecycle_mu);
  hvd_context_s* dying = nullptr;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.refs == 0) {
      return Report(hvd::Status(HVD_ERR_NOT_INITIALIZED,
                                "hvd_shutdown: not initialized (hvd_init was not called, or "
                                "every hvd_init was already matched by an hvd_shutdown)"));
    }
    if (--d.refs > 0) return HVD_OK;
    dying = d.ctx.load();
    d.ctx.store(nullptr, std::memory_order_release);
  }
  // Destroyed outside d.mu: the context's shutdown may log through a user
  // callback that calls back into hvd.
  dying->magic = kDeadMagic;
  std::unique_ptr<hvd::Context> impl = std::move(dying->impl);
  delete dying;
  (void)impl->Shutdown();  // a context from hvd_init: never fails
  impl.reset();
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_is_initialized(int* out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  DefaultContext& d = Default();
  std::lock_guard<std::mutex> lock(d.mu);
  *out = d.refs > 0 ? 1 : 0;
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_default_context(hvd_context_t* out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  *out = nullptr;
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, nullptr, &c);
  if (!s.ok()) return Report(s);
  *out = c;
  return HVD_OK;
  HVD_API_END();
}

}  // extern "C"
