// GroupNormSwishGrad's vector kernel: one task is a run of consecutive (n, group) slabs (NCHW) or
// one sample (NHWC).
//
//   xhat = (x - mean) * rstd,  z = xhat * gamma[c] + beta[c],  g = dy * swish'(z)
//   pass 1: g, and per (n, c) the sums  dbeta_nc = sum g,  dgamma_nc = sum g * xhat
//   c1 = sum_c gamma[c] dbeta_nc / M,  c2 = sum_c gamma[c] dgamma_nc / M   (M = C/G * HxW)
//   pass 2: dx = rstd * (g * gamma[c] - c1 - xhat * c2)
//
// A slab is small enough to stay in L2 between the passes (2 x 320 x 64 x 64, G = 32: 160 KiB of x),
// and NCHW keeps g from pass 1 in a per-thread buffer instead of paying exp twice. Every sum runs
// in a fixed order inside its slab, so results depend neither on the thread count nor on the runs.
#pragma once

#include <cmath>
#include <limits>
#include <new>
#include <type_traits>

#include "cpu/kernels.h"
#include "cpu/silu_backward_kernel.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

// The parameter gradients' sums (dbeta, dgamma; c1, c2 of dx) add each lane's float terms into
// double in short runs: kStepRun steps of kSteps vectors (NCHW: 16 terms a lane), kChannelRun
// positions (NHWC). A channel's sum over N x HxW terms can cancel to a small part of them
// (docs/ops.md#accuracy), and float partial sums over long runs then carry noise above the bound:
// (2, 2, 4097, 3) bfloat16, dbeta 3.0745 from terms summing 17754 in magnitude, was 1.3e-4 off
// through 4096-value float blocks (AVX2; NEON 9.5e-5; bound 7.4e-5); these runs: 1.2-2.7e-5. Runs of
// 8 terms cost about 5% of the kernel's time, these were within noise (docs/kernels.md).
constexpr int64_t kStepRun = 4;
constexpr int64_t kChannelRun = 32;
// A lone slab's pass 1 takes its rows in pieces of kSumBlock values.
constexpr int64_t kSumBlock = 4096;

// Pass 1 takes kSteps vectors a step (simd.h) and loads all their x and dy before it stores any g:
// no load waits on a store of g whose address it matches in the low 12 bits (dx just after x in the
// page, page_walk.h), and the steps' exp and divide chains overlap. Intel Xeon (Sapphire Rapids
// class), (2, 320, 64, 64) G = 32, interleaved runs at 7 placements, one vector a step -> four:
// float, one thread, 1.36-1.54 -> 1.32-1.37 ms; two threads 0.71-0.80 -> 0.68-0.71; bfloat16
// 1.41-1.47 -> 1.28-1.37; the AVX2 path, float, 2.08-2.31 -> 1.96-2.09. (Two a step: 1.34-1.48 ms,
// float, one thread.)

// One NCHW (n, group) slab between its passes. Pass 1 runs over pieces of a row (Pass1), then Finish
// takes c1 and c2; pass 2 (Pass2) is elementwise and may run over any pieces in any order.
template <typename T>
class Slab {
 public:
  // g: where g waits for pass 2 when T is not float (Cg * HxW floats); for float it waits in dx
  // itself (less cache)
  Slab(const GroupNormGradArgs& a, int64_t task, float* g)
      : a_(a),
        n_(task / a.G),
        Cg_(a.C / a.G),
        c0_((task % a.G) * Cg_),
        offset_((n_ * a.C + c0_) * a.HxW),
        dy_(static_cast<const T*>(a.dy) + offset_),
        x_(static_cast<const T*>(a.x) + offset_),
        dx_(static_cast<T*>(a.dx) + offset_),
        g_(std::is_same_v<T, float> ? reinterpret_cast<float*>(dx_) : g),
        mean_(Vec::Broadcast(a.mean[task])),
        rstd_(Vec::Broadcast(a.rstd[task])),
        // dx lying 1..1024 bytes after x in the page stalls the loads of x on the stores of dx
        // walking forward (page_walk.h): pass 2 then walks backward
        x_stalls_(ForwardStalls(PageGap(dx_, x_))) {}

