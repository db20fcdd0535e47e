// The four ops of the set as onnxruntime kernels: validation and dispatch to the vector kernels.
// Each op's Compute lives in its own file (silu_backward.cc, ...).
#pragma once

#include <string>
#include <vector>

#include "cpu/dtype.h"
#include "cpu/kernels.h"
#include "cpu/ort.h"

namespace ascend_grad {

constexpr size_t kMaxRank = 8;  // aclnn's limit for every op of the set

struct SiluBackwardKernel {
  static constexpr const char* kName = "SiluBackward";
  static constexpr size_t kInputs = 2, kOutputs = 1, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType type_ = DType::kFloat;
};

struct MishBackwardKernel {
  static constexpr const char* kName = "MishBackward";
  static constexpr size_t kInputs = 2, kOutputs = 1, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType dy_type_ = DType::kFloat, x_type_ = DType::kFloat;
};

// What both GroupNorm ops read from their attributes and from x's shape.
struct GroupNormLayout {
  int64_t num_groups = 0;
  bool channels_last = false;  // data_format "NHWC"
  int64_t N = 0, C = 0, HxW = 1;

  // num_groups (> 0, required) and data_format ("NCHW" or "NHWC")
  OrtStatus* ReadAttributes(const OrtKernelInfo* info, const char* op);
  // x's rank (2..8), N, C, HxW, and C divisible by num_groups
  OrtStatus* ReadShape(const char* op, const char* name, const std::vector<int64_t>& shape);
  // a (C,) parameter or an (N * G)-element statistic, converted to float
  OrtStatus* ReadParameter(const char* op, const char* name, const TensorView& t, DType type, std::vector<float>* out) const;
  OrtStatus* ReadStatistic(const char* op, const char* name, const TensorView& t, DType type, std::vector<float>* out) const;
};

struct GroupNormSwishGradKernel {
  static constexpr const char* kName = "GroupNormSwishGrad";
  static constexpr size_t kInputs = 6, kOutputs = 3, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType t_ = DType::kFloat, u_ = DType::kFloat;
  GroupNormLayout layout_;
  float swish_scale_ = 1.0f;
  bool dgamma_on_ = true, dbeta_on_ = true;
};

struct GroupNormSwishKernel {
  static constexpr const char* kName = "GroupNormSwish";
  static constexpr size_t kInputs = 3, kOutputs = 3, kRequiredOutputs = 1;
  OrtStatus* Init(const OrtKernelInfo* info, const DType* types);
  OrtStatus* Compute(OrtKernelContext* context);
  DType t_ = DType::kFloat, u_ = DType::kFloat;
  GroupNormLayout layout_;
  float eps_ = 1e-5f, swish_scale_ = 1.0f;
  bool activate_swish_ = true;
};

// A 0/1 flag attribute.
OrtStatus* ReadFlag(const OrtKernelInfo* info, const char* op, const char* name, bool* value);

}  // namespace ascend_grad
