// The C boundary: every function declared in include/hvd.h.
//
// Each status-returning extern "C" body runs between HVD_API_BEGIN() and
// HVD_API_END(), which turn any exception into a status code plus the
// thread's last-error text, so no exception ever crosses the ABI. Internals
// return hvd::Status / hvd::Result; this file validates every argument before
// anything is queued, builds the hvd::OpRequest, and maps Status values to
// hvd_status_t.
//
// Last error (libgit2 style): a failing call stores its message in the calling
// thread's buffer; a successful call does NOT clear it. Read hvd_last_error()
// right after a call returned a negative status, or call
// hvd_clear_last_error() first. Positive statuses (HVD_IN_PROGRESS) are not
// errors and leave the buffer alone too.
//
// The only process-global state in the library is the default context below
// (hvd_init / hvd_shutdown): a pointer and a reference count under a mutex.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/kernels.h"
#include "common/status.h"
#include "core/context.h"
#include "core/loop/request.h"
#include "hvd.h"

namespace {

constexpr uint64_t kContextMagic = 0x6876642d63747831ULL;  // "hvd-ctx1"
constexpr uint64_t kHandleMagic = 0x6876642d686e6431ULL;   // "hvd-hnd1"
constexpr uint64_t kDeadMagic = 0xdeadc0dedeadc0deULL;     // written on destroy/release

constexpr size_t kMaxNameBytes = 1024;

}  // namespace

// The opaque types of hvd.h. The magic number comes first and is poisoned
// when the object is destroyed, so a destroyed or foreign pointer is usually
// caught with an error instead of a crash. "Usually": reading freed memory is
// undefined behaviour, and the allocator may have reused it; the check is a
// diagnostic aid, not a guarantee.
struct hvd_context_s {
  uint64_t magic = kContextMagic;
  std::unique_ptr<hvd::Context> impl;
};

struct hvd_handle_s {
  uint64_t magic = kHandleMagic;
  std::shared_ptr<hvd::Handle> impl;
  hvd::OpType type = hvd::OpType::kAllreduce;
  int32_t size = 1;  // the context's size when the op was submitted (recv_splits)
  // Lives in a HandleBox with the handle it wraps: impl owns the box, and
  // so this wrapper (release moves impl out before dropping it).
};

namespace {
// A submit's handle and its C wrapper in one allocation (a fused step of
// 1,000 tensors makes 1,000 of each). The box lives while the wrapper (its
// impl) or the core holds the handle.
struct HandleBox {
  template <typename... A>
  explicit HandleBox(A&&... a) : core(std::forward<A>(a)...) {}
  hvd_handle_s wrapper;
  hvd::Handle core;
};
}  // namespace

namespace {

// ---------------------------------------------------------------------------
// Last error.
// ---------------------------------------------------------------------------

thread_local std::string t_last_error;

const char* StatusText(hvd_status_t status) noexcept {
  switch (status) {
    case HVD_OK: return "success";
    case HVD_IN_PROGRESS: return "operation in progress";
    case HVD_ERR_INVALID_ARGUMENT: return "invalid argument";
    case HVD_ERR_NOT_INITIALIZED: return "not initialized (no default context, or context destroyed)";
    case HVD_ERR_NO_MEMORY: return "out of memory";
    case HVD_ERR_TIMEOUT: return "timed out";
    case HVD_ERR_MISMATCH: return "ranks disagree on the operation (dtype, shape, op or root)";
    case HVD_ERR_TRANSPORT: return "transport failure";
    case HVD_ERR_UNSUPPORTED: return "unsupported by this build";
    case HVD_ERR_NOT_FOUND: return "not found (transport plugin or library missing)";
    case HVD_ERR_ABORTED: return "aborted (context shut down while the operation was pending)";
    case HVD_ERR_DUPLICATE_NAME: return "a tensor of the same name is already in flight";
    case HVD_ERR_VERSION: return "incompatible versions";
    case HVD_ERR_RENDEZVOUS: return "rendezvous failed (could not form the job)";
    case HVD_ERR_INTERNAL: return "internal error in hvd (please report)";
    case HVD_ERR_MEMBERSHIP_CHANGED:
      return "the elastic job's membership changed (reset the context: hvd_context_reset)";
  }
  return "unknown status";
}

// Never throws: on allocation failure the message degrades to a constant that
// fits the string's inline buffer.
void SetLastError(const char* msg) noexcept {
  try {
    t_last_error.assign(msg);
  } catch (...) {
    t_last_error.clear();
    t_last_error.append("out of memory");  // 13 bytes: no allocation (SSO)
  }
}

hvd_status_t Fail(hvd_status_t code, const char* msg) noexcept {
  SetLastError(msg != nullptr && msg[0] != '\0' ? msg : StatusText(code));
  return code;
}

// Maps an internal Status to the return code; errors set the last error.
hvd_status_t Report(const hvd::Status& s) noexcept {
  const hvd_status_t code = s.code();
  if (code < 0) return Fail(code, s.message().c_str());
  return code;
}

hvd_status_t FailException(const char* fn, hvd_status_t code, const char* what) noexcept {
  try {
    std::string msg = std::string(fn) + ": " +
                      (code == HVD_ERR_NO_MEMORY ? "out of resources: " : "internal error: ") +
                      (what != nullptr ? what : "unknown exception");
    if (code == HVD_ERR_INTERNAL) msg += " (a bug in hvd: please report it)";
    return Fail(code, msg.c_str());
  } catch (...) {
    return Fail(code, StatusText(code));
  }
}

// std::system_error from thread or mutex creation means the process ran out
// of a resource; anything else escaping the internals is a bug.
hvd_status_t FailSystemError(const char* fn, const std::system_error& e) noexcept {
  const std::error_code& ec = e.code();
  const bool resources = ec == std::errc::resource_unavailable_try_again ||
                         ec == std::errc::not_enough_memory ||
                         ec == std::errc::too_many_files_open;
  return FailException(fn, resources ? HVD_ERR_NO_MEMORY : HVD_ERR_INTERNAL, e.what());
}

}  // namespace

