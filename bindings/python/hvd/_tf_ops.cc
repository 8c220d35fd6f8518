// The op definitions of hvd's TensorFlow kernels (_tf_kernels.cc): names,
// attributes, inputs, outputs and shape functions. hvd/_tf_kernels.py builds
// both files into one library.
//
// Every op is stateful: TensorFlow must never merge two collectives with
// equal inputs, fold one into a constant, or prune one whose result is
// unused on this rank but awaited by the others.

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvd_tf {

namespace si = ::tensorflow::shape_inference;
using Status = ::absl::Status;

#define HVD_TYPES "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"

Status FirstDimUnknown(si::InferenceContext *c) {
  si::ShapeHandle in;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
  si::ShapeHandle rest;
  TF_RETURN_IF_ERROR(c->Subshape(in, 1, &rest));
  si::ShapeHandle out;
  TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->UnknownDim()), rest, &out));
  c->set_output(0, out);
  return Status();
}

REGISTER_OP("HvdAllreduce")
    .Attr("T: " HVD_TYPES)
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr("reduce_op: int")
    .Input("tensor: T")
    .Input("prescale_factor: double")
    .Input("postscale_factor: double")
    .Output("reduced: T")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("HvdGroupedAllreduce")
    .Attr("T: " HVD_TYPES)
    .Attr("N: int >= 1")
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr("reduce_op: int")
    .Input("tensors: N * T")
    .Input("prescale_factor: double")
    .Input("postscale_factor: double")
    .Output("outputs: N * T")
    .SetIsStateful()
    .SetShapeFn([](si::InferenceContext *c) {
      int n = c->num_outputs();
      for (int i = 0; i < n; ++i) c->set_output(i, c->input(i));
      return Status();
    });

REGISTER_OP("HvdBroadcast")
    .Attr("T: " HVD_TYPES)
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr("root_rank: int")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("HvdAllgather")
    .Attr("T: " HVD_TYPES)
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("HvdReducescatter")
    .Attr("T: " HVD_TYPES)
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Attr("reduce_op: int")
    .Input("tensor: T")
    .Input("prescale_factor: double")
    .Input("postscale_factor: double")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(FirstDimUnknown);

REGISTER_OP("HvdAlltoall")
    .Attr("T: " HVD_TYPES)
    .Attr("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("output: T")
    .Output("received_splits: int64")
    .SetIsStateful()
    .SetShapeFn([](si::InferenceContext *c) {
      TF_RETURN_IF_ERROR(FirstDimUnknown(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return Status();
    });

#define HVD_REGISTER_TOPOLOGY(Name)       \
  REGISTER_OP(Name)                       \
      .Output("value: int32")             \
      .SetIsStateful()                    \
      .SetShapeFn(::tensorflow::shape_inference::ScalarShape);
HVD_REGISTER_TOPOLOGY("HvdRank")
HVD_REGISTER_TOPOLOGY("HvdSize")
HVD_REGISTER_TOPOLOGY("HvdLocalRank")
HVD_REGISTER_TOPOLOGY("HvdLocalSize")
#undef HVD_REGISTER_TOPOLOGY

}  // namespace hvd_tf
