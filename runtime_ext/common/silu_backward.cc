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
  int64_t count = 0;
  size_t bytes = 0;
  ASCEND_GRAD_RETURN_IF_ERROR(ElementCount(kSiluBackward, "self", x.shape, &count));
  if (!CheckedBytes(count, sizeof(float), &bytes)) {
    return TooLarge(kSiluBackward, "self", x.shape, "its size in bytes overflows the address space");
  }
  return nullptr;
}

}  // namespace ascend_grad
