// GroupNormSwish on the NPU: aclnnGroupNormSwish(x, gamma, beta) -> (y, mean, rstd), gamma/beta/mean/
// rstd in x's dtype or float (aclnn's rule; other mixes run on the CPU kernel). aclnn wants mean and
// rstd even when the node leaves them out: those get scratch memory.
#include "cann/acl.h"
#include "cann/ops.h"

namespace ascend_grad {

OrtStatus* CannGroupNormSwishKernel::Init(const OrtKernelInfo* info, const DType* types) {
  t_ = types[0];
  u_ = types[1];
  return attributes_.Read(info);
}

OrtStatus* CannGroupNormSwishKernel::Compute(OrtKernelContext* context) {
  TensorView x, gamma, beta;
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 0, &x));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 1, &gamma));
  ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, 2, &beta));
  GroupNormLayout layout = attributes_.layout;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckGroupNormSwish(x, gamma, beta, &layout));
  ASCEND_GRAD_RETURN_IF_ERROR(RequireNchw(kName, layout));
  const int64_t N = layout.N, G = layout.num_groups;
  TensorView y, mean, rstd;
  const std::vector<int64_t> stat_shape{N, G};
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, x.shape, &y));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 1, stat_shape, &mean));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 2, stat_shape, &rstd));

  Device device;
  ASCEND_GRAD_RETURN_IF_ERROR(device.Open(context, kName, x));
  size_t stat_bytes = 0;
  if (!CheckedBytes(layout.NG, DTypeSize(u_), &stat_bytes)) return TooLarge(kName, "x", x.shape, "N * num_groups overflows");
  if (layout.elements == 0) {
    // aclnn takes no empty tensor; a group of no elements has no mean: NaN, as the reference says
    // (all-ones bytes are a NaN in float, float16 and bfloat16)
    if (mean.data != nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Fill(mean.data, stat_bytes, 0xFF));
    if (rstd.data != nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Fill(rstd.data, stat_bytes, 0xFF));
    return nullptr;
  }
  if (mean.data == nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Allocate(stat_bytes, &mean.data));
  if (rstd.data == nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Allocate(stat_bytes, &rstd.data));

  const std::vector<int64_t> c_shape{layout.C};
  aclTensor *t_x, *t_gamma, *t_beta, *t_y, *t_mean, *t_rstd;
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(x, t_, x.shape, &t_x));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(gamma, u_, c_shape, &t_gamma));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(beta, u_, c_shape, &t_beta));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(y, t_, x.shape, &t_y));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(mean, u_, stat_shape, &t_mean));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(rstd, u_, stat_shape, &t_rstd));
  char data_format[] = "NCHW";
  const CannApi& api = device.api();
  return device.Run(
      "aclnnGroupNormSwish",
      [&](uint64_t* size, aclOpExecutor** executor) {
        return api.aclnnGroupNormSwishGetWorkspaceSize(t_x, t_gamma, t_beta, G, data_format,
                                                       static_cast<double>(attributes_.eps), attributes_.activate_swish,
                                                       static_cast<double>(attributes_.swish_scale), t_y, t_mean, t_rstd,
                                                       size, executor);
      },
      api.aclnnGroupNormSwish);
}

}  // namespace ascend_grad