  // g and the sums over row c's values [begin, end): pieces in order, each starting at a multiple of
  // kSteps vectors from the row's start. Every lane's sums then take its values in the same steps
  // and order whatever the pieces: the results are those of one call per row.
  void Pass1(int64_t c, int64_t begin, int64_t end) {
    const int64_t HxW = a_.HxW;
    if (begin == 0) {
      acc_dbeta_ = acc_dgamma_ = DoubleLanes();
      run_dbeta_ = run_dgamma_ = Vec::Zero();
    }
    // u = swish_scale * z = xhat * (b gamma) + b beta: one FMA
    const Vec gamma = Vec::Broadcast(a_.swish_scale * a_.gamma[c0_ + c]);
    const Vec beta = Vec::Broadcast(a_.swish_scale * a_.beta[c0_ + c]);
    const Vec mean = mean_, rstd = rstd_;
    const T* dy_row = dy_ + c * HxW;
    const T* x_row = x_ + c * HxW;
    float* g_row = g_ + c * HxW;
    constexpr int64_t kSpan = kSteps * static_cast<int64_t>(kLanes);
    DoubleLanes acc_dbeta = acc_dbeta_, acc_dgamma = acc_dgamma_;
    Vec run_dbeta = run_dbeta_, run_dgamma = run_dgamma_;
    // one step: kSteps vectors from i, their terms added to the float run
    auto step = [&](int64_t i) __attribute__((always_inline)) {
      Vec xhat[kSteps], dyv[kSteps], g[kSteps];
      for (int k = 0; k < kSteps; ++k) xhat[k] = Vec::Load(x_row + i + k * kLanes);
      for (int k = 0; k < kSteps; ++k) dyv[k] = Vec::Load(dy_row + i + k * kLanes);
      for (int k = 0; k < kSteps; ++k) xhat[k] = (xhat[k] - mean) * rstd;
      for (int k = 0; k < kSteps; ++k) g[k] = SwishGrad(dyv[k], Fma(xhat[k], gamma, beta));
      for (int k = 0; k < kSteps; ++k) g[k].Store(g_row + i + k * kLanes);
      for (int k = 0; k < kSteps; ++k) {  // each lane's sums take its values in address order
        run_dbeta = run_dbeta + g[k];
        run_dgamma = Fma(g[k], xhat[k], run_dgamma);
      }
    };
    int64_t i = begin;
    for (; i + kStepRun * kSpan <= end; i += kStepRun * kSpan) {  // whole runs (pieces start at one)
      for (int64_t s = 0; s < kStepRun; ++s) step(i + s * kSpan);
      acc_dbeta.Add(run_dbeta);
      acc_dgamma.Add(run_dgamma);
      run_dbeta = run_dgamma = Vec::Zero();
    }
    for (; i + kSpan <= end; i += kSpan) step(i);  // (the row's end)
    for (; i + static_cast<int64_t>(kLanes) <= end; i += kLanes) {
      const Vec xhat = (Vec::Load(x_row + i) - mean) * rstd;
      const Vec g = SwishGrad(Vec::Load(dy_row + i), Fma(xhat, gamma, beta));
      g.Store(g_row + i);
      run_dbeta = run_dbeta + g;
      run_dgamma = Fma(g, xhat, run_dgamma);
    }
    if (i < end) {
      const size_t count = static_cast<size_t>(end - i);
      const Vec xhat = (LoadPartial(x_row + i, count) - mean) * rstd;
      const Vec g = KeepFirst(SwishGrad(LoadPartial(dy_row + i, count), Fma(xhat, gamma, beta)), count);
      StorePartial(g, g_row + i, count);
      run_dbeta = run_dbeta + g;
      run_dgamma = Fma(g, KeepFirst(xhat, count), run_dgamma);
    }
    acc_dbeta_ = acc_dbeta;
    acc_dgamma_ = acc_dgamma;
    run_dbeta_ = run_dbeta;
    run_dgamma_ = run_dgamma;
    if (end != HxW) return;
    acc_dbeta.Add(run_dbeta);  // (the row's last run: up to kStepRun steps and the tail)
    acc_dgamma.Add(run_dgamma);
    double row_dbeta = 0.0, row_dgamma = 0.0;
    acc_dbeta.AddTo(&row_dbeta);
    acc_dgamma.AddTo(&row_dgamma);
    a_.dbeta_nc[n_ * a_.C + c0_ + c] = static_cast<float>(row_dbeta);
    a_.dgamma_nc[n_ * a_.C + c0_ + c] = static_cast<float>(row_dgamma);
    sum_dbeta_ += a_.gamma[c0_ + c] * row_dbeta;
    sum_dgamma_ += a_.gamma[c0_ + c] * row_dgamma;
  }

