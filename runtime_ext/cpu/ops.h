// The four ops of the set as onnxruntime CPU kernels: the shared checks (common/ops.h), then the
// vector kernels. Each op's Compute lives in its own file (silu_backward.cc, ...).
#pragma once

#include "common/dtype.h"
#include "common/op_set.h"
#include "common/ops.h"
#include "common/ort.h"
#include "cpu/kernels.h"

namespace ascend_grad {

struct SiluBackwardKernel {
  static constexpr const char* kName = kSiluBackward;
  static constexpr const char* kProvider = nullptr;  // CPU
  static constexpr size_t kInputs = 2, kOutputs = 1, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType type_ = DType::kFloat;
};

struct MishBackwardKernel {
  static constexpr const char* kName = kMishBackward;
  static constexpr const char* kProvider = nullptr;
  static constexpr size_t kInputs = 2, kOutputs = 1, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType dy_type_ = DType::kFloat, x_type_ = DType::kFloat;
};

struct GroupNormSwishGradKernel {
  static constexpr const char* kName = kGroupNormSwishGrad;
  static constexpr const char* kProvider = nullptr;
  static constexpr size_t kInputs = 6, kOutputs = 3, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType t_ = DType::kFloat, u_ = DType::kFloat;
  GroupNormSwishGradAttributes attributes_;
};

struct GroupNormSwishKernel {
  static constexpr const char* kName = kGroupNormSwish;
  static constexpr const char* kProvider = nullptr;
  static constexpr size_t kInputs = 3, kOutputs = 3, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType t_ = DType::kFloat, u_ = DType::kFloat;
  GroupNormSwishAttributes attributes_;
};

// Whether a GroupNorm op runs its channels-last kernel: NHWC, and NCHW with one value per channel
// (HxW == 1), which lies in memory as NHWC does; there the channels-last kernel runs along C where
// the NCHW one would take a row (and its sums) per value. (64, 4096) G = 32, float, one thread,
// Intel Xeon: GroupNormSwishGrad 5.4 -> 1.9 ms, GroupNormSwish 11.2 -> 1.5 ms (the function body:
// 12.4 and 10.0 ms).
inline bool ChannelsLastKernel(const GroupNormLayout& layout) { return layout.channels_last || layout.HxW == 1; }

// Register the CPU kernels of every op, for every dtype combination the op's function body serves
// (cpu/register.cc).
struct Registry;
void AddCpuKernels(Registry* registry, uint32_t api_version);

}  // namespace ascend_grad
