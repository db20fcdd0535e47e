// SiluBackward(gradOutput, self) -> gradInput, as aclnnSiluBackward: one dtype T for all three,
// one shape, rank 0..8; an empty tensor is nothing to do.
#include "cpu/ops.h"

#include "cpu/elementwise.h"

namespace ascend_grad {

OrtStatus* SiluBackwardKernel::Init(const OrtKernelInfo*, const DType* types) {
  type_ = types[0];
  return nullptr;
}

OrtStatus* SiluBackwardKernel::Compute(OrtKernelContext* context) {
  TensorView dy, x, dx;
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 0, &dy));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 1, &x));
  ASCEND_GRAD_RETURN_IF_ERROR(CheckSiluBackward(dy, x));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, x.shape, &dx));
  int64_t count = 0;
  ASCEND_GRAD_RETURN_IF_ERROR(ElementCount(kName, "self", x.shape, &count));
  if (count == 0) return nullptr;
  BroadcastPlan plan;
  if (!plan.Build(dy.shape, x.shape)) return InvalidArgument(kName, "self " + ShapeString(x.shape) + " is too large");
  return RunElementwise(context, Kernels().silu_backward[static_cast<int>(type_)], plan, dy, type_, x, type_, dx.data, type_);
}

}  // namespace ascend_grad