  // After pass 1 over every row: c1 and c2. False when they are NaN: the slab is then written as
  // NaN and takes no pass 2.
  bool Finish() {
    const double M = static_cast<double>(Cg_ * a_.HxW);
    const float c1 = static_cast<float>(sum_dbeta_ / M), c2 = static_cast<float>(sum_dgamma_ / M);
    // c1 and c2 enter every dx: a NaN there makes the slab NaN, written as one quiet NaN. Where
    // several NaN operands meet, x86 returns the one in a given operand position, which the compiler
    // assigns per code site: the forward and backward walks would give NaNs of different signs.
    if (std::isnan(c1) || std::isnan(c2)) {
      FillFloats(DTypeOf<T>(), std::numeric_limits<float>::quiet_NaN(), static_cast<size_t>(Cg_ * a_.HxW), dx_);
      return false;
    }
    c1_ = Vec::Broadcast(c1);
    c2_ = Vec::Broadcast(c2);
    return true;
  }

  // dx over row c's values [begin, end), begin a multiple of kLanes:
  // dx = rstd * ((g * gamma - c1) - xhat * c2), in the formula's own order: where the math gives 0
  // (a group of one element: g * gamma == c1, xhat == 0) the result is exactly 0
  void Pass2(int64_t c, int64_t begin, int64_t end) const {
    const Vec gamma = Vec::Broadcast(a_.gamma[c0_ + c]);
    const Vec mean = mean_, rstd = rstd_, c1 = c1_, c2 = c2_;
    const T* x_row = x_ + c * a_.HxW + begin;
    const float* g_row = g_ + c * a_.HxW + begin;
    T* dx_row = dx_ + c * a_.HxW + begin;
    WalkRow(
        end - begin, x_stalls_,
        [&](int64_t i) {
          const Vec xhat = (Vec::Load(x_row + i) - mean) * rstd;
          (rstd * FnMadd(xhat, c2, Vec::Load(g_row + i) * gamma - c1)).Store(dx_row + i);
        },
        [&](int64_t i, size_t count) {
          const Vec xhat = (LoadPartial(x_row + i, count) - mean) * rstd;
          StorePartial(rstd * FnMadd(xhat, c2, LoadPartial(g_row + i, count) * gamma - c1), dx_row + i, count);
        });
  }

  // pass 2 over the whole slab, rows in reverse when walking backward
  void Pass2() const {
    for (int64_t k = 0; k < Cg_; ++k) Pass2(x_stalls_ ? Cg_ - 1 - k : k, 0, a_.HxW);
  }

 private:
  const GroupNormGradArgs& a_;
  const int64_t n_, Cg_, c0_, offset_;
  const T* dy_;
  const T* x_;
  T* dx_;
  float* g_;
  const Vec mean_, rstd_;
  const bool x_stalls_;
  DoubleLanes acc_dbeta_, acc_dgamma_;                      // the row's sums so far
  Vec run_dbeta_ = Vec::Zero(), run_dgamma_ = Vec::Zero();  // and the float run's
  double sum_dbeta_ = 0.0, sum_dgamma_ = 0.0;  // sum_c gamma[c] * (per-channel sums)
  Vec c1_ = Vec::Zero(), c2_ = Vec::Zero();
};

// Pass 2 of one slab is L2-bound work, pass 1 waits on memory: a run of consecutive slabs runs each
// slab's pass 2 piece by piece just before the next slab's pass 1 over the same rows and values, so
// only the last slab's pass 2 runs alone. Every slab's arithmetic is that of the slab alone: results
// do not depend on how slabs are grouped. (Where runs pay, and where they cost, as on AMD Zen 4:
// SlabsPerTask in group_norm_swish_grad.cc.)
constexpr int64_t kPiece = 512;  // a multiple of kSteps vectors
static_assert(kPiece % (kStepRun * kSteps * static_cast<int64_t>(kLanes)) == 0 &&
              kSumBlock % (kStepRun * kSteps * static_cast<int64_t>(kLanes)) == 0,
              "pieces keep the sums' runs");

