// The C calls that submit collectives: asynchronous, grouped and blocking.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
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
// Barrier or join: one empty tensor, named by the core.
hvd_status_t SubmitNameless(const char* fn, hvd_context_t ctx, hvd::OpType type,
                            hvd_handle_t* handle) {
  if (handle == nullptr) return Report(Invalid(fn, "handle is NULL"));
  *handle = nullptr;
  Prepared p;
  hvd::Status s = PrepareBarrier(fn, ctx, &p);  // a join has the same shape
  if (!s.ok()) return Report(s);
  if (type == hvd::OpType::kJoin) {
    p.request.type = hvd::OpType::kJoin;
    p.description = "join";
  }
  return Submit(&p, handle);
}

}  // namespace

extern "C" {

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
  if (s.ok()) s = RequireRows(__func__, TensorTag(name), p.one);
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
  if (s.ok()) s = RequireRows(fn, tag, p.one);
  if (!s.ok()) return Report(s);
  const int size = p.ctx->impl->size();
  const int64_t rows = p.one.shape[0];
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
  if (s.ok()) s = RequireRows(fn, tag, p.one);
  if (s.ok()) {
    s = ValidateReduceOp(fn, tag, RawEnum(op), static_cast<int>(p.one.dtype),
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
  return SubmitNameless(__func__, ctx, hvd::OpType::kBarrier, handle);
  HVD_API_END();
}

hvd_status_t hvd_join_async(hvd_context_t ctx, hvd_handle_t* handle) {
  HVD_API_BEGIN();
  return SubmitNameless(__func__, ctx, hvd::OpType::kJoin, handle);
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

}  // extern "C"
