// GroupNormSwishGrad on the NPU: aclnnGroupNormSwishGrad over the nine tensors, all of one dtype
// (aclnn requires it; mixed nodes run on the CPU kernel, or `fuse --target ascend` computes them in
// float). aclnn wants dgamma and dbeta even when the node leaves them out: those get scratch memory.
#include <string>

#include "cann/acl.h"
#include "cann/ops.h"

namespace ascend_grad {

OrtStatus* CannGroupNormSwishGradKernel::Init(const OrtKernelInfo* info, const DType* types) {
  type_ = types[0];
  return attributes_.Read(info);
}

OrtStatus* CannGroupNormSwishGradKernel::Compute(OrtKernelContext* context) {
  TensorView inputs[6];
  for (size_t i = 0; i < 6; ++i) ASCEND_GRAD_RETURN_IF_ERROR(GetInput(context, i, &inputs[i]));
  const TensorView &dy = inputs[0], &mean = inputs[1], &rstd = inputs[2], &x = inputs[3], &gamma = inputs[4], &beta = inputs[5];
  GroupNormLayout layout = attributes_.layout;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckGroupNormSwishGrad(inputs, &layout));
  ASCEND_GRAD_RETURN_IF_ERROR(RequireNchw(kName, layout));
  const int64_t N = layout.N, C = layout.C, G = layout.num_groups;
  if (!WithinAscendGroupLimit(C / G, type_)) {
    return InvalidArgument(kName, "C / num_groups = " + std::to_string(C / G) +
                                      " is over aclnnGroupNormSwishGrad's limit (4000 after rounding up to 8 for float, "
                                      "16 for float16/bfloat16); `ascend-grad fuse --target ascend` keeps such a node on the host");
  }
  TensorView dx, dgamma, dbeta;
  const std::vector<int64_t> c_shape{C};
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 0, x.shape, &dx));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 1, c_shape, &dgamma));
  ASCEND_GRAD_RETURN_IF_ERROR(GetOutput(context, 2, c_shape, &dbeta));

  Device device;
  ASCEND_GRAD_RETURN_IF_ERROR(device.Open(context, kName, x));
  size_t c_bytes = 0;
  if (!CheckedBytes(C, DTypeSize(type_), &c_bytes)) return TooLarge(kName, "x", x.shape, "C overflows");
  if (layout.elements == 0) {  // aclnn takes no empty tensor: the sums over nothing are zero
    if (dgamma.data != nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Fill(dgamma.data, c_bytes, 0));
    if (dbeta.data != nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Fill(dbeta.data, c_bytes, 0));
    return nullptr;
  }
  // an output the node leaves out: scratch, and aclnn told not to compute it
  const bool dgamma_wanted = attributes_.dgamma_on && dgamma.data != nullptr;
  const bool dbeta_wanted = attributes_.dbeta_on && dbeta.data != nullptr;
  if (dgamma.data == nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Allocate(c_bytes, &dgamma.data));
  if (dbeta.data == nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Allocate(c_bytes, &dbeta.data));

  const std::vector<int64_t> stat_shape{N, G};  // aclnn: mean and rstd are (N, G)
  aclTensor* t[9];
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dy, type_, dy.shape, &t[0]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(mean, type_, stat_shape, &t[1]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(rstd, type_, stat_shape, &t[2]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(x, type_, x.shape, &t[3]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(gamma, type_, c_shape, &t[4]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(beta, type_, c_shape, &t[5]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dx, type_, x.shape, &t[6]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dgamma, type_, c_shape, &t[7]));
  ASCEND_GRAD_RETURN_IF_ERROR(device.Tensor(dbeta, type_, c_shape, &t[8]));
  char data_format[] = "NCHW";
  const CannApi& api = device.api();
  ASCEND_GRAD_RETURN_IF_ERROR(device.Run(
      "aclnnGroupNormSwishGrad",
      [&](uint64_t* size, aclOpExecutor** executor) {
        return api.aclnnGroupNormSwishGradGetWorkspaceSize(t[0], t[1], t[2], t[3], t[4], t[5], G, data_format,
                                                           static_cast<double>(attributes_.swish_scale), dgamma_wanted,
                                                           dbeta_wanted, t[6], t[7], t[8], size, executor);
      },
      api.aclnnGroupNormSwishGrad));
  // SPEC: a requested output whose flag is 0 holds zeros (aclnn leaves it as it was)
  if (!attributes_.dgamma_on && dgamma.value != nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Fill(dgamma.data, c_bytes, 0));
  if (!attributes_.dbeta_on && dbeta.value != nullptr) ASCEND_GRAD_RETURN_IF_ERROR(device.Fill(dbeta.data, c_bytes, 0));
  return nullptr;
}

}  // namespace ascend_grad
