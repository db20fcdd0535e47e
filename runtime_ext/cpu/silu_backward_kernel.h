// SiluBackward's vector math: gradInput = gradOutput * s * (1 + x * (1 - s)), s = sigmoid(x).
#pragma once

#include "cpu/elementwise_kernel.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

// The swish family's gradient at u = k z: d/dz [z sigmoid(k z)] = s (1 + u (1 - s)) = s + u s (1 - s),
// s = sigmoid(u) = b q, s (1 - s) = e q^2 (see SigmoidOf), so it is q (b + u e q): dy q and u e
// are formed while the divide runs, two operations follow it. SiLU is k = 1; GroupNormSwishGrad
// uses it with its swish_scale.
ASCEND_GRAD_MATH Vec SwishGrad(Vec dy, Vec u) {
  const SigmoidParts sig = SigmoidOf(u);
  return (dy * sig.q) * Fma(u * sig.e, sig.q, sig.b());
}

struct SiluGrad {
  ASCEND_GRAD_MATH static Vec Apply(Vec dy, Vec x) { return SwishGrad(dy, x); }
};

template <typename T>
void SiluBackward(const void* dy, bool dy_broadcast, const void* x, bool x_broadcast, void* out, size_t n, bool stream) {
  Elementwise<SiluGrad, T, T, T>(dy, dy_broadcast, x, x_broadcast, out, n, stream);
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