// The exception wall. The body between the two macros must return an
// hvd_status_t on every path.
#define HVD_API_BEGIN() try {
#define HVD_API_END()                                             \
  }                                                               \
  catch (const std::bad_alloc&) {                                 \
    return Fail(HVD_ERR_NO_MEMORY, "out of memory");              \
  }                                                               \
  catch (const std::system_error& e) {                            \
    return FailSystemError(__func__, e);                          \
  }                                                               \
  catch (const std::exception& e) {                               \
    return FailException(__func__, HVD_ERR_INTERNAL, e.what());   \
  }                                                               \
  catch (...) {                                                   \
    return FailException(__func__, HVD_ERR_INTERNAL, nullptr);    \
  }

namespace {

// ---------------------------------------------------------------------------
// Small helpers.
// ---------------------------------------------------------------------------

// The integer a C caller put in an enum-typed argument or field. C allows
// any int there (dtype 99); in C++ loading an out-of-range value as the enum
// type is undefined, so the bits are copied out instead.
template <typename E>
int RawEnum(const E& e) {
  static_assert(std::is_enum<E>::value, "enum types only");
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof(v));
  return static_cast<int>(v);
}

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

hvd::Status Invalid(const char* fn, const std::string& msg) {
  return hvd::Status(HVD_ERR_INVALID_ARGUMENT, Cat(fn, ": ", msg));
}

// " (tensor 'name')" in messages; nothing when the name itself is unusable.
// Holds only the pointer: the text is formatted on the error path alone
// (this runs on every submit).
struct TensorTag {
  explicit TensorTag(const char* n) : name(n) {}
  const char* name;
};

std::ostream& operator<<(std::ostream& os, const TensorTag& t) {
  const char* name = t.name;
  if (name == nullptr || name[0] == '\0' || strnlen(name, kMaxNameBytes + 1) > kMaxNameBytes) {
    return os;
  }
  return os << " (tensor '" << name << "')";
}

// ---------------------------------------------------------------------------
// The default context.
// ---------------------------------------------------------------------------

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
DefaultContext& Default() {
  static DefaultContext* d = new DefaultContext();
  return *d;
}

// NULL means the default context. The returned pointer is valid until the
// context is destroyed; hvd_shutdown must not race with other threads' calls
// on the default context (as in Horovod).
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

hvd::Status CheckHandle(const char* fn, hvd_handle_t h) {
  if (h == nullptr) return Invalid(fn, "handle is NULL");
  if (h->magic == kDeadMagic) return Invalid(fn, "handle was already released");
  if (h->magic != kHandleMagic || !h->impl) {
    return Invalid(fn, "handle is not a valid hvd_handle_t (released, or not made by an "
                       "hvd_*_async call)");
  }
  return hvd::Status::Ok();
}

// The op's failure, naming the op when the core's message does not already.
hvd::Status OpError(const hvd::Handle& h, const hvd::Status& s) {
  if (s.ok() || s.message().find(h.description()) != std::string::npos) return s;
  return s.Wrap(h.description());
}

// ---------------------------------------------------------------------------
// Argument validation. Every message names the function, the argument and,
// when known, the tensor.
// ---------------------------------------------------------------------------

hvd::Status ValidateName(const char* fn, const char* arg, const char* name) {
  if (name == nullptr) return Invalid(fn, Cat(arg, " is NULL"));
  const size_t len = strnlen(name, kMaxNameBytes + 1);
  if (len == 0) return Invalid(fn, Cat(arg, " is empty: every tensor needs a name"));
  if (len > kMaxNameBytes) {
    return Invalid(fn, Cat(arg, " is longer than ", kMaxNameBytes, " bytes ('",
                           std::string(name, 40), "...')"));
  }
  return hvd::Status::Ok();
}

hvd::Status ValidateReduceOp(const char* fn, const TensorTag& tag, int op, int dtype,
                             double prescale, double postscale, bool allreduce = true) {
  if (op < HVD_SUM || op > HVD_ADASUM) {
    return Invalid(fn, Cat("op ", op, " is not a valid hvd_reduce_op_t", tag));
  }
  if (op == HVD_ADASUM && !allreduce) {
    return Invalid(fn, Cat("op HVD_ADASUM is defined for allreduce and grouped allreduce only",
                           tag));
  }
  if (op == HVD_ADASUM && dtype != HVD_FLOAT16 && dtype != HVD_BFLOAT16 &&
      dtype != HVD_FLOAT32 && dtype != HVD_FLOAT64) {
    return Invalid(fn, Cat("op HVD_ADASUM is not defined for dtype ", hvd::DtypeName(dtype), tag,
                           ": it needs float16, bfloat16, float32 or float64"));
  }
  if (op == HVD_AVERAGE && dtype == HVD_BOOL) {
    return hvd::Status(HVD_ERR_UNSUPPORTED,
                       Cat(fn, ": HVD_AVERAGE is not defined for HVD_BOOL", tag,
                           "; use HVD_MIN (logical and) or HVD_MAX (logical or)"));
  }
  if (!std::isfinite(prescale)) {
    return Invalid(fn, Cat("prescale is not finite (", prescale, ")", tag));
  }
  if (!std::isfinite(postscale)) {
    return Invalid(fn, Cat("postscale is not finite (", postscale, ")", tag));
  }
  return hvd::Status::Ok();
}

