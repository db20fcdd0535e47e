// MishBackward(gradOutput, self) -> gradInput, as aclnnMishBackward: the inputs may differ in dtype
// (the output is their promotion) and broadcast (numpy rules), rank 0..8, no empty tensors.
#include "cpu/ops.h"

#include "cpu/elementwise.h"

namespace ascend_grad {

OrtStatus* MishBackwardKernel::Init(const OrtKernelInfo*, const DType* types) {
  dy_type_ = types[0];
  x_type_ = types[1];
  return nullptr;
}

OrtStatus* MishBackwardKernel::Compute(OrtKernelContext* context) {
  TensorView dy, x, dx;
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 0, &dy));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 1, &x));
  std::vector<int64_t> out_shape;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckMishBackward(dy, x, &out_shape));
  BroadcastPlan plan;
  if (!plan.Build(dy.shape, x.shape)) {  // (checked already: they broadcast, to a size that fits)
    return InvalidArgument(kName, "gradOutput " + ShapeString(dy.shape) + " and self " + ShapeString(x.shape) +
                                      " do not broadcast to a size that fits");
  }
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, plan.out_shape, &dx));
  const ElementwiseFn fn = Kernels().mish_backward[static_cast<int>(dy_type_)][static_cast<int>(x_type_)];
  return RunElementwise(context, fn, plan, dy, dy_type_, x, x_type_, dx.data, Promote(dy_type_, x_type_));
}

}  // namespace ascend_grad
