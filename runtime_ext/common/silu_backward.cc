// SiluBackward's checks, as aclnnSiluBackward states them: one shape, rank 0..8 (empty is allowed).
#include "common/op_set.h"
#include "common/ops.h"

namespace ascend_grad {

OrtStatus* CheckSiluBackward(const TensorView& dy, const TensorView& x) {
  if (dy.shape != x.shape) {
    return InvalidArgument(kSiluBackward, "gradOutput " + ShapeString(dy.shape) + " and self " + ShapeString(x.shape) +
                                              " must have the same shape");
  }
  if (x.shape.size() > kMaxRank) {
    return InvalidArgument(kSiluBackward, "rank must be 0 to 8, got self " + ShapeString(x.shape));
  }
  return nullptr;
}

}  // namespace ascend_grad
