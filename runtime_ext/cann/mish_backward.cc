// MishBackward on the NPU: aclnnMishBackward(gradOutput, self) -> gradInput, broadcasting. The seed
// lets gradOutput and self differ in dtype (aclnn deduces the compute type, float for any mix), so
// every pair is one call, each tensor in its own dtype and gradInput in the promoted one.
#include "cann/acl.h"
#include "cann/ops.h"

namespace ascend_grad {

OrtStatus* CannMishBackwardKernel::Init(const OrtKernelInfo*, const DType* types) {
  dy_type_ = types[0];
  x_type_ = types[1];
  dx_type_ = types[2];
  return nullptr;
}

OrtStatus* CannMishBackwardKernel::Compute(OrtKernelContext* context) {
  TensorView dy, x, dx;
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 0, &dy));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 1, &x));
  std::vector<int64_t> out_shape;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckMishBackward(dy, x, &out_shape));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, out_shape, &dx));
  Device device;
  ASCEND_GRAD_RETURN_IF_ERROR(device.Open(context, kName, x));
  aclTensor *t_dy, *t_x, *t_dx;
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dy, dy_type_, dy.shape, &t_dy));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(x, x_type_, x.shape, &t_x));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dx, dx_type_, out_shape, &t_dx));
  const CannApi& api = device.api();
  return device.Run(
      "aclnnMishBackward",
      [&](uint64_t* size, aclOpExecutor** executor) {
        return api.aclnnMishBackwardGetWorkspaceSize(t_dy, t_x, t_dx, size, executor);
      },
      api.aclnnMishBackward);
}

}  // namespace ascend_grad
