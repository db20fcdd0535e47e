// The CPU kernels of every op, for every dtype combination its onnxscript function serves (when the
// library is registered, onnxruntime runs these kernels and ignores the model's function bodies, so
// a missing combination would break the model).
#include "common/custom_op.h"
#include "cpu/ops.h"

namespace ascend_grad {

void AddCpuKernels(Registry* registry, uint32_t version) {
  constexpr DType kAll[] = {DType::kFloat, DType::kFloat16, DType::kBFloat16};
  for (DType t : kAll) registry->Add<SiluBackwardKernel>(version, t, t, t);
  for (DType a : kAll) {
    for (DType b : kAll) {
      registry->Add<MishBackwardKernel>(version, a, b, Promote(a, b));
      registry->Add<GroupNormSwishGradKernel>(version, a, b, b, a, b, b, a, b, b);  // T, U: dy mean rstd x gamma beta -> dx dgamma dbeta
      registry->Add<GroupNormSwishKernel>(version, a, b, b, a, b, b);              // x gamma beta -> y mean rstd
    }
  }
}

}  // namespace ascend_grad