// A device ordinal >= 0 is a CUDA tensor: the context's CUDA runtime must
// load, the ordinal must name one of its devices, and data (unless NULL)
// must be that device's memory (or managed memory).
hvd::Status CheckDeviceSupported(const char* fn, const char* arg, const TensorTag& tag,
                                 int32_t device, hvd_context_s* ctx = nullptr,
                                 const void* data = nullptr) {
  if (device == HVD_DEVICE_CPU) return hvd::Status::Ok();
  if (device < HVD_DEVICE_CPU) {
    return Invalid(fn, Cat(arg, "->device is ", device,
                           ": neither HVD_DEVICE_CPU (-1) nor a CUDA device ordinal", tag));
  }
  if (ctx == nullptr) return hvd::Status(HVD_ERR_INTERNAL, Cat(fn, ": no context to check ", arg));
  hvd::Status s = ctx->impl->CheckDevice(device, tag.name != nullptr ? tag.name : "", data);
  if (!s.ok()) return hvd::Status(s.code(), Cat(fn, ": ", s.message()));
  return s;
}

// Checks one tensor descriptor and fills spec (without the name). The device
// is range-checked here; whether it is supported is checked by the caller
// (CheckDeviceSupported) so that groups can first report inconsistent
// devices.
hvd::Status ValidateTensor(const char* fn, const char* arg, const TensorTag& tag,
                           const hvd_tensor_t* t, hvd::TensorSpec* spec) {
  if (t == nullptr) return Invalid(fn, Cat(arg, " is NULL", tag));
  const int dtype = RawEnum(t->dtype);
  if (!hvd::IsValidDtype(dtype)) {
    return Invalid(fn, Cat(arg, "->dtype ", dtype, " is not a valid hvd_dtype_t", tag));
  }
  if (t->ndim < 0 || t->ndim > HVD_MAX_NDIM) {
    return Invalid(fn, Cat(arg, "->ndim is ", t->ndim, ", must be 0..", HVD_MAX_NDIM, tag));
  }
  if (t->ndim > 0 && t->shape == nullptr) {
    return Invalid(fn, Cat(arg, "->shape is NULL but ndim is ", t->ndim, tag));
  }
  const int64_t elem_size = static_cast<int64_t>(hvd::DtypeSize(dtype));
  const int64_t max_elements = std::numeric_limits<int64_t>::max() / elem_size;
  // Written straight into the spec (in place for up to Shape::kInline
  // dimensions: no allocation).
  hvd::Shape& shape = spec->shape;
  shape.resize(static_cast<size_t>(t->ndim));
  int64_t elements = 1;
  bool overflow = false;
  for (int32_t i = 0; i < t->ndim; ++i) {
    const int64_t d = t->shape[i];
    if (d < 0) {
      return Invalid(fn, Cat(arg, "->shape[", i, "] is ", d, ", must be >= 0", tag));
    }
    shape[static_cast<size_t>(i)] = d;
    if (d == 0) {
      elements = 0;
    } else if (elements != 0) {
      if (elements > max_elements / d) overflow = true;
      else elements *= d;
    }
  }
  if (overflow && elements != 0) {
    return Invalid(fn, Cat(arg, "->shape describes more bytes than fit in 64 bits", tag));
  }
  if (static_cast<uint64_t>(elements) * static_cast<uint64_t>(elem_size) >
      static_cast<uint64_t>(std::numeric_limits<size_t>::max())) {
    return Invalid(fn, Cat(arg, "->shape describes more bytes than this machine can address", tag));
  }
  if (t->device < HVD_DEVICE_CPU) {
    return CheckDeviceSupported(fn, arg, tag, t->device);
  }
  if (t->data == nullptr && elements != 0) {
    return Invalid(fn, Cat(arg, "->data is NULL but the tensor has ", elements, " elements", tag));
  }
  spec->dtype = t->dtype;
  spec->device = t->device;
  spec->stream = t->stream;
  spec->input = t->data;
  return hvd::Status::Ok();
}

int64_t ByteSize(const hvd::TensorSpec& spec) {
  return spec.NumElements() * static_cast<int64_t>(hvd::DtypeSize(spec.dtype));
}

// output for ops that write into the caller's buffer: non-NULL unless empty,
// and either the input itself (in place) or not overlapping it.
hvd::Status ValidateOutput(const char* fn, const char* arg, const TensorTag& tag,
                           void* output, hvd::TensorSpec* spec) {
  const int64_t bytes = ByteSize(*spec);
  if (output == nullptr && bytes != 0) {
    return Invalid(fn, Cat(arg, " is NULL but the tensor has ", spec->NumElements(),
                           " elements", tag));
  }
  if (output != nullptr && spec->input != nullptr && output != spec->input && bytes != 0) {
    const uintptr_t in = reinterpret_cast<uintptr_t>(spec->input);
    const uintptr_t out = reinterpret_cast<uintptr_t>(output);
    const uintptr_t n = static_cast<uintptr_t>(bytes);
    if (in < out + n && out < in + n) {
      return Invalid(fn, Cat(arg, " partially overlaps the input buffer", tag,
                             "; pass output == input->data for an in-place operation"));
    }
  }
  spec->output = output;
  return hvd::Status::Ok();
}

// One single-tensor operation, validated and ready to enqueue.
struct Prepared {
  hvd_context_s* ctx = nullptr;
  hvd::OpRequest request;
  std::string description;    // set: the handle's whole description
  const char* op = nullptr;   // else: "<op> '<name>'" from these two
  const char* name = nullptr;
};

// Name, context and the input descriptor, common to every single-tensor op.
hvd::Status PrepareSingle(const char* fn, hvd_context_t ctx, const char* name,
                          const hvd_tensor_t* input, hvd::OpType type, Prepared* p) {
  HVD_CHECK(ValidateName(fn, "name", name));
  const TensorTag tag(name);
  HVD_CHECK(ResolveContext(fn, ctx, &p->ctx));
  hvd::TensorSpec spec;
  HVD_CHECK(ValidateTensor(fn, "input", tag, input, &spec));
  HVD_CHECK(CheckDeviceSupported(fn, "input", tag, input->device, p->ctx, input->data));
  spec.name = name;
  p->request.type = type;
  p->request.tensors.push_back(std::move(spec));
  p->op = hvd::OpTypeName(type);
  p->name = name;
  return hvd::Status::Ok();
}