template <typename T>
void GroupNormGradSlabs(const GroupNormGradArgs& a, int64_t first, int64_t count) {
  const int64_t Cg = a.C / a.G, HxW = a.HxW, M = Cg * HxW;
  // g of two slabs at once, when it does not wait in dx
  float* scratch = std::is_same_v<T, float> ? nullptr : Scratch(static_cast<size_t>((count > 1 ? 2 : 1) * M), 0);
  const int64_t piece = count > 1 ? kPiece : kSumBlock;
  alignas(Slab<T>) unsigned char storage[2][sizeof(Slab<T>)];
  Slab<T>* previous = nullptr;  // the slab whose pass 2 is pending
  for (int64_t s = 0; s < count; ++s) {
    Slab<T>* slab = new (storage[s % 2]) Slab<T>(a, first + s, scratch == nullptr ? nullptr : scratch + (s % 2) * M);
    for (int64_t c = 0; c < Cg; ++c) {
      for (int64_t begin = 0; begin < HxW; begin += piece) {
        const int64_t end = begin + piece < HxW ? begin + piece : HxW;
        if (previous != nullptr) previous->Pass2(c, begin, end);
        slab->Pass1(c, begin, end);
      }
    }
    previous = slab->Finish() ? slab : nullptr;
  }
  if (previous != nullptr) previous->Pass2();
}

// NHWC: positions are rows of C contiguous channels; vectors run along C with per-channel mean,
// rstd and coefficients. A whole sample is too big for L2: g waits for pass 2 in memory, so pass 2
// pays no exp - float keeps it in dx ((2, 64, 64, 320) G = 32, one thread, Intel Xeon, 5
// placements, 2.63-2.80 -> 1.96-2.05 ms), the half types in a float scratch of the sample's size
// up to SampleScratchBytes() (a buffer each pool thread keeps; kSampleScratchBytes in kernels.h);
// past it they compute g again in pass 2, with the same arithmetic (the same bits).

// lanes of the channel vector starting at channel c of C (the last one may be partial)
inline size_t ChannelLanes(int64_t C, int64_t c) {
  return static_cast<size_t>(C - c < static_cast<int64_t>(kLanes) ? C - c : kLanes);
}

// Over the channel vectors of one position: steps(c) for kSteps whole vectors from c while they
// last, then one(c, count) for each vector left (the last may be partial)
template <typename Steps, typename One>
void ChannelVectors(int64_t C, Steps steps, One one) {
  constexpr int64_t kSpan = kSteps * static_cast<int64_t>(kLanes);
  int64_t c = 0;
  for (; c + kSpan <= C; c += kSpan) steps(c);
  for (; c < C; c += kLanes) one(c, ChannelLanes(C, c));
}

