// The vectorised kernels, one table per instruction set (AVX-512, AVX2, portable), chosen once when
// the library is registered: the same binary runs on any x86-64 CPU and uses the widest vectors it has.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace ascend_grad {

// Outputs from 32 MiB on bypass the caches (measured: 16M float SiluBackward 16.3 -> 12.7 ms on
// one core); smaller ones stay cached for the next op to read.
constexpr int64_t kStreamBytes = int64_t{32} << 20;
// NHWC half-type samples up to 16 MiB of float keep g between GroupNormSwishGrad's passes
constexpr int64_t kSampleScratchBytes = int64_t{16} << 20;
// kStreamBytes, or ASCEND_GRAD_STREAM_BYTES=<bytes> (chosen in SelectKernels): for tests that take
// the streamed paths on small arrays (the emulated aarch64 runs, tests/aarch64)
int64_t StreamBytes();

// Up to how many bytes NHWC GroupNormSwishGrad keeps g of a half-type sample in a float scratch
// (group_norm_swish_grad_kernel.h): kSampleScratchBytes, or
// ASCEND_GRAD_SAMPLE_SCRATCH_BYTES=<bytes> (chosen in SelectKernels), for tests that take both sides
// on small samples (the emulated aarch64 runs, tests/aarch64)
int64_t SampleScratchBytes();

// out[i] = f(dy[i], x[i]) for i < n; an input marked broadcast is one value used for every i.
// stream: the output is far bigger than the caches, write it around them (non-temporal stores).
using ElementwiseFn = void (*)(const void* dy, bool dy_broadcast, const void* x, bool x_broadcast, void* out, size_t n,
                               bool stream);

// GroupNormSwishGrad over one task: slabs_per_task consecutive (n, group) slabs for NCHW (fewer in
// the last task), one sample n for NHWC.
// x, dy, dx have the op's T; everything else is float (the glue converts U).
struct GroupNormGradArgs {
  const void* dy;
  const void* x;
  void* dx;
  const float* mean;   // (N, G)
  const float* rstd;   // (N, G)
  const float* gamma;  // (C)
  const float* beta;   // (C)
  float* dbeta_nc;     // (N, C) out: sum over spatial of g
  float* dgamma_nc;    // (N, C) out: sum over spatial of g * xhat
  int64_t N, C, HxW, G;
  float swish_scale;
  bool channels_last;
  int64_t slabs_per_task;
};
using GroupNormGradFn = void (*)(const GroupNormGradArgs& args, int64_t task);

// GroupNormSwish over one task (same split); mean and rstd come out as float (N, G).
struct GroupNormArgs {
  const void* x;
  void* y;
  const float* gamma;
  const float* beta;
  float* mean;
  float* rstd;
  int64_t N, C, HxW, G;
  float eps;
  float swish_scale;
  bool activate_swish;
  bool channels_last;
  bool stream;  // y of kStreamBytes or more (NCHW): written around the caches (non-temporal stores)
};
using GroupNormFn = void (*)(const GroupNormArgs& args, int64_t task);

struct KernelTable {
  const char* isa;
  ElementwiseFn silu_backward[kNumDTypes];              // by T
  ElementwiseFn mish_backward[kNumDTypes][kNumDTypes];  // by (gradOutput, self); output promoted
  GroupNormGradFn group_norm_swish_grad[kNumDTypes];    // by T
  GroupNormFn group_norm_swish[kNumDTypes];             // by T
};

// Per-thread work space of at least `bytes` (slot 0..3), grown on first use and then reused: no
// allocation in the hot loops. Defined in a file compiled without instruction-set flags, so the
// kernels use no standard-library template of their own.
void* ThreadScratch(size_t bytes, int slot);

// Choose the table: the widest instruction set the CPU has, or
// ASCEND_GRAD_ISA=avx512bf16|avx512|avx2|generic (avx512bf16: AVX-512 plus the bfloat16 conversion).
void SelectKernels();
const KernelTable& Kernels();

// Whether streamed (non-temporal) outputs pick their walk from the tensors' places in the page
// like cached ones (page_walk.h), or always walk forward: by gap on every CPU but Intel's, or as
// ASCEND_GRAD_STREAM_WALK=gap|forward says. Chosen in SelectKernels.
bool StreamsWalkByGap();

// Whether float NCHW GroupNormSwishGrad tasks may take runs of slabs (group_norm_swish_grad.cc):
// by the L2 size, or as ASCEND_GRAD_SLAB_RUNS=on|off says (on: wherever two slabs fit in L2, what
// the tests take on every CPU). Chosen in SelectKernels.
enum class SlabRuns { kByL2, kOn, kOff };
SlabRuns SlabRunsRule();

}  // namespace ascend_grad
