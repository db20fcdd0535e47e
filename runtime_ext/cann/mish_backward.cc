// MishBackward on the NPU: aclnnMishBackward(gradOutput, self) -> gradInput, broadcasting. Registered
// for one dtype only: a mixed pair runs on the CPU kernel, or `fuse --target ascend` casts it to
// float (the promoted type: the same numbers).
#include "cann/acl.h"
#include "cann/ops.h"

namespace ascend_grad {

OrtStatus* CannMishBackwardKernel::Init(const OrtKernelInfo*, const DType* types) {
  type_ = types[0];
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
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dy, type_, dy.shape, &t_dy));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(x, type_, x.shape, &t_x));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dx, type_, out_shape, &t_dx));
  const CannApi& api = device.api();
  return device.Run(
      "aclnnMishBackward",
      [&](uint64_t* size, aclOpExecutor** executor) {
        return api.aclnnMishBackwardGetWorkspaceSize(t_dy, t_x, t_dx, size, executor);
      },
      api.aclnnMishBackward);
}

}  // namespace ascend_grad
