// GroupNormSwish(x, gamma, beta) -> (y, mean?, rstd?), as aclnnGroupNormSwish: the forward whose
// mean and rstd (N, G) GroupNormSwishGrad consumes. T for x/y, U for gamma/beta/mean/rstd.
#include "cpu/ops.h"

#include <limits>
#include <vector>

namespace ascend_grad {

OrtStatus* GroupNormSwishKernel::Init(const OrtKernelInfo* info, const DType* types) {
  t_ = types[0];
  u_ = types[1];
  return attributes_.Read(info);
}

OrtStatus* GroupNormSwishKernel::Compute(OrtKernelContext* context) {
  TensorView x, gamma, beta;
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 0, &x));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 1, &gamma));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 2, &beta));
  GroupNormLayout layout = attributes_.layout;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckGroupNormSwish(x, gamma, beta, &layout));
  const int64_t N = layout.N, G = layout.num_groups;
  TensorView y, mean, rstd;
  const std::vector<int64_t> stat_shape{N, G};
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, x.shape, &y));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 1, stat_shape, &mean));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 2, stat_shape, &rstd));
  if (layout.elements == 0) {
    // every group is empty: its mean is 0/0, NaN (the reference's and the CANN kernel's answer).
    // Written straight into the outputs: N * G may be huge with C == 0, so nothing is allocated.
    const float nan = -std::numeric_limits<float>::quiet_NaN();  // (the bits of x86's 0/0)
    if (mean.data != nullptr) FillFloats(u_, nan, static_cast<size_t>(layout.NG), mean.data);
    if (rstd.data != nullptr) FillFloats(u_, nan, static_cast<size_t>(layout.NG), rstd.data);
    return nullptr;
  }

  // (x holds N * C * HxW > 0 elements: every buffer below is at most its size)
  std::vector<float> gamma_f(static_cast<size_t>(layout.C)), beta_f(static_cast<size_t>(layout.C));
  LoadFloats(u_, gamma.data, gamma_f.size(), gamma_f.data());
  LoadFloats(u_, beta.data, beta_f.size(), beta_f.data());
  std::vector<float> mean_f(static_cast<size_t>(layout.NG), 0.0f), rstd_f(static_cast<size_t>(layout.NG), 0.0f);
  const GroupNormArgs args{x.data,       y.data,          gamma_f.data(), beta_f.data(),   mean_f.data(),
                           rstd_f.data(), N,              layout.C,       layout.HxW,      G,
                           attributes_.eps, attributes_.swish_scale, attributes_.activate_swish, ChannelsLastKernel(layout),
                           layout.elements >= StreamBytes() / static_cast<int64_t>(DTypeSize(t_))};
  const GroupNormFn fn = Kernels().group_norm_swish[static_cast<int>(t_)];
  auto task = [&](size_t t) { fn(args, static_cast<int64_t>(t)); };
  ASCEND_GRAD_RETURN_IF_ERROR(ParallelFor(context, static_cast<size_t>(args.channels_last ? N : layout.NG), task));
  if (mean.data != nullptr) StoreFloats(u_, mean_f.data(), mean_f.size(), mean.data);
  if (rstd.data != nullptr) StoreFloats(u_, rstd_f.data(), rstd_f.size(), rstd.data);
  return nullptr;
}

}  // namespace ascend_grad
