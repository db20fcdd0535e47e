// MishBackward's checks, as aclnnMishBackward states them: rank 0..8, no empty tensor, numpy
// broadcasting between gradOutput and self.
#include "common/op_set.h"
#include "common/ops.h"

namespace ascend_grad {

OrtStatus* CheckMishBackward(const TensorView& dy, const TensorView& x, std::vector<int64_t>* out_shape) {
  for (const TensorView* input : {&dy, &x}) {
    const char* name = input == &dy ? "gradOutput" : "self";
    if (input->shape.size() > kMaxRank) {
      return InvalidArgument(kMishBackward, std::string("rank must be 0 to 8, got ") + name + " " + ShapeString(input->shape));
    }
    int64_t count = 0;
    ASCEND_GRAD_RETURN_IF_ERROR(ElementCount(kMishBackward, name, input->shape, &count));
    if (count == 0) {
      return InvalidArgument(kMishBackward, std::string(name) + " is empty " + ShapeString(input->shape) +
                                                "; aclnnMishBackward rejects empty tensors");
    }
  }
  const size_t rank = dy.shape.size() > x.shape.size() ? dy.shape.size() : x.shape.size();
  out_shape->assign(rank, 1);
  for (size_t k = 0; k < rank; ++k) {  // aligned from the right
    const int64_t a = k < rank - dy.shape.size() ? 1 : dy.shape[k - (rank - dy.shape.size())];
    const int64_t b = k < rank - x.shape.size() ? 1 : x.shape[k - (rank - x.shape.size())];
    if (a != b && a != 1 && b != 1) {
      return InvalidArgument(kMishBackward, "gradOutput " + ShapeString(dy.shape) + " and self " + ShapeString(x.shape) +
                                                " do not broadcast");
    }
    (*out_shape)[k] = a == 1 ? b : a;
  }
  // broadcasting multiplies: the output can hold far more than either input
  int64_t count = 0;
  size_t bytes = 0;
  if (!CheckedProduct(*out_shape, &count) || !CheckedBytes(count, sizeof(float), &bytes)) {
    return InvalidArgument(kMishBackward, "gradOutput " + ShapeString(dy.shape) + " and self " + ShapeString(x.shape) +
                                              " broadcast to " + ShapeString(*out_shape) + ", which is too large: its "
                                              "element count overflows the address space");
  }
  return nullptr;
}

}  // namespace ascend_grad
