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
  HxW = 1;
  for (size_t k = channels_last ? 1 : 2; k < (channels_last ? shape.size() - 1 : shape.size()); ++k) HxW *= shape[k];
  if (C % num_groups != 0) {
    return InvalidArgument(op, "C (" + std::to_string(C) + ") must be divisible by num_groups (" + std::to_string(num_groups) + ")");
  }
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
  if (ElementCount(t.shape) != N * num_groups) {
    return InvalidArgument(op, std::string(name) + " " + ShapeString(t.shape) + " has " + std::to_string(ElementCount(t.shape)) +
                                   " elements, N * num_groups is " + std::to_string(N) + " * " + std::to_string(num_groups) +
                                   " = " + std::to_string(N * num_groups));
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
