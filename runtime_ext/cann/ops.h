// The four ops of the set as kernels of onnxruntime's CANN execution provider: the shared checks
// (common/ops.h), then ONE aclnn call of the seeds over the EP's device buffers. Each op's Compute
// lives in its own file (silu_backward.cc, ...). Registered only for the dtype combinations the
// seeds allow (cann/register.cc); onnxruntime places any other node on the CPU kernel.
#pragma once

#include "common/dtype.h"
#include "common/op_set.h"
#include "common/ops.h"
#include "common/ort.h"

namespace ascend_grad {

constexpr const char* kCannProvider = "CANNExecutionProvider";

struct CannSiluBackwardKernel {
  static constexpr const char* kName = kSiluBackward;
  static constexpr const char* kProvider = kCannProvider;
  static constexpr size_t kInputs = 2, kOutputs = 1, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType type_ = DType::kFloat;
};

struct CannMishBackwardKernel {
  static constexpr const char* kName = kMishBackward;
  static constexpr const char* kProvider = kCannProvider;
  static constexpr size_t kInputs = 2, kOutputs = 1, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  // each input in its own dtype, gradInput in their promoted one (aclnn deduces it the same way)
  DType dy_type_ = DType::kFloat, x_type_ = DType::kFloat, dx_type_ = DType::kFloat;
};

struct CannGroupNormSwishGradKernel {
  static constexpr const char* kName = kGroupNormSwishGrad;
  static constexpr const char* kProvider = kCannProvider;
  static constexpr size_t kInputs = 6, kOutputs = 3, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType type_ = DType::kFloat;  // all nine tensors: aclnn takes one dtype
  GroupNormSwishGradAttributes attributes_;
};

struct CannGroupNormSwishKernel {
  static constexpr const char* kName = kGroupNormSwish;
  static constexpr const char* kProvider = kCannProvider;
  static constexpr size_t kInputs = 3, kOutputs = 3, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType t_ = DType::kFloat, u_ = DType::kFloat;  // U: T or float
  GroupNormSwishAttributes attributes_;
};

// aclnnGroupNormSwishGrad's limit: C/G rounded up to 8 (float) or 16 (half types) at most 4000.
bool WithinAscendGroupLimit(int64_t channels_per_group, DType type);

// The data_format Ascend takes: NCHW only (NHWC is a CPU extension).
OrtStatus* RequireNchw(const char* op, const GroupNormLayout& layout);

struct Registry;
void AddCannKernels(Registry* registry, uint32_t api_version);

}  // namespace ascend_grad
