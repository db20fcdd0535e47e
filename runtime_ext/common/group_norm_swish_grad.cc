// GroupNormSwishGrad's attributes and checks (SPEC.md): dy and x one shape, rank 2..8, C divisible
// by num_groups, mean/rstd N * G elements, gamma/beta C.
#include "common/op_set.h"
#include "common/ops.h"

namespace ascend_grad {

OrtStatus* GroupNormSwishGradAttributes::Read(const OrtKernelInfo* info) {
  ASCEND_GRAD_RETURN_IF_ERROR(layout.ReadAttributes(info, kGroupNormSwishGrad));
  ASCEND_GRAD_RETURN_IF_ERROR(ReadAttribute(info, kGroupNormSwishGrad, "swish_scale", &swish_scale, 1.0f));
  ASCEND_GRAD_RETURN_IF_ERROR(ReadFlag(info, kGroupNormSwishGrad, "dgamma_is_require", &dgamma_on));
  return ReadFlag(info, kGroupNormSwishGrad, "dbeta_is_require", &dbeta_on);
}

OrtStatus* CheckGroupNormSwishGrad(const TensorView (&inputs)[6], GroupNormLayout* layout) {
  const TensorView &dy = inputs[0], &mean = inputs[1], &rstd = inputs[2], &x = inputs[3], &gamma = inputs[4], &beta = inputs[5];
  const char* op = kGroupNormSwishGrad;
  ASCEND_GRAD_RETURN_IF_ERROR(layout->ReadShape(op, "x", x.shape));
  if (dy.shape != x.shape) {
    return InvalidArgument(op, "dy " + ShapeString(dy.shape) + " and x " + ShapeString(x.shape) + " must have the same shape");
  }
  ASCEND_GRAD_RETURN_IF_ERROR(layout->CheckParameter(op, "gamma", gamma));
  ASCEND_GRAD_RETURN_IF_ERROR(layout->CheckParameter(op, "beta", beta));
  ASCEND_GRAD_RETURN_IF_ERROR(layout->CheckStatistic(op, "mean", mean));
  return layout->CheckStatistic(op, "rstd", rstd);
}

}  // namespace ascend_grad