hvd::Status RequireRows(const char* fn, const TensorTag& tag, const hvd::TensorSpec& spec) {
  if (spec.shape.empty()) {
    return Invalid(fn, Cat("input->ndim is 0, must be >= 1: this operation splits or joins "
                           "along the first dimension", tag));
  }
  return hvd::Status::Ok();
}

hvd::Status PrepareAllreduce(const char* fn, hvd_context_t ctx, const char* name,
                             const hvd_tensor_t* input, void* output, hvd_reduce_op_t op,
                             double prescale, double postscale, Prepared* p) {
  HVD_CHECK(PrepareSingle(fn, ctx, name, input, hvd::OpType::kAllreduce, p));
  const TensorTag tag(name);
  hvd::TensorSpec& spec = p->request.tensors[0];
  HVD_CHECK(ValidateReduceOp(fn, tag, RawEnum(op), static_cast<int>(spec.dtype), prescale,
                             postscale));
  HVD_CHECK(ValidateOutput(fn, "output", tag, output, &spec));
  if (output != input->data) {
    HVD_CHECK(CheckDeviceSupported(fn, "output", tag, spec.device, p->ctx, output));
  }
  p->request.reduce_op = op;
  p->request.prescale = prescale;
  p->request.postscale = postscale;
  return hvd::Status::Ok();
}

hvd::Status PrepareBroadcast(const char* fn, hvd_context_t ctx, const char* name,
                             const hvd_tensor_t* input, void* output, int32_t root,
                             Prepared* p) {
  HVD_CHECK(PrepareSingle(fn, ctx, name, input, hvd::OpType::kBroadcast, p));
  const TensorTag tag(name);
  hvd::TensorSpec& spec = p->request.tensors[0];
  HVD_CHECK(ValidateOutput(fn, "output", tag, output, &spec));
  if (output != input->data) {
    HVD_CHECK(CheckDeviceSupported(fn, "output", tag, spec.device, p->ctx, output));
  }
  const int size = p->ctx->impl->size();
  if (root < 0 || root >= size) {
    return Invalid(fn, Cat("root is ", root, ", must be in [0, ", size, ")", tag));
  }
  p->request.root = root;
  return hvd::Status::Ok();
}

hvd::Status PrepareBarrier(const char* fn, hvd_context_t ctx, Prepared* p) {
  HVD_CHECK(ResolveContext(fn, ctx, &p->ctx));
  // One empty tensor; its name stays empty: the core assigns barrier names.
  hvd::TensorSpec spec;
  spec.dtype = HVD_UINT8;
  spec.shape = {0};
  p->request.type = hvd::OpType::kBarrier;
  p->request.tensors.push_back(std::move(spec));
  p->description = "barrier";
  return hvd::Status::Ok();
}

// Queues a prepared request and wraps its handle.
hvd_status_t Submit(Prepared* p, hvd_handle_t* out) {
  // Allocate everything that can fail before the op is queued, so that no
  // queued op is left without a handle.
  auto box = p->op != nullptr ? std::make_shared<HandleBox>(p->op, p->name)
                              : std::make_shared<HandleBox>(std::move(p->description));
  std::shared_ptr<hvd::Handle> handle(box, &box->core);
  const hvd::OpType type = p->request.type;
  p->request.handle = handle;
  auto r = p->ctx->impl->Enqueue(std::move(p->request));  // queues `handle` itself
  if (!r.ok()) return Report(r.status());
  hvd_handle_s* wrapper = &box->wrapper;
  wrapper->impl = std::move(handle);  // the wrapper now keeps its own box
  wrapper->type = type;
  wrapper->size = static_cast<int32_t>(p->ctx->impl->size());
  *out = wrapper;
  return HVD_OK;
}

// Blocking form: queue, wait without a limit, drop the handle.
hvd_status_t SubmitAndWait(Prepared* p) {
  auto handle = p->op != nullptr ? std::make_shared<hvd::Handle>(p->op, p->name)
                                 : std::make_shared<hvd::Handle>(std::move(p->description));
  p->request.handle = handle;
  auto r = p->ctx->impl->Enqueue(std::move(p->request));  // queues `handle` itself
  if (!r.ok()) return Report(r.status());
  const hvd::Status s = handle->Wait(-1.0);
  return Report(OpError(*handle, s));
}

hvd::Status CheckOutPointer(const char* fn, const char* arg, const void* p) {
  if (p == nullptr) return Invalid(fn, Cat(arg, " is NULL"));
  return hvd::Status::Ok();
}

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

// For results the handle owns: checks the op kind and completion.
hvd::Status RequireOwnedResult(const char* fn, hvd_handle_t h) {
  HVD_CHECK(CheckHandle(fn, h));
  if (h->type != hvd::OpType::kAllgather && h->type != hvd::OpType::kAlltoall &&
      h->type != hvd::OpType::kReducescatter && h->type != hvd::OpType::kJoin) {
    return Invalid(fn, Cat("handle is for ", h->impl->description(),
                           ", which writes into the caller's buffer; only allgather, alltoall, "
                           "reducescatter and join results are owned by the handle"));
  }
  hvd::Status s = h->impl->status();
  if (s.code() == HVD_IN_PROGRESS) return hvd::Status(HVD_IN_PROGRESS, "");
  return OpError(*h->impl, s);
}

// The completed operation's state for the two calls below: HVD_OK with its
// fence (null where none is needed), HVD_IN_PROGRESS, or its failure.
hvd::Status CompletedFence(const char* fn, hvd_handle_t handle,
                           std::shared_ptr<hvd::CudaFence>* fence) {
  HVD_CHECK(CheckHandle(fn, handle));
  hvd::Status s = handle->impl->status();
  if (s.code() == HVD_IN_PROGRESS) {
    return hvd::Status(HVD_IN_PROGRESS, Cat(fn, ": ", handle->impl->description(),
                                            " has not completed"));
  }
  HVD_CHECK(OpError(*handle->impl, s));
  *fence = handle->impl->cuda_fence;
  return hvd::Status::Ok();
}

}  // namespace

