// Preparing, queueing and wrapping one operation.

#include "api/submit.h"

#include <memory>
#include <utility>

#include "api/default_context.h"
#include "api/errors.h"
#include "api/validate.h"

namespace hvd::api {

// The op's failure, naming the op when the core's message does not already.
hvd::Status OpError(const hvd::Handle& h, const hvd::Status& s) {
  if (s.ok() || s.message().find(h.description()) != std::string::npos) return s;
  return s.Wrap(h.description());
}

hvd::Status PrepareSingle(const char* fn, hvd_context_t ctx, const char* name,
                          const hvd_tensor_t* input, hvd::OpType type, Prepared* p) {
  HVD_CHECK(ValidateName(fn, "name", name));
  const TensorTag tag(name);
  HVD_CHECK(ResolveContext(fn, ctx, &p->ctx));
  // Filled in place (a failed call discards p); its name is given apart.
  hvd::TensorSpec& spec = p->one;
  HVD_CHECK(ValidateTensor(fn, "input", tag, input, &spec));
  HVD_CHECK(CheckDeviceSupported(fn, "input", tag, input->device, p->ctx, input->data));
  p->single = true;
  p->request.type = type;
  p->op = hvd::OpTypeName(type);
  p->name = name;
  return hvd::Status::Ok();
}

hvd::Status PrepareAllreduce(const char* fn, hvd_context_t ctx, const char* name,
                             const hvd_tensor_t* input, void* output, hvd_reduce_op_t op,
                             double prescale, double postscale, Prepared* p) {
  HVD_CHECK(PrepareSingle(fn, ctx, name, input, hvd::OpType::kAllreduce, p));
  const TensorTag tag(name);
  hvd::TensorSpec& spec = p->one;
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
  hvd::TensorSpec& spec = p->one;
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

namespace {
// A handle from the context's pool, named for p's op.
HandleBox* TakeHandle(Prepared* p) {
  HandleBox* box = p->ctx->handles->Take();
  if (p->op != nullptr) {
    box->Rename(p->op, p->name);
  } else {
    box->Rename(std::move(p->description));
  }
  return box;
}

// Queues p's request (its single tensor apart, where it has one); the
// request holds a reference to its handle, the caller another.
hvd::Status Enqueue(Prepared* p) {
  return p->single ? p->ctx->impl->EnqueueOne(std::move(p->request), p->one, p->name)
                   : p->ctx->impl->Enqueue(std::move(p->request)).status();
}
}  // namespace

hvd_status_t Submit(Prepared* p, hvd_handle_t* out) {
  // Everything that can fail is done before the op is queued, so that no
  // queued op is left without a handle.
  HandleBox* box = TakeHandle(p);
  hvd_handle_s* wrapper = &box->wrapper;
  wrapper->impl = hvd::HandleRef(box);  // the user's reference
  const hvd::OpType type = p->request.type;
  p->request.handle = wrapper->impl;    // the core's
  const hvd::Status s = Enqueue(p);
  if (!s.ok()) {
    wrapper->impl.reset();  // the box goes back with the request's reference
    return Report(s);
  }
  wrapper->magic = kHandleMagic;
  wrapper->type = type;
  wrapper->size = static_cast<int32_t>(p->ctx->impl->size());
  *out = wrapper;
  return HVD_OK;
}

hvd_status_t SubmitAndWait(Prepared* p) {
  const hvd::HandleRef handle(TakeHandle(p));
  p->request.handle = handle;
  const hvd::Status s = Enqueue(p);
  if (!s.ok()) return Report(s);
  return Report(OpError(*handle, handle->Wait(-1.0)));
}

}  // namespace hvd::api
