// What GroupNormSwish and GroupNormSwishGrad share: the layout attributes and x's shape checks.
#include "common/ops.h"

namespace ascend_grad {

OrtStatus* GroupNormLayout::ReadAttributes(const OrtKernelInfo* info, const char* op) {
  ASCEND_GRAD_RETURN_IF_ERROR(ReadAttribute(info, op, "num_groups", &num_groups, nullptr));
  if (num_groups <= 0) return InvalidArgument(op, "num_groups must be > 0, got " + std::to_string(num_groups));
  std::string data_format;
  ASCEND_GRAD_RETURN_IF_ERROR(ReadAttribute(info, op, "data_format", &data_format, "NCHW"));
  if (data_format != "NCHW" && data_format != "NHWC") {
    return InvalidArgument(op, "data_format must be 'NCHW' or 'NHWC', got '" + data_format + "'");
  }
  channels_last = data_format == "NHWC";
  return nullptr;
}

OrtStatus* GroupNormLayout::ReadShape(const char* op, const char* name, const std::vector<int64_t>& shape) {
  if (shape.size() < 2 || shape.size() > kMaxRank) {
    return InvalidArgument(op, std::string(name) + " must have rank 2 to 8, got shape " + ShapeString(shape));
  }
  N = shape[0];
  C = channels_last ? shape.back() : shape[1];
  const int64_t* spatial = shape.data() + (channels_last ? 1 : 2);
  if (!CheckedProduct(spatial, spatial + (shape.size() - 2), &HxW)) {
    return TooLarge(op, name, shape, "the product of its spatial dims (HxW) overflows int64");
  }
  if (C % num_groups != 0) {
    return InvalidArgument(op, "C (" + std::to_string(C) + ") must be divisible by num_groups (" + std::to_string(num_groups) + ")");
  }
  // An empty x (C == 0, or N == 0) can carry huge other dims and num_groups: its statistics (N, G)
  // are still an output, and each product must be describable, the statistics and x addressable
  // as floats (N * C and C * HxW, what else the kernels form, are at most N * C * HxW once x holds
  // anything; an empty x runs no kernel).
  auto NxG = [&] { return "N * num_groups = " + std::to_string(N) + " * " + std::to_string(num_groups); };
  size_t bytes = 0;
  if (!CheckedMul(N, num_groups, &NG)) return TooLarge(op, name, shape, NxG() + " overflows int64");
  if (!CheckedBytes(NG, sizeof(float), &bytes)) return TooLarge(op, name, shape, NxG() + " float statistics overflow the address space");
  if (!CheckedMul(N, C, &NC)) return TooLarge(op, name, shape, "N * C overflows int64");
  if (!CheckedMul(NC, HxW, &elements)) return TooLarge(op, name, shape, "N * C * HxW overflows int64");
  if (!CheckedBytes(elements, sizeof(float), &bytes)) return TooLarge(op, name, shape, "its floats overflow the address space");
  return nullptr;
}

OrtStatus* GroupNormLayout::CheckParameter(const char* op, const char* name, const TensorView& t) const {
  if (t.shape.size() != 1 || t.shape[0] != C) {
    return InvalidArgument(op, std::string(name) + " must be 1-D with C = " + std::to_string(C) + " elements, got shape " +
                                   ShapeString(t.shape));
  }
  return nullptr;
}

OrtStatus* GroupNormLayout::CheckStatistic(const char* op, const char* name, const TensorView& t) const {
  int64_t count = 0;
  ASCEND_GRAD_RETURN_IF_ERROR(ElementCount(op, name, t.shape, &count));
  if (count != NG) {
    return InvalidArgument(op, std::string(name) + " " + ShapeString(t.shape) + " has " + std::to_string(count) +
                                   " elements, N * num_groups is " + std::to_string(N) + " * " + std::to_string(num_groups) +
                                   " = " + std::to_string(NG));
  }
  return nullptr;
}

OrtStatus* ReadFlag(const OrtKernelInfo* info, const char* op, const char* name, bool* value) {
  const int64_t fallback = 1;
  int64_t flag = 1;
  ASCEND_GRAD_RETURN_IF_ERROR(ReadAttribute(info, op, name, &flag, &fallback));
  if (flag != 0 && flag != 1) return InvalidArgument(op, std::string(name) + " must be 0 or 1, got " + std::to_string(flag));
  *value = flag == 1;
  return nullptr;
}

}  // namespace ascend_grad