// ===========================================================================
// Library.
// ===========================================================================

extern "C" {

hvd_status_t hvd_version(int* major, int* minor, int* patch) {
  HVD_API_BEGIN();
  if (major != nullptr) *major = HVD_VERSION_MAJOR;
  if (minor != nullptr) *minor = HVD_VERSION_MINOR;
  if (patch != nullptr) *patch = HVD_VERSION_PATCH;
  return HVD_OK;
  HVD_API_END();
}

// The three functions below allocate nothing and cannot throw, so they need
// no exception wall.
const char* hvd_status_string(hvd_status_t status) {
  const int code = RawEnum(status);
  if (code < HVD_ERR_MEMBERSHIP_CHANGED || code > HVD_IN_PROGRESS) return "unknown status";
  return StatusText(static_cast<hvd_status_t>(code));
}

const char* hvd_last_error(void) { return t_last_error.c_str(); }

void hvd_clear_last_error(void) { t_last_error.clear(); }

hvd_status_t hvd_dtype_size(hvd_dtype_t dtype, size_t* out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  const int d = RawEnum(dtype);
  if (!hvd::IsValidDtype(d)) {
    return Report(Invalid(__func__, Cat("dtype ", d, " is not a valid hvd_dtype_t")));
  }
  *out = hvd::DtypeSize(d);
  return HVD_OK;
  HVD_API_END();
}

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

// ===========================================================================
// Process sets.
// ===========================================================================

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

hvd_status_t hvd_context_rank(hvd_context_t ctx, int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, ctx, out, [](const hvd::Context& c) { return c.rank(); });
  HVD_API_END();
}

hvd_status_t hvd_context_size(hvd_context_t ctx, int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, ctx, out, [](const hvd::Context& c) { return c.size(); });
  HVD_API_END();
}

hvd_status_t hvd_context_local_rank(hvd_context_t ctx, int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, ctx, out, [](const hvd::Context& c) { return c.local_rank(); });
  HVD_API_END();
}

hvd_status_t hvd_context_local_size(hvd_context_t ctx, int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, ctx, out, [](const hvd::Context& c) { return c.local_size(); });
  HVD_API_END();
}

hvd_status_t hvd_context_cross_rank(hvd_context_t ctx, int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, ctx, out, [](const hvd::Context& c) { return c.cross_rank(); });
  HVD_API_END();
}

hvd_status_t hvd_context_cross_size(hvd_context_t ctx, int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, ctx, out, [](const hvd::Context& c) { return c.cross_size(); });
  HVD_API_END();
}

hvd_status_t hvd_context_transport(hvd_context_t ctx, const char** out) {
  HVD_API_BEGIN();
  if (out == nullptr) return Report(Invalid(__func__, "out is NULL"));
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  const char* name = c->impl->transport_name();
  *out = name != nullptr ? name : "";
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_timeline_start(hvd_context_t ctx, const char* path, int mark_cycles) {
  HVD_API_BEGIN();
  if (path == nullptr) return Report(Invalid(__func__, "path is NULL"));
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  return Report(c->impl->StartTimeline(path, mark_cycles != 0));
  HVD_API_END();
}

hvd_status_t hvd_timeline_stop(hvd_context_t ctx) {
  HVD_API_BEGIN();
  hvd_context_s* c = nullptr;
  hvd::Status s = ResolveContext(__func__, ctx, &c);
  if (!s.ok()) return Report(s);
  return Report(c->impl->StopTimeline());
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

hvd_status_t hvd_rank(int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, nullptr, out, [](const hvd::Context& c) { return c.rank(); });
  HVD_API_END();
}

hvd_status_t hvd_size(int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, nullptr, out, [](const hvd::Context& c) { return c.size(); });
  HVD_API_END();
}

hvd_status_t hvd_local_rank(int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, nullptr, out, [](const hvd::Context& c) { return c.local_rank(); });
  HVD_API_END();
}

hvd_status_t hvd_local_size(int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, nullptr, out, [](const hvd::Context& c) { return c.local_size(); });
  HVD_API_END();
}

hvd_status_t hvd_cross_rank(int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, nullptr, out, [](const hvd::Context& c) { return c.cross_rank(); });
  HVD_API_END();
}

hvd_status_t hvd_cross_size(int* out) {
  HVD_API_BEGIN();
  return GetInt(__func__, nullptr, out, [](const hvd::Context& c) { return c.cross_size(); });
  HVD_API_END();
}

// ===========================================================================
// Asynchronous collectives.
// ===========================================================================

hvd_status_t hvd_allreduce_async(hvd_context_t ctx, const char* name, const hvd_tensor_t* input,
                                 void* output, hvd_reduce_op_t op, double prescale,
                                 double postscale, hvd_handle_t* handle) {
  HVD_API_BEGIN();
  if (handle == nullptr) return Report(Invalid(__func__, Cat("handle is NULL", TensorTag(name))));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareAllreduce(__func__, ctx, name, input, output, op, prescale, postscale, &p);
  if (!s.ok()) return Report(s);
  return Submit(&p, handle);
  HVD_API_END();
}

