// The default context and resolving a context argument.

#include "api/default_context.h"

#include "api/validate.h"

namespace hvd::api {

DefaultContext& Default() {
  static DefaultContext* d = new DefaultContext();
  return *d;
}

hvd::Status ResolveContext(const char* fn, hvd_context_t ctx, hvd_context_s** out) {
  if (ctx == nullptr) {
    hvd_context_s* d = Default().ctx.load(std::memory_order_acquire);
    if (d == nullptr) {
      return hvd::Status(HVD_ERR_NOT_INITIALIZED,
                         Cat(fn, ": ctx is NULL (the default context) and hvd_init has not been "
                                 "called; call hvd_init first or pass a context from "
                                 "hvd_context_create"));
    }
    *out = d;
    return hvd::Status::Ok();
  }
  if (ctx->magic == kDeadMagic) {
    return hvd::Status(HVD_ERR_NOT_INITIALIZED,
                       Cat(fn, ": ctx was destroyed (hvd_context_destroy or hvd_shutdown)"));
  }
  if (ctx->magic != kContextMagic || !ctx->impl) {
    return Invalid(fn, "ctx is not a valid hvd_context_t (a destroyed context, or a pointer not "
                       "made by hvd_context_create / hvd_default_context)");
  }
  *out = ctx;
  return hvd::Status::Ok();
}

}  // namespace hvd::api
