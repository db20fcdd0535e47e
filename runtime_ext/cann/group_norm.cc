// What both GroupNorm kernels on the NPU respect: aclnn's layout and group-size rules.
#include "cann/ops.h"

namespace ascend_grad {

bool WithinAscendGroupLimit(int64_t channels_per_group, DType type) {
  const int64_t align = type == DType::kFloat ? 8 : 16;
  return channels_per_group <= 4000 && (channels_per_group + align - 1) / align * align <= 4000;  // (no overflow)
}

OrtStatus* RequireNchw(const char* op, const GroupNormLayout& layout) {
  if (!layout.channels_last) return nullptr;
  return InvalidArgument(op, "data_format 'NHWC' is a CPU extension: aclnn takes NCHW only (`ascend-grad fuse --target "
                             "ascend` keeps such a node on the host)");
}

}  // namespace ascend_grad