namespace {
// "base[i]" in place, for argument names in error messages.
class ArgName {
 public:
  void Set(const char* base, int32_t i) {
    size_t n = 0;
    while (base[n] != '\0' && n < 16) {
      buf_[n] = base[n];
      ++n;
    }
    buf_[n++] = '[';
    char digits[12];
    size_t d = 0;
    uint32_t v = static_cast<uint32_t>(i < 0 ? 0 : i);
    do {
      digits[d++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (d > 0) buf_[n++] = digits[--d];
    buf_[n++] = ']';
    buf_[n] = '\0';
  }
  const char* c_str() const { return buf_; }

 private:
  char buf_[32] = {0};
};

// The index of the first name equal to an earlier one (*first: that one),
// or -1. Open addressing over the names' hashes: no allocation per name.
int32_t RepeatedName(const char* const* names, int32_t count, int32_t* first) {
  size_t cap = 16;
  while (cap < static_cast<size_t>(count) * 2) cap <<= 1;
  std::vector<int32_t> table(cap, -1);
  const std::hash<std::string_view> hash;
  for (int32_t i = 0; i < count; ++i) {
    const std::string_view name(names[i]);
    for (size_t k = hash(name) & (cap - 1);; k = (k + 1) & (cap - 1)) {
      const int32_t j = table[k];
      if (j < 0) {
        table[k] = i;
        break;
      }
      if (name == names[j]) {
        *first = j;
        return i;
      }
    }
  }
  return -1;
}
}  // namespace

hvd_status_t hvd_grouped_allreduce_async(hvd_context_t ctx, int32_t count,
                                         const char* const* names, const hvd_tensor_t* inputs,
                                         void* const* outputs, hvd_reduce_op_t op,
                                         double prescale, double postscale,
                                         hvd_handle_t* handle) {
  HVD_API_BEGIN();
  const char* fn = __func__;
  if (handle == nullptr) return Report(Invalid(fn, "handle is NULL"));
  *handle = nullptr;
  if (count < 1) return Report(Invalid(fn, Cat("count is ", count, ", must be >= 1")));
  if (names == nullptr) return Report(Invalid(fn, "names is NULL"));
  if (inputs == nullptr) return Report(Invalid(fn, "inputs is NULL"));
  if (outputs == nullptr) return Report(Invalid(fn, "outputs is NULL"));

  Prepared p;
  hvd::Status s;
  // Argument names ("inputs[7]") are formatted into stack buffers: a group
  // of 1,000 tensors would otherwise build 3,000 strings on every step.
  ArgName arg, in_arg, out_arg;
  for (int32_t i = 0; i < count; ++i) {
    arg.Set("names", i);
    s = ValidateName(fn, arg.c_str(), names[i]);
    if (!s.ok()) return Report(s);
  }
  int32_t first = -1;
  const int32_t again = RepeatedName(names, count, &first);
  if (again >= 0) {
    arg.Set("names", again);
    return Report(Invalid(fn, Cat(arg.c_str(), " '", names[again], "' appears twice in the group (",
                                  "names[", first, "] too): names must be distinct")));
  }
  s = ResolveContext(fn, ctx, &p.ctx);
  if (!s.ok()) return Report(s);

  p.request.tensors.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    const TensorTag tag(names[i]);
    in_arg.Set("inputs", i);
    out_arg.Set("outputs", i);
    hvd::TensorSpec& spec = p.request.tensors.emplace_back();  // filled in place
    s = ValidateTensor(fn, in_arg.c_str(), tag, &inputs[i], &spec);
    if (!s.ok()) return Report(s);
    if (i > 0 && inputs[i].dtype != inputs[0].dtype) {
      return Report(Invalid(fn, Cat(in_arg.c_str(), "->dtype is ", hvd::DtypeName(inputs[i].dtype),
                                    " but inputs[0] ('", names[0], "') is ",
                                    hvd::DtypeName(inputs[0].dtype), tag,
                                    ": a group must share one dtype")));
    }
    if (i > 0 && inputs[i].device != inputs[0].device) {
      return Report(Invalid(fn, Cat(in_arg.c_str(), "->device is ", inputs[i].device,
                                    " but inputs[0] ('", names[0], "') is on ",
                                    inputs[0].device, tag, ": a group must share one device")));
    }
    s = CheckDeviceSupported(fn, in_arg.c_str(), tag, inputs[i].device, p.ctx, inputs[i].data);
    if (!s.ok()) return Report(s);
    s = ValidateOutput(fn, out_arg.c_str(), tag, outputs[i], &spec);
    if (s.ok() && outputs[i] != inputs[i].data) {
      s = CheckDeviceSupported(fn, out_arg.c_str(), tag, inputs[i].device, p.ctx, outputs[i]);
    }
    if (!s.ok()) return Report(s);
    spec.name = names[i];
  }
  s = ValidateReduceOp(fn, TensorTag(names[0]), RawEnum(op), static_cast<int>(inputs[0].dtype),
                       prescale, postscale);
  if (!s.ok()) return Report(s);

