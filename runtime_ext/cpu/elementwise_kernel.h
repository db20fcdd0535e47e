// The loop every elementwise gradient shares: load two inputs of any float type, apply the op's
// vector math, round once to the output type. Tails go through a padded vector, so every element
// takes the same arithmetic (results do not depend on where a chunk boundary falls).
#pragma once

#include "cpu/simd.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

template <typename Op, typename TDy, typename TX, typename TOut, bool kDyBroadcast, bool kXBroadcast, bool kStream>
void ElementwiseLoop(const TDy* dy, const TX* x, TOut* out, size_t n) {
  const Vec dy_one = kDyBroadcast ? Vec::Broadcast(ToFloat(dy[0])) : Vec::Zero();
  const Vec x_one = kXBroadcast ? Vec::Broadcast(ToFloat(x[0])) : Vec::Zero();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Vec a = kDyBroadcast ? dy_one : Vec::Load(dy + i);
    const Vec b = kXBroadcast ? x_one : Vec::Load(x + i);
    if (kStream) {
      Op::Apply(a, b).Stream(out + i);
    } else {
      Op::Apply(a, b).Store(out + i);
    }
  }
  if (i < n) {
    const Vec a = kDyBroadcast ? dy_one : LoadPartial(dy + i, n - i);
    const Vec b = kXBroadcast ? x_one : LoadPartial(x + i, n - i);
    StorePartial(Op::Apply(a, b), out + i, n - i);
  }
}

template <typename Op, typename TDy, typename TX, typename TOut>
void Elementwise(const void* dy, bool dy_broadcast, const void* x, bool x_broadcast, void* out, size_t n, bool stream) {
  const auto* a = static_cast<const TDy*>(dy);
  const auto* b = static_cast<const TX*>(x);
  auto* c = static_cast<TOut*>(out);
  if (dy_broadcast && x_broadcast) {
    ElementwiseLoop<Op, TDy, TX, TOut, true, true, false>(a, b, c, n);
  } else if (dy_broadcast) {
    ElementwiseLoop<Op, TDy, TX, TOut, true, false, false>(a, b, c, n);
  } else if (x_broadcast) {
    ElementwiseLoop<Op, TDy, TX, TOut, false, true, false>(a, b, c, n);
  } else if (stream && StreamAligned(c)) {  // the big same-shape case
    ElementwiseLoop<Op, TDy, TX, TOut, false, false, true>(a, b, c, n);
    StreamFence();
  } else {
    ElementwiseLoop<Op, TDy, TX, TOut, false, false, false>(a, b, c, n);
  }
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
