// The CANN kernels, for the dtype combinations the seeds allow: SiluBackward in one dtype;
// MishBackward for every (gradOutput, self) pair, gradInput in the promoted dtype (aclnn deduces
// float for any mix); GroupNormSwishGrad with all nine tensors in one dtype; GroupNormSwish with
// gamma/beta/mean/rstd in x's dtype or float. A node of any other combination has no CANN kernel:
// onnxruntime runs it on the CPU kernel (graph_passes/ascend predicts exactly that).
#include "cann/ops.h"
#include "common/custom_op.h"

namespace ascend_grad {

void AddCannKernels(Registry* registry, uint32_t version) {
  constexpr DType kAll[] = {DType::kFloat, DType::kFloat16, DType::kBFloat16};
  for (DType t : kAll) {
    registry->Add<CannSiluBackwardKernel>(version, t, t, t);
    for (DType x : kAll) registry->Add<CannMishBackwardKernel>(version, t, x, Promote(t, x));
    registry->Add<CannGroupNormSwishGradKernel>(version, t, t, t, t, t, t, t, t, t);
    registry->Add<CannGroupNormSwishKernel>(version, t, t, t, t, t, t);
    if (t != DType::kFloat) {
      constexpr DType f = DType::kFloat;
      registry->Add<CannGroupNormSwishKernel>(version, t, f, f, t, f, f);
    }
  }
}

}  // namespace ascend_grad
