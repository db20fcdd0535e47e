// Running an elementwise gradient over two inputs that may broadcast (numpy rules).
//
// The broadcast output is walked as rows of a contiguous inner run; along the run each input is
// either contiguous or one repeated value. Work is split into fixed chunks of elements, so which
// element lands in which vector never depends on the number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "cpu/kernels.h"
#include "common/ort.h"

namespace ascend_grad {

struct BroadcastPlan {
  std::vector<int64_t> out_shape;  // the broadcast shape (rank = the larger input rank)
  // collapsed iteration space: outer dims (row index) with each input's element stride, then the run
  std::vector<int64_t> outer_dims, dy_strides, x_strides;
  int64_t run = 1;                       // elements per row
  bool dy_repeats = false, x_repeats = false;  // one value along the run
  int64_t rows = 1;

  // false when the shapes do not broadcast
  bool Build(const std::vector<int64_t>& dy_shape, const std::vector<int64_t>& x_shape);
};

OrtStatus* RunElementwise(OrtKernelContext* context, ElementwiseFn fn, const BroadcastPlan& plan, const TensorView& dy,
                          DType dy_type, const TensorView& x, DType x_type, void* out, DType out_type);

}  // namespace ascend_grad
