// GroupNormSwishGrad(dy, mean, rstd, x, gamma, beta) -> (dx, dgamma?, dbeta?), as
// aclnnGroupNormSwishGrad; T for dy/x/dx, U for the rest, each float, float16 or bfloat16.
#include "cpu/ops.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

namespace ascend_grad {

OrtStatus* GroupNormSwishGradKernel::Init(const OrtKernelInfo* info, const DType* types) {
  t_ = types[0];
  u_ = types[1];
  return attributes_.Read(info);
}

// NCHW: how many consecutive (n, group) slabs of M values a task takes. A run of slabs hides each
// one's second pass behind the next one's first (group_norm_swish_grad_kernel.h), which pays while
// two slabs' x, dy and g fit in L2 together; then about four tasks a core are left. Intel Xeon
// (Sapphire Rapids class, 2 MiB L2), float, G = 32, interleaved runs, runs vs slab by slab, ms at
// 1 / 2 threads: (8, 128, 32, 32) M = 4096: 0.53 -> 0.48 / 0.27 -> 0.26; (2, 320, 64, 64) M = 40960:
// 1.38 -> 1.20 / 0.70 -> 0.63; (2, 512, 64, 64) M = 65536: 2.26 -> 2.11 / 1.13 -> 1.10; and past
// the bound, (2, 320, 96, 96) M = 92160: 3.43 -> 3.67 / 1.65 -> 1.67; (1, 512, 128, 128) M = 262144:
// 7.6 -> 7.6 / 3.15 -> 3.43. bfloat16 and float16 runs gained nothing (1.29 vs 1.22 ms bfloat16,
// (2, 320, 64, 64), one thread): their pass 1 converts and is less bound by memory.
// AMD EPYC Zen 4 (1 MiB L2, 8-way), the AVX2 path, float, one thread, runs of 8 vs slab by slab,
// cycles a vector (kernel alone, best of 9, three runs): runs lost at every M, 2-3% at M = 4096 and
// 8192, 5-7% at 10240 and 20480, 12-18% at 31360 and 40960 (onnxruntime, (2, 320, 64, 64), runs
// forced on -> this rule, medians of 5 interleaved rounds: 2.49 -> 2.41 ms at one thread over 13
// placements, worst / best 1.11 -> 1.05; 1.26 -> 1.23 at two over 3). So runs are taken only
// where L2 holds kRunsL2Bytes or more: the two CPUs measured fall on either side; why Zen 4 loses
// even where two slabs fill a tenth of its L2 is not known.
constexpr int64_t kRunsL2Bytes = int64_t{2} << 20;

static int64_t SlabsPerTask(DType T, int64_t NG, int64_t M) {
  static const int64_t l2_bytes = [] {
    const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return bytes > 0 ? static_cast<int64_t>(bytes) : int64_t{1} << 20;  // (unknown: 1 MiB)
  }();
  const SlabRuns rule = SlabRunsRule();
  if (rule == SlabRuns::kOff || (rule == SlabRuns::kByL2 && l2_bytes < kRunsL2Bytes)) return 1;
  if (T != DType::kFloat || 2 * 3 * M * static_cast<int64_t>(sizeof(float)) > l2_bytes) return 1;
  // the CPUs this process may run on (a container's cpuset, taskset), else every online one
  static const int64_t cores = [] {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<int64_t>(CPU_COUNT(&set));
    return static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return std::max<int64_t>(1, NG / (4 * cores));
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
  const bool channels_last = ChannelsLastKernel(layout);
  const int64_t per_task = channels_last ? 1 : SlabsPerTask(t_, layout.NG, layout.elements / layout.NG);
  const int64_t tasks = channels_last ? N : (layout.NG + per_task - 1) / per_task;
  const GroupNormGradArgs args{dy.data,          x.data,         dx.data,          mean_f.data(),
                               rstd_f.data(),    gamma_f.data(), beta_f.data(),    dbeta_nc.data(),
                               dgamma_nc.data(), N,              C,                layout.HxW,
                               G,                attributes_.swish_scale, channels_last, per_task};
  const GroupNormGradFn fn = Kernels().group_norm_swish_grad[static_cast<int>(t_)];
  auto task = [&](size_t t) { fn(args, static_cast<int64_t>(t)); };
  ASCEND_GRAD_RETURN_IF_ERROR(ParallelFor(context, static_cast<size_t>(tasks), task));

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