  p.request.type = hvd::OpType::kAllreduce;
  p.request.reduce_op = op;
  p.request.prescale = prescale;
  p.request.postscale = postscale;
  p.description = count == 1 ? Cat("grouped allreduce '", names[0], "'")
                             : Cat("grouped allreduce '", names[0], "' (+", count - 1, " more)");
  return Submit(&p, handle);
  HVD_API_END();
}

hvd_status_t hvd_allgather_async(hvd_context_t ctx, const char* name, const hvd_tensor_t* input,
                                 hvd_handle_t* handle) {
  HVD_API_BEGIN();
  if (handle == nullptr) return Report(Invalid(__func__, Cat("handle is NULL", TensorTag(name))));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareSingle(__func__, ctx, name, input, hvd::OpType::kAllgather, &p);
  if (s.ok()) s = RequireRows(__func__, TensorTag(name), p.request.tensors[0]);
  if (!s.ok()) return Report(s);
  return Submit(&p, handle);
  HVD_API_END();
}

hvd_status_t hvd_broadcast_async(hvd_context_t ctx, const char* name, const hvd_tensor_t* input,
                                 void* output, int32_t root, hvd_handle_t* handle) {
  HVD_API_BEGIN();
  if (handle == nullptr) return Report(Invalid(__func__, Cat("handle is NULL", TensorTag(name))));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareBroadcast(__func__, ctx, name, input, output, root, &p);
  if (!s.ok()) return Report(s);
  return Submit(&p, handle);
  HVD_API_END();
}

hvd_status_t hvd_alltoall_async(hvd_context_t ctx, const char* name, const hvd_tensor_t* input,
                                const int64_t* splits, hvd_handle_t* handle) {
  HVD_API_BEGIN();
  const char* fn = __func__;
  const TensorTag tag(name);
  if (handle == nullptr) return Report(Invalid(fn, Cat("handle is NULL", tag)));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareSingle(fn, ctx, name, input, hvd::OpType::kAlltoall, &p);
  if (s.ok()) s = RequireRows(fn, tag, p.request.tensors[0]);
  if (!s.ok()) return Report(s);
  const int size = p.ctx->impl->size();
  const int64_t rows = p.request.tensors[0].shape[0];
  if (splits == nullptr) {
    if (rows % size != 0) {
      return Report(Invalid(fn, Cat("splits is NULL (even split) but input->shape[0] = ", rows,
                                    " is not divisible by the context size ", size, tag)));
    }
  } else {
    int64_t sum = 0;
    for (int j = 0; j < size; ++j) {
      if (splits[j] < 0) {
        return Report(Invalid(fn, Cat("splits[", j, "] is ", splits[j], ", must be >= 0", tag)));
      }
      if (splits[j] > rows - sum) {
        return Report(Invalid(fn, Cat("splits[0..", j, "] already sum to more than "
                                      "input->shape[0] = ", rows, tag)));
      }
      sum += splits[j];
    }
    if (sum != rows) {
      return Report(Invalid(fn, Cat("splits (", size, " entries, one per rank) sum to ", sum,
                                    ", must equal input->shape[0] = ", rows, tag)));
    }
    p.request.splits.assign(splits, splits + size);
  }
  return Submit(&p, handle);
  HVD_API_END();
}

hvd_status_t hvd_reducescatter_async(hvd_context_t ctx, const char* name,
                                     const hvd_tensor_t* input, hvd_reduce_op_t op,
                                     double prescale, double postscale, hvd_handle_t* handle) {
  HVD_API_BEGIN();
  const char* fn = __func__;
  const TensorTag tag(name);
  if (handle == nullptr) return Report(Invalid(fn, Cat("handle is NULL", tag)));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareSingle(fn, ctx, name, input, hvd::OpType::kReducescatter, &p);
  if (s.ok()) s = RequireRows(fn, tag, p.request.tensors[0]);
  if (s.ok()) {
    s = ValidateReduceOp(fn, tag, RawEnum(op), static_cast<int>(p.request.tensors[0].dtype),
                         prescale, postscale, /*allreduce=*/false);
  }
  if (!s.ok()) return Report(s);
  p.request.reduce_op = op;
  p.request.prescale = prescale;
  p.request.postscale = postscale;
  return Submit(&p, handle);
  HVD_API_END();
}

hvd_status_t hvd_barrier_async(hvd_context_t ctx, hvd_handle_t* handle) {
  HVD_API_BEGIN();
  if (handle == nullptr) return Report(Invalid(__func__, "handle is NULL"));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareBarrier(__func__, ctx, &p);
  if (!s.ok()) return Report(s);
  return Submit(&p, handle);
  HVD_API_END();
}

hvd_status_t hvd_join_async(hvd_context_t ctx, hvd_handle_t* handle) {
  HVD_API_BEGIN();
  if (handle == nullptr) return Report(Invalid(__func__, "handle is NULL"));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareBarrier(__func__, ctx, &p);  // same shape: one empty tensor
  if (!s.ok()) return Report(s);
  p.request.type = hvd::OpType::kJoin;
  p.description = "join";
  return Submit(&p, handle);
  HVD_API_END();
}

// ===========================================================================
// Blocking conveniences.
// ===========================================================================

hvd_status_t hvd_allreduce(hvd_context_t ctx, const char* name, const hvd_tensor_t* input,
                           void* output, hvd_reduce_op_t op) {
  HVD_API_BEGIN();
  Prepared p;
  hvd::Status s = PrepareAllreduce(__func__, ctx, name, input, output, op, 1.0, 1.0, &p);
  if (!s.ok()) return Report(s);
  return SubmitAndWait(&p);
  HVD_API_END();
}

hvd_status_t hvd_broadcast(hvd_context_t ctx, const char* name, const hvd_tensor_t* input,
                           void* output, int32_t root) {
  HVD_API_BEGIN();
  Prepared p;
  hvd::Status s = PrepareBroadcast(__func__, ctx, name, input, output, root, &p);
  if (!s.ok()) return Report(s);
  return SubmitAndWait(&p);
  HVD_API_END();
}

hvd_status_t hvd_barrier(hvd_context_t ctx) {
  HVD_API_BEGIN();
  Prepared p;
  hvd::Status s = PrepareBarrier(__func__, ctx, &p);
  if (!s.ok()) return Report(s);
  return SubmitAndWait(&p);
  HVD_API_END();
}

// ===========================================================================
// Handles.
// ===========================================================================

hvd_status_t hvd_handle_wait(hvd_handle_t handle, double timeout_s) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (!s.ok()) return Report(s);
  if (std::isnan(timeout_s)) return Report(Invalid(__func__, "timeout_s is NaN"));
  // Negative, infinite or absurdly long (> ~30 years) all mean "no limit";
  // the cap keeps the core's duration arithmetic from overflowing.
  if (timeout_s < 0 || timeout_s > 1e9) timeout_s = -1.0;
  s = handle->impl->Wait(timeout_s);
  return Report(OpError(*handle->impl, s));
  HVD_API_END();
}

