// One operation from validated arguments to the core's queue: preparing
// the request, queueing it, and wrapping its handle.
#pragma once

#include <string>

#include "api/objects.h"
#include "common/status.h"
#include "core/loop/request.h"
#include "hvd.h"

namespace hvd::api {

// One single-tensor operation, validated and ready to enqueue.
struct Prepared {
  hvd_context_s* ctx = nullptr;
  hvd::OpRequest request;
  // A single-tensor op's tensor (PrepareSingle), queued apart from request
  // (Context::EnqueueOne: no allocation for it in a steady state); its
  // name is `name`.
  bool single = false;
  hvd::TensorSpec one;
  std::string description;    // set: the handle's whole description
  const char* op = nullptr;   // else: "<op> '<name>'" from these two
  const char* name = nullptr;
};

// The op's failure, naming the op when the core's message does not already.
hvd::Status OpError(const hvd::Handle& h, const hvd::Status& s);
// Name, context and the input descriptor, common to every single-tensor op.
hvd::Status PrepareSingle(const char* fn, hvd_context_t ctx, const char* name,
                          const hvd_tensor_t* input, hvd::OpType type, Prepared* p);
hvd::Status PrepareAllreduce(const char* fn, hvd_context_t ctx, const char* name,
                             const hvd_tensor_t* input, void* output, hvd_reduce_op_t op,
                             double prescale, double postscale, Prepared* p);
hvd::Status PrepareBroadcast(const char* fn, hvd_context_t ctx, const char* name,
                             const hvd_tensor_t* input, void* output, int32_t root,
                             Prepared* p);
hvd::Status PrepareBarrier(const char* fn, hvd_context_t ctx, Prepared* p);
// Queues a prepared request and wraps its handle.
hvd_status_t Submit(Prepared* p, hvd_handle_t* out);
// Blocking form: queue, wait without a limit, drop the handle.
hvd_status_t SubmitAndWait(Prepared* p);

}  // namespace hvd::api
