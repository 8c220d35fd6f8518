// One buffer of a fused allreduce taken where it lies (no fusion buffer):
// count elements at data. The executor hands a batch's outputs as a list
// of these to Comm::AllreduceSpans, which the shared-memory path and the
// ring read and write in place.
#pragma once

#include <cstddef>

typedef struct hvd_transport_span {
  void* data;
  size_t count;
} hvd_transport_span_t;
