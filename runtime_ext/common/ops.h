// What every backend reads and checks the same way: each op's attributes and input shapes (SPEC.md),
// so that a CANN kernel rejects exactly what the CPU kernel rejects, with the same message.
// One op per file: common/silu_backward.cc, ...
#pragma once

#include <string>
#include <vector>

#include "common/ort.h"

namespace ascend_grad {

constexpr size_t kMaxRank = 8;  // aclnn's limit for every op of the set

// gradOutput and self: one shape, rank 0..8
OrtStatus* CheckSiluBackward(const TensorView& dy, const TensorView& x);

// gradOutput and self: rank 0..8, not empty (as on Ascend), numpy-broadcastable into *out_shape
OrtStatus* CheckMishBackward(const TensorView& dy, const TensorView& x, std::vector<int64_t>* out_shape);

// What both GroupNorm ops read from their attributes and from x's shape.
struct GroupNormLayout {
  int64_t num_groups = 0;
  bool channels_last = false;  // data_format "NHWC"
  int64_t N = 0, C = 0, HxW = 1;
  // N * C * HxW, N * num_groups (the statistics) and N * C: every product of the dims a kernel
  // forms is one of these or smaller, and ReadShape checked them all (int64, and as float bytes)
  int64_t elements = 0, NG = 0, NC = 0;

  // num_groups (> 0, required) and data_format ("NCHW" or "NHWC")
  OrtStatus* ReadAttributes(const OrtKernelInfo* info, const char* op);
  // x's rank (2..8), N, C, HxW, C divisible by num_groups, and the products above
  OrtStatus* ReadShape(const char* op, const char* name, const std::vector<int64_t>& shape);
  // a (C,) parameter; an (N * G)-element statistic
  OrtStatus* CheckParameter(const char* op, const char* name, const TensorView& t) const;
  OrtStatus* CheckStatistic(const char* op, const char* name, const TensorView& t) const;
};

struct GroupNormSwishGradAttributes {
  GroupNormLayout layout;
  float swish_scale = 1.0f;
  bool dgamma_on = true, dbeta_on = true;  // dgamma_is_require, dbeta_is_require
  OrtStatus* Read(const OrtKernelInfo* info);
};

// dy, mean, rstd, x, gamma, beta; *layout (the attributes' copy) gets x's N, C, HxW
OrtStatus* CheckGroupNormSwishGrad(const TensorView (&inputs)[6], GroupNormLayout* layout);

struct GroupNormSwishAttributes {
  GroupNormLayout layout;
  float eps = 1e-5f, swish_scale = 1.0f;
  bool activate_swish = true;
  OrtStatus* Read(const OrtKernelInfo* info);
};

// x, gamma, beta; *layout (the attributes' copy) gets x's N, C, HxW
OrtStatus* CheckGroupNormSwish(const TensorView& x, const TensorView& gamma, const TensorView& beta, GroupNormLayout* layout);

// A 0/1 flag attribute.
OrtStatus* ReadFlag(const OrtKernelInfo* info, const char* op, const char* name, bool* value);

}  // namespace ascend_grad
