// SiluBackward on the NPU: aclnnSiluBackward(gradOutput, self) -> gradInput, one dtype, one shape.
#include "cann/acl.h"
#include "cann/ops.h"

namespace ascend_grad {

OrtStatus* CannSiluBackwardKernel::Init(const OrtKernelInfo*, const DType* types) {
  type_ = types[0];
  return nullptr;
}

OrtStatus* CannSiluBackwardKernel::Compute(OrtKernelContext* context) {
  TensorView dy, x, dx;
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 0, &dy));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 1, &x));
  ASCEND_GRAD_RETURN_IF_ERROR(CheckSiluBackward(dy, x));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, x.shape, &dx));
  int64_t count = 0;
  ASCEND_GRAD_RETURN_IF_ERROR(ElementCount(kName, "self", x.shape, &count));
  if (count == 0) return nullptr;  // nothing to do (aclnn takes no empty tensor)
  Device device;
  ASCEND_GRAD_RETURN_IF_ERROR(device.Open(context, kName, x));
  aclTensor *t_dy, *t_x, *t_dx;
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dy, type_, dy.shape, &t_dy));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(x, type_, x.shape, &t_x));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dx, type_, x.shape, &t_dx));
  const CannApi& api = device.api();
  return device.Run(
      "aclnnSiluBackward",
      [&](uint64_t* size, aclOpExecutor** executor) {
        return api.aclnnSiluBackwardGetWorkspaceSize(t_dy, t_x, t_dx, size, executor);
      },
      api.aclnnSiluBackward);
}

}  // namespace ascend_grad
