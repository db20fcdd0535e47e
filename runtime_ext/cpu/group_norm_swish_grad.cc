// GroupNormSwishGrad(dy, mean, rstd, x, gamma, beta) -> (dx, dgamma?, dbeta?), as
// aclnnGroupNormSwishGrad; T for dy/x/dx, U for the rest, each float, float16 or bfloat16.
#include "cpu/ops.h"

#include <utility>
#include <vector>

namespace ascend_grad {

OrtStatus* GroupNormSwishGradKernel::Init(const OrtKernelInfo* info, const DType* types) {
  t_ = types[0];
  u_ = types[1];
  return attributes_.Read(info);
}

OrtStatus* GroupNormSwishGradKernel::Compute(OrtKernelContext* context) {
  TensorView inputs[6];
  for (size_t i = 0; i < 6; ++i) ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, i, &inputs[i]));
  const TensorView &dy = inputs[0], &mean = inputs[1], &rstd = inputs[2], &x = inputs[3], &gamma = inputs[4], &beta = inputs[5];
  GroupNormLayout layout = attributes_.layout;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckGroupNormSwishGrad(inputs, &layout));
  TensorView dx, dgamma, dbeta;
  const std::vector<int64_t> c_shape{layout.C};
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, x.shape, &dx));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 1, c_shape, &dgamma));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 2, c_shape, &dbeta));
  const int64_t N = layout.N, C = layout.C, G = layout.num_groups;
  if (layout.elements == 0) {
    // the parameter gradients are sums over nothing: zeros, written straight into the outputs
    // (N * C may be huge when HxW == 0: nothing is allocated)
    if (dgamma.data != nullptr) FillFloats(u_, 0.0f, static_cast<size_t>(C), dgamma.data);
    if (dbeta.data != nullptr) FillFloats(u_, 0.0f, static_cast<size_t>(C), dbeta.data);
    return nullptr;
  }

  // (x holds N * C * HxW > 0 elements: every buffer below is at most its size)
  std::vector<float> gamma_f, beta_f, mean_f, rstd_f;
  for (auto [view, floats] : {std::pair{&gamma, &gamma_f}, {&beta, &beta_f}, {&mean, &mean_f}, {&rstd, &rstd_f}}) {
    floats->resize(static_cast<size_t>(view == &gamma || view == &beta ? C : layout.NG));  // (checked: C, N * G)
    LoadFloats(u_, view->data, floats->size(), floats->data());
  }
  std::vector<float> dbeta_nc(static_cast<size_t>(layout.NC), 0.0f), dgamma_nc(static_cast<size_t>(layout.NC), 0.0f);
  const GroupNormGradArgs args{dy.data,          x.data,         dx.data,          mean_f.data(),
                               rstd_f.data(),    gamma_f.data(), beta_f.data(),    dbeta_nc.data(),
                               dgamma_nc.data(), N,              C,                layout.HxW,
                               G,                attributes_.swish_scale, layout.channels_last};
  const GroupNormGradFn fn = Kernels().group_norm_swish_grad[static_cast<int>(t_)];
  auto task = [&](size_t t) { fn(args, static_cast<int64_t>(t)); };
  ASCEND_GRAD_RETURN_IF_ERROR(ParallelFor(context, static_cast<size_t>(layout.channels_last ? N : layout.NG), task));

  // parameter gradients: the per-(n, c) sums added over n in a fixed order; zeros when not required
  auto write = [&](const TensorView& view, bool on, const std::vector<float>& per_nc) {
    if (view.data == nullptr) return;
    std::vector<float> total(static_cast<size_t>(C), 0.0f);
    for (int64_t c = 0; on && c < C; ++c) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n) sum += per_nc[static_cast<size_t>(n * C + c)];  // (< N * C, checked)
      total[c] = static_cast<float>(sum);
    }
    StoreFloats(u_, total.data(), total.size(), view.data);
  };
  write(dgamma, attributes_.dgamma_on, dgamma_nc);
  write(dbeta, attributes_.dbeta_on, dbeta_nc);
  return nullptr;
}

}  // namespace ascend_grad