template <typename T>
void GroupNormGradSample(const GroupNormGradArgs& a, int64_t n) {
  const int64_t C = a.C, Cg = a.C / a.G, HxW = a.HxW;
  const T* dy = static_cast<const T*>(a.dy) + n * HxW * C;
  const T* x = static_cast<const T*>(a.x) + n * HxW * C;
  T* dx = static_cast<T*>(a.dx) + n * HxW * C;
  // per-channel tables: mean, rstd; float sums of kChannelRun positions; then the pass-2
  // coefficients (a vector's worth of padding: a tail load may read past the last table, its extra
  // lanes are dropped)
  float* mean_c = Scratch(static_cast<size_t>(6 * C) + kLanes, 1);
  float* rstd_c = mean_c + C;
  float* block_dbeta = rstd_c + C;
  float* block_dgamma = block_dbeta + C;
  float* c1_c = block_dgamma + C;  // the (n, group) coefficients, per channel
  float* c2_c = c1_c + C;
  double* dbeta = Scratch<double>(static_cast<size_t>(2 * C), 2);
  double* dgamma = dbeta + C;
  for (int64_t c = 0; c < 2 * C; ++c) dbeta[c] = 0.0;
  for (int64_t c = 0; c < C; ++c) {
    mean_c[c] = a.mean[n * a.G + c / Cg];
    rstd_c[c] = a.rstd[n * a.G + c / Cg];
  }
  // where g waits between the passes, or nullptr: computed again
  float* g_kept = std::is_same_v<T, float> ? reinterpret_cast<float*>(dx)
                  : HxW * C <= SampleScratchBytes() / static_cast<int64_t>(sizeof(float))
                      ? Scratch(static_cast<size_t>(HxW * C), 0)
                      : nullptr;
  const Vec scale = Vec::Broadcast(a.swish_scale);
  // xhat for channels [c, c + count) of one position
  auto xhat_at = [&](const T* x_row, int64_t c, size_t count) {
    return (LoadUpTo(x_row + c, count) - Vec::Load(mean_c + c)) * Vec::Load(rstd_c + c);
  };
  // g and xhat for channels [c, c + count) of one position
  auto terms = [&](const T* dy_row, const T* x_row, int64_t c, size_t count, Vec* g, Vec* xhat) {
    const Vec dyv = LoadUpTo(dy_row + c, count);
    const Vec gamma = LoadUpTo(a.gamma + c, count), beta = LoadUpTo(a.beta + c, count);
    *xhat = xhat_at(x_row, c, count);
    *g = SwishGrad(dyv, scale * Fma(*xhat, gamma, beta));  // u = swish_scale * z
  };

  for (int64_t start = 0; start < HxW; start += kChannelRun) {  // (kSumBlock's comment)
    const int64_t end = start + kChannelRun < HxW ? start + kChannelRun : HxW;
    for (int64_t c = 0; c < C; ++c) block_dbeta[c] = block_dgamma[c] = 0.0f;
    for (int64_t p = start; p < end; ++p) {
      for (int64_t c = 0; c < C; c += kLanes) {
        const size_t count = ChannelLanes(C, c);
        Vec g, xhat;
        terms(dy + p * C, x + p * C, c, count, &g, &xhat);
        if (count < kLanes) {
          g = KeepFirst(g, count);
          xhat = KeepFirst(xhat, count);
        }
        if (g_kept != nullptr) StoreUpTo(g, g_kept + p * C + c, count);
        StoreUpTo(LoadUpTo(block_dbeta + c, count) + g, block_dbeta + c, count);
        StoreUpTo(Fma(g, xhat, LoadUpTo(block_dgamma + c, count)), block_dgamma + c, count);
      }
    }
    for (int64_t c = 0; c < C; c += kLanes) {  // the run's float sums into double
      const size_t count = ChannelLanes(C, c);
      AddToDoubles(LoadUpTo(block_dbeta + c, count), dbeta + c, count);
      AddToDoubles(LoadUpTo(block_dgamma + c, count), dgamma + c, count);
    }
  }

  const double M = static_cast<double>(Cg * HxW);
  for (int64_t grp = 0; grp < a.G; ++grp) {
    double sum_dbeta = 0.0, sum_dgamma = 0.0;
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
      a.dbeta_nc[n * C + c] = static_cast<float>(dbeta[c]);
      a.dgamma_nc[n * C + c] = static_cast<float>(dgamma[c]);
      sum_dbeta += a.gamma[c] * dbeta[c];
      sum_dgamma += a.gamma[c] * dgamma[c];
    }
    const float c1 = static_cast<float>(sum_dbeta / M), c2 = static_cast<float>(sum_dgamma / M);
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
      c1_c[c] = c1;
      c2_c[c] = c2;
    }
  }

  for (int64_t p = 0; p < HxW; ++p) {
    for (int64_t c = 0; c < C; c += kLanes) {
      const size_t count = ChannelLanes(C, c);
      Vec g, xhat;
      if (g_kept != nullptr) {
        g = LoadUpTo(g_kept + p * C + c, count);
        xhat = xhat_at(x + p * C, c, count);
      } else {
        terms(dy + p * C, x + p * C, c, count, &g, &xhat);
      }
      const Vec gamma = LoadUpTo(a.gamma + c, count);
      const Vec out = Vec::Load(rstd_c + c) * FnMadd(xhat, Vec::Load(c2_c + c), g * gamma - Vec::Load(c1_c + c));
      StoreUpTo(out, dx + p * C + c, count);
    }
  }
}

template <typename T>
void GroupNormSwishGrad(const GroupNormGradArgs& args, int64_t task) {
  if (args.channels_last) {
    GroupNormGradSample<T>(args, task);
  } else {
    const int64_t first = task * args.slabs_per_task, NG = args.N * args.G;
    GroupNormGradSlabs<T>(args, first, first + args.slabs_per_task < NG ? args.slabs_per_task : NG - first);
  }
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
