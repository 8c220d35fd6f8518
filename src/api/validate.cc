// Argument validation for the C calls.

#include "api/validate.h"

#include <cmath>
#include <limits>
#include <string>

#include "common/kernels.h"

namespace hvd::api {

hvd::Status Invalid(const char* fn, const std::string& msg) {
  return hvd::Status(HVD_ERR_INVALID_ARGUMENT, Cat(fn, ": ", msg));
}

std::ostream& operator<<(std::ostream& os, const TensorTag& t) {
  const char* name = t.name;
  if (name == nullptr || name[0] == '\0' || strnlen(name, kMaxNameBytes + 1) > kMaxNameBytes) {
    return os;
  }
  return os << " (tensor '" << name << "')";
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
                             double prescale, double postscale, bool allreduce) {
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

hvd::Status CheckDeviceSupported(const char* fn, const char* arg, const TensorTag& tag,
                                 int32_t device, hvd_context_s* ctx,
                                 const void* data) {
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
  // The element count without a division (a submit's hot path): a product
  // that overflows is an error only where no dimension is 0.
  int64_t elements = 1;
  bool overflow = false;
  for (int32_t i = 0; i < t->ndim; ++i) {
    const int64_t d = t->shape[i];
    if (d < 0) {
      return Invalid(fn, Cat(arg, "->shape[", i, "] is ", d, ", must be >= 0", tag));
    }
    if (d == 0) {
      elements = 0;
    } else if (elements != 0 && !overflow) {
      int64_t product = 0;
      overflow = __builtin_mul_overflow(elements, d, &product);
      if (!overflow) elements = product;  // else it stays as it was: not 0
    }
  }
  const int64_t elem_size = static_cast<int64_t>(hvd::DtypeSize(dtype));
  int64_t bytes = 0;
  if (elements != 0 && (overflow || __builtin_mul_overflow(elements, elem_size, &bytes))) {
    return Invalid(fn, Cat(arg, "->shape describes more bytes than fit in 64 bits", tag));
  }
  if (static_cast<uint64_t>(bytes) > static_cast<uint64_t>(std::numeric_limits<size_t>::max())) {
    return Invalid(fn, Cat(arg, "->shape describes more bytes than this machine can address", tag));
  }
  // Into the spec in place (up to Shape::kInline dimensions: no allocation).
  spec->shape.assign(t->shape, t->shape + t->ndim);
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

namespace {

int64_t ByteSize(const hvd::TensorSpec& spec) {
  return spec.NumElements() * static_cast<int64_t>(hvd::DtypeSize(spec.dtype));
}

}  // namespace

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

hvd::Status CheckOutPointer(const char* fn, const char* arg, const void* p) {
  if (p == nullptr) return Invalid(fn, Cat(arg, " is NULL"));
  return hvd::Status::Ok();
}

hvd::Status RequireRows(const char* fn, const TensorTag& tag, const hvd::TensorSpec& spec) {
  if (spec.shape.empty()) {
    return Invalid(fn, Cat("input->ndim is 0, must be >= 1: this operation splits or joins "
                           "along the first dimension", tag));
  }
  return hvd::Status::Ok();
}

}  // namespace hvd::api