hvd_status_t hvd_handle_poll(hvd_handle_t handle) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (!s.ok()) return Report(s);
  s = handle->impl->status();
  if (s.code() == HVD_IN_PROGRESS) return HVD_IN_PROGRESS;
  return Report(OpError(*handle->impl, s));
  HVD_API_END();
}

hvd_status_t hvd_handle_release(hvd_handle_t handle) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (!s.ok()) return Report(s);
  handle->magic = kDeadMagic;
  // The wrapper lives in the box impl owns: move impl out before dropping it
  // (a pending op keeps its own reference to the shared state).
  std::shared_ptr<hvd::Handle> last = std::move(handle->impl);
  last.reset();
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_output(hvd_handle_t handle, const void** data, size_t* bytes) {
  HVD_API_BEGIN();
  if (data != nullptr) *data = nullptr;
  if (bytes != nullptr) *bytes = 0;
  hvd::Status s = CheckHandle(__func__, handle);
  if (s.ok() && data == nullptr) s = Invalid(__func__, "data is NULL");
  if (s.ok() && bytes == nullptr) s = Invalid(__func__, "bytes is NULL");
  if (s.ok()) s = RequireOwnedResult(__func__, handle);
  if (!s.ok()) return Report(s);
  auto out = handle->impl->HostOutput();  // copies a device result on the first call
  if (!out.ok()) return Report(out.status());
  *data = out.value()->data();
  *bytes = out.value()->size();
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_output_device(hvd_handle_t handle, const void** data, size_t* bytes,
                                      int32_t* device) {
  HVD_API_BEGIN();
  if (data != nullptr) *data = nullptr;
  if (bytes != nullptr) *bytes = 0;
  if (device != nullptr) *device = HVD_DEVICE_CPU;
  hvd::Status s = CheckHandle(__func__, handle);
  if (s.ok() && data == nullptr) s = Invalid(__func__, "data is NULL");
  if (s.ok() && bytes == nullptr) s = Invalid(__func__, "bytes is NULL");
  if (s.ok() && device == nullptr) s = Invalid(__func__, "device is NULL");
  if (s.ok()) s = RequireOwnedResult(__func__, handle);
  if (!s.ok()) return Report(s);
  hvd::Handle& h = *handle->impl;
  if (h.output_device == HVD_DEVICE_CPU) {
    *data = h.output.data();
    *bytes = h.output.size();
  } else {
    *data = h.device_output.data;
    *bytes = h.device_bytes;
    *device = h.output_device;
  }
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_cuda_event(hvd_handle_t handle, void** event) {
  HVD_API_BEGIN();
  if (event != nullptr) *event = nullptr;
  std::shared_ptr<hvd::CudaFence> fence;
  hvd::Status s = event == nullptr ? Invalid(__func__, "event is NULL")
                                   : CompletedFence(__func__, handle, &fence);
  if (!s.ok()) return Report(s);
  if (fence) *event = fence->event();
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_stream_wait(hvd_handle_t handle, void* stream) {
  HVD_API_BEGIN();
  std::shared_ptr<hvd::CudaFence> fence;
  hvd::Status s = CompletedFence(__func__, handle, &fence);
  if (s.ok() && fence) s = fence->OrderBefore(stream);
  if (!s.ok()) return Report(s);
  return HVD_OK;
  HVD_API_END();
}

hvd_status_t hvd_handle_output_shape(hvd_handle_t handle, int64_t* shape, int32_t max_ndim,
                                     int32_t* ndim) {
  HVD_API_BEGIN();
  hvd::Status s = CheckHandle(__func__, handle);
  if (s.ok() && ndim == nullptr) s = Invalid(__func__, "ndim is NULL");
  if (s.ok() && max_ndim < 0) s = Invalid(__func__, Cat("max_ndim is ", max_ndim, ", must be >= 0"));
  if (s.ok() && shape == nullptr && max_ndim > 0) {
    s = Invalid(__func__, Cat("shape is NULL but max_ndim is ", max_ndim));
  }
  if (s.ok()) s = RequireOwnedResult(__func__, handle);
  if (!s.ok()) return Report(s);
  const std::vector<int64_t>& dims = handle->impl->output_shape;
  const size_t n = dims.size() < static_cast<size_t>(max_ndim) ? dims.size()
                                                               : static_cast<size_t>(max_ndim);
  for (size_t i = 0; i < n; ++i) shape[i] = dims[i];
  *ndim = static_cast<int32_t>(dims.size());
  return HVD_OK;
  HVD_API_END();
}

// Writes size entries; entries past size (n > size) are set to 0.
hvd_status_t hvd_handle_recv_splits(hvd_handle_t handle, int64_t* splits, int32_t n) {
  HVD_API_BEGIN();
  const char* fn = __func__;
  hvd::Status s = CheckHandle(fn, handle);
  if (s.ok() && splits == nullptr) s = Invalid(fn, "splits is NULL");
  if (s.ok() && handle->type != hvd::OpType::kAlltoall) {
    s = Invalid(fn, Cat("handle is for ", handle->impl->description(),
                        "; receive splits exist only for alltoall"));
  }
  if (s.ok() && n < handle->size) {
    s = Invalid(fn, Cat("n is ", n, ", must be >= the context size ", handle->size));
  }
  if (s.ok()) s = RequireOwnedResult(fn, handle);
  if (!s.ok()) return Report(s);
  const std::vector<int64_t>& got = handle->impl->recv_splits;
  if (got.size() != static_cast<size_t>(handle->size)) {
    return Fail(HVD_ERR_INTERNAL,
                Cat(fn, ": ", handle->impl->description(), " completed with ", got.size(),
                    " receive splits for ", handle->size, " ranks (a bug in hvd: please report)")
                    .c_str());
  }
  for (int32_t j = 0; j < n; ++j) {
    splits[j] = j < handle->size ? got[static_cast<size_t>(j)] : 0;
  }
  return HVD_OK;
  HVD_API_END();
}

}  // extern "C"
