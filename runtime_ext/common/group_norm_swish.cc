// GroupNormSwish's attributes and checks (SPEC.md): x rank 2..8, C divisible by num_groups,
// gamma/beta C elements, eps >= 0.
#include "common/op_set.h"
#include "common/ops.h"

namespace ascend_grad {

OrtStatus* GroupNormSwishAttributes::Read(const OrtKernelInfo* info) {
  const char* op = kGroupNormSwish;
  ASCEND_GRAD_RETURN_IF_ERROR(layout.ReadAttributes(info, op));
  ASCEND_GRAD_RETURN_IF_ERROR(ReadAttribute(info, op, "eps", &eps, 1e-5f));
  if (!(eps >= 0.0f)) return InvalidArgument(op, "eps must be >= 0, got " + std::to_string(eps));
  ASCEND_GRAD_RETURN_IF_ERROR(ReadAttribute(info, op, "swish_scale", &swish_scale, 1.0f));
  return ReadFlag(info, op, "activate_swish", &activate_swish);
}

OrtStatus* CheckGroupNormSwish(const TensorView& x, const TensorView& gamma, const TensorView& beta, GroupNormLayout* layout) {
  ASCEND_GRAD_RETURN_IF_ERROR(layout->ReadShape(kGroupNormSwish, "x", x.shape));
  ASCEND_GRAD_RETURN_IF_ERROR(layout->CheckParameter(kGroupNormSwish, "gamma", gamma));
  return layout->CheckParameter(kGroupNormSwish, "beta", beta);
}

}  // namespace ascend_grad
