// GroupNormSwish's vector kernel (the forward that produces mean and rstd for the backward).
// One task is one (n, group) slab (NCHW) or one sample (NHWC), as in the backward.
//
//   mean, then var = mean((x - mean)^2) in a second pass (no cancellation when |mean| >> std),
//   rstd = 1 / sqrt(var + eps),  z = (x - mean) * rstd * gamma[c] + beta[c],  y = z * sigmoid(b z)
//
// Float arithmetic keeps x - mean's digits only if no summand is rounded the same way many times:
// subtracting a constant that is finer than x's own grid (x - 6.5e-4 for x ~ N(0, 1)) rounds every
// x of a binade alike, a bias of up to ulp(x) / 2 in the mean; float sums of x itself lose the
// digits of x - mean when |mean| >> std (x ~ N(1000, 1)). So:
//   shift  = the group's first value, cut to 16 significant bits (a coarse grid: x - shift is exact
//            for every x of up to 2^8 |shift|, and unbiased below |shift| / 2);
//   mean0  = shift + the mean of x - shift over a sample (8 vectors along each channel's row);
//   centre = mean0 on shift's grid (x - centre exact as above);
//   d = x - centre: mean = centre + sum(d) / M, sum (x - mean)^2 = sum d^2 - (sum d)^2 / M, in
//   one pass (the corrected two-pass algorithm), again around mean on shift's grid when the
//   sample missed the mean by more than the spread (the subtraction would cancel by over 2x);
//   y from x - mean as float hi + lo parts: (x - hi) - lo, exact for x near the mean.
// (Sampling instead of a first pass over the slab: (2, 320, 64, 64), G = 32, 1 thread, Intel Xeon
// AVX-512, 1.31-1.36 -> 1.17-1.19 ms; the same errors against float64.)
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/group_norm_swish_grad_kernel.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

// z sigmoid(k z) as (z b) q: z b is formed while the divide runs (see SigmoidOf)
ASCEND_GRAD_MATH Vec SwishOf(Vec z, Vec u) {
  const SigmoidParts sig = SigmoidOf(u);
  return (z * sig.b()) * sig.q;
}

ASCEND_GRAD_MATH Vec Swish(Vec z, Vec scale, bool activate) { return activate ? SwishOf(z, scale * z) : z; }

// x[0] cut to 16 significant bits, or 0 when it is not finite (an infinity would turn every
// shifted value into NaN where the mean is an infinity)
template <typename T>
float ShiftOf(const T* x) {
  const float first = ReduceAdd(KeepFirst(LoadPartial(x, 1), 1));
  if (!std::isfinite(first)) return 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &first, sizeof bits);
  bits &= ~uint32_t{0x7F};  // 23 - 7 = 16 fraction bits kept
  float cut;
  std::memcpy(&cut, &bits, sizeof cut);
  return cut;
}

// mean0 rounded to a multiple of shift's last bit (0 without a shift)
inline float CentreNear(double mean0, float shift) {
  if (shift == 0.0f || !std::isfinite(mean0)) return 0.0f;
  const double grid = std::ldexp(1.0, std::ilogb(shift) - 16);
  return static_cast<float>(std::nearbyint(mean0 / grid) * grid);
}

// Float squares of x - mean overflow above 1.8e19 and underflow below 1e-19 (x ~ 2^-100 N(0, 1)
// gave var 0, rstd inf). A group whose float sum of squares leaves [kTinySquares * M, inf) is
// summed again in double, scalar (rare) - unless all its x - mean are 0 (a constant group, which
// is common: zero-initialised layers), found by a vector sum of |x - mean|.
constexpr double kTinySquares = 1e-30;

inline bool SquaresNeedDouble(double squares, double M, double mean) {
  return std::isfinite(mean) && !(squares >= kTinySquares * M && squares <= 1e300);
}

// sum of (x - mean)^2 in double over rows [0, rows) of width values at x + row * stride
template <typename T>
double SquaresInDouble(const T* x, int64_t rows, int64_t width, int64_t stride, double mean) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < width; ++i) {
      const double d = static_cast<double>(ReduceAdd(KeepFirst(LoadPartial(x + r * stride + i, 1), 1))) - mean;
      total += d * d;
    }
  }
  return total;
}

// sum over row[0, n) of f(v) for the row's values v, in float blocks flushed into double. Two
// accumulators take alternate vectors: one add chain would wait its latency on every vector.
template <typename T, typename F>
double RowSum(const T* row, int64_t n, F f) {
  constexpr int64_t kStep = static_cast<int64_t>(kLanes);
  double total = 0.0;
  for (int64_t start = 0; start < n; start += kSumBlock) {
    const int64_t end = start + kSumBlock < n ? start + kSumBlock : n;
    Vec acc0 = Vec::Zero(), acc1 = Vec::Zero();
    int64_t i = start;
    for (; i + 2 * kStep <= end; i += 2 * kStep) {
      acc0 = acc0 + f(Vec::Load(row + i));
      acc1 = acc1 + f(Vec::Load(row + i + kStep));
    }
    if (i + kStep <= end) {
      acc0 = acc0 + f(Vec::Load(row + i));
      i += kStep;
    }
    if (i < end) acc1 = acc1 + KeepFirst(f(LoadPartial(row + i, static_cast<size_t>(end - i))), static_cast<size_t>(end - i));
    total += ReduceAdd(acc0 + acc1);
  }
  return total;
}

// with d = centre(v) over row[0, n): *sum += sum of d, *squares += sum of d^2 in one pass. The
// squares in float blocks flushed into double; the sum of d in double lanes: it is the mean's
// last digits, and a zero-mean group's mean is itself small (float sums gave 3e-5 relative error
// at M = 131072). Alternate vectors go to two sets of sums (as in RowSum).
template <typename T, typename F>
void RowSums(const T* row, int64_t n, F centre, double* sum, double* squares) {
  constexpr int64_t kStep = static_cast<int64_t>(kLanes);
  DoubleLanes sum_lanes[2];
  for (int64_t start = 0; start < n; start += kSumBlock) {
    const int64_t end = start + kSumBlock < n ? start + kSumBlock : n;
    Vec acc2[2] = {Vec::Zero(), Vec::Zero()};
    auto add = [&](int k, Vec d) {
      sum_lanes[k].Add(d);
      acc2[k] = Fma(d, d, acc2[k]);
    };
    int64_t i = start;
    for (; i + 2 * kStep <= end; i += 2 * kStep) {
      add(0, centre(Vec::Load(row + i)));
      add(1, centre(Vec::Load(row + i + kStep)));
    }
    if (i + kStep <= end) {
      add(0, centre(Vec::Load(row + i)));
      i += kStep;
    }
    if (i < end) {
      const size_t count = static_cast<size_t>(end - i);
      add(1, KeepFirst(centre(LoadPartial(row + i, count)), count));
    }
    *squares += ReduceAdd(acc2[0] + acc2[1]);
  }
  sum_lanes[0].AddTo(sum);
  sum_lanes[1].AddTo(sum);
}

// vectors per channel row that estimate a slab's mean before its sums (NCHW); positions that
// estimate a sample's (NHWC: every instruction set takes the same ones)
constexpr int64_t kSamples = 8;
constexpr int64_t kSamplePositions = 128;

template <typename T>
void GroupNormSlab(const GroupNormArgs& a, int64_t task) {
  const int64_t n = task / a.G, Cg = a.C / a.G, c0 = (task % a.G) * Cg, HxW = a.HxW;
  const int64_t offset = (n * a.C + c0) * HxW;
  const T* x = static_cast<const T*>(a.x) + offset;
  T* y = static_cast<T*>(a.y) + offset;
  const double M = static_cast<double>(Cg * HxW);

  const float shift = HxW > 0 ? ShiftOf(x) : 0.0f;
  const Vec shift_v = Vec::Broadcast(shift);
  // The centre starts as the mean of a sample: kSamples vectors spread along each channel's row (a
  // short row whole), not a pass over the slab.
  double sample = 0.0;
  int64_t sampled = 0;
  for (int64_t c = 0; c < Cg; ++c) {
    const T* row = x + c * HxW;
    if (HxW < kSamples * static_cast<int64_t>(kLanes)) {
      sample += RowSum(row, HxW, [&](Vec v) { return v - shift_v; });
      sampled += HxW;
      continue;
    }
    Vec acc = Vec::Zero();
    for (int64_t k = 0; k < kSamples; ++k) acc = acc + (Vec::Load(row + k * (HxW - static_cast<int64_t>(kLanes)) / (kSamples - 1)) - shift_v);
    sample += ReduceAdd(acc);
    sampled += kSamples * static_cast<int64_t>(kLanes);
  }
  float centre = CentreNear(static_cast<double>(shift) + (sampled > 0 ? sample / static_cast<double>(sampled) : 0.0), shift);
  double sum_d = 0.0, squares = 0.0;
  auto sums = [&] {
    const Vec centre_v = Vec::Broadcast(centre);
    sum_d = squares = 0.0;
    for (int64_t c = 0; c < Cg; ++c) RowSums(x + c * HxW, HxW, [&](Vec v) { return v - centre_v; }, &sum_d, &squares);
  };
  sums();
  // sum d^2 - (sum d)^2 / M cancels by the factor 1 + (mean - centre)^2 / var: past 2 (the channels'
  // means lie apart by more than the group's spread), sum again around the slab's own mean
  const double off = sum_d / M;
  if (!(off * off * M <= squares - sum_d * off)) {
    centre = CentreNear(static_cast<double>(centre) + off, shift);
    sums();
  }
  const double mean_d = static_cast<double>(centre) + sum_d / M;
  squares -= sum_d * sum_d / M;
  if (squares < 0.0) squares = 0.0;  // rounding; NaN stays NaN
  const float mean = static_cast<float>(mean_d);
  const Vec hi = Vec::Broadcast(mean), lo = Vec::Broadcast(static_cast<float>(mean_d - mean));
  auto centred = [&](Vec v) { return (v - hi) - lo; };
  if (SquaresNeedDouble(squares, M, mean_d)) {
    double absolute = 0.0;
    for (int64_t c = 0; c < Cg; ++c) absolute += RowSum(x + c * HxW, HxW, [&](Vec v) { return Abs(centred(v)); });
    squares = absolute == 0.0 ? 0.0 : SquaresInDouble(x, Cg, HxW, HxW, mean_d);
  }
  const float rstd = static_cast<float>(1.0 / std::sqrt(squares / M + static_cast<double>(a.eps)));
  a.mean[task] = mean;
  a.rstd[task] = rstd;
  if (std::isnan(mean) || std::isnan(rstd)) {  // both enter every y: one quiet NaN (as in the grad)
    return FillFloats(DTypeOf<T>(), std::numeric_limits<float>::quiet_NaN(), static_cast<size_t>(Cg * HxW), y);
  }

  // the next slab (the next task, which this thread usually runs next) starts loading from memory
  // while this one computes its swish: the first pass over a slab waits on memory, this one on math
  // (the last task prefetches its own slab, already in cache: no test in the loop)
  const T* next = task + 1 < a.N * a.G ? x + Cg * HxW : x;
  // y lying just after x in the page stalls x's loads on a forward walk: walk back (page_walk.h).
  // Each row's whole vectors start at a vector boundary of y (its values before that go as a
  // partial vector), so no store splits a line: a backward walk that split them ran 1.5x slower
  // without the swish ((2, 320, 64, 64) float, one thread, Intel Xeon, activate_swish 0, y 48
  // bytes after x: 1.45-1.53 ms, else 0.96-0.99), and 2-3% slower with it (mean over 13 placements).
  // A y of kStreamBytes or more goes around the caches, as the elementwise outputs do. Its walk
  // stays by gap on every CPU: the elementwise kernels' streams walk forward on Intel, where their
  // inputs come from memory, but x comes from L2 here ((1, 512, 128, 128) float, one thread, y 48
  // bytes after x: 3.83-3.90 ms by gap, 4.35-4.52 forward); backward only where a store fills half
  // a line (kStreamsBackward).
  size_t head = 0;
  const bool backward = ForwardStalls(PageGap(y, x));
  const bool stream = a.stream && StreamHead(y, &head) && (!backward || kStreamsBackward<T>);
  auto rows = [&](auto activation, auto streamed) {
    for (int64_t k = 0; k < Cg; ++k) {
      const int64_t c = backward ? Cg - 1 - k : k;
      const Vec weight = Vec::Broadcast(rstd * a.gamma[c0 + c]), beta = Vec::Broadcast(a.beta[c0 + c]);
      const T* x_row = x + c * HxW;
      T* y_row = y + c * HxW;
      StreamHead(y_row, &head);
      // k vectors from i: loaded before any is stored (a load the compiler cannot prove apart from
      // a store stays after it), so their dependency chains can interleave
      auto vectors = [&](int64_t i, auto steps) {
        constexpr int k = decltype(steps)::value;
        Vec out[k];
        for (int j = 0; j < k; ++j) __builtin_prefetch(next + c * HxW + i + j * kLanes, 0, 2);
        for (int j = 0; j < k; ++j) out[j] = Vec::Load(x_row + i + j * kLanes);
        for (int j = 0; j < k; ++j) out[j] = activation(Fma(centred(out[j]), weight, beta));
        for (int j = 0; j < k; ++j) {
          if constexpr (streamed) {
            out[j].Stream(y_row + i + j * kLanes);
          } else {
            out[j].Store(y_row + i + j * kLanes);
          }
        }
      };
      WalkRowSteps<kSteps>(
          HxW, backward, [&](int64_t i) { vectors(i, std::integral_constant<int, kSteps>{}); },
          [&](int64_t i) { vectors(i, std::integral_constant<int, 1>{}); },
          [&](int64_t i, size_t count) {
            StorePartial(activation(Fma(centred(LoadPartial(x_row + i, count)), weight, beta)), y_row + i, count);
          },
          static_cast<int64_t>(head));
    }
    if constexpr (streamed) StreamFence();
  };
  // the activation chosen once per slab: the swish loop's time goes with its count of vector ops
  // and the length of its dependency chain, and scale 1 (SiLU, the usual case) needs no multiply
  const Vec scale = Vec::Broadcast(a.swish_scale);
  auto stores = [&](auto streamed) {
    if (!a.activate_swish) {
      rows([](Vec z) { return z; }, streamed);
    } else if (a.swish_scale == 1.0f) {
      rows([](Vec z) { return SwishOf(z, z); }, streamed);
    } else {
      rows([&](Vec z) { return SwishOf(z, scale * z); }, streamed);
    }
  };
  if (stream) {
    stores(std::true_type{});
  } else {
    stores(std::false_type{});
  }
}

template <typename T>
void GroupNormSample(const GroupNormArgs& a, int64_t n) {
  const int64_t C = a.C, Cg = a.C / a.G, HxW = a.HxW;
  const T* x = static_cast<const T*>(a.x) + n * HxW * C;
  T* y = static_cast<T*>(a.y) + n * HxW * C;
  float* mean_c = Scratch(static_cast<size_t>(6 * C) + kLanes, 1);  // mean as hi + lo per channel
  float* mean_lo_c = mean_c + C;
  float* shift_c = mean_lo_c + C;  // each channel's first value (see ShiftOf)
  float* block = shift_c + C;
  float* block2 = block + C;
  float* weight_c = block2 + C;
  double* sums = Scratch<double>(static_cast<size_t>(2 * C + a.G), 2);
  double* sums2 = sums + C;
  double* squares = sums2 + C;  // per group
  const double M = static_cast<double>(Cg * HxW);

  // each(v, c, count) for every channel vector [c, c + count) of every position, in blocks of
  // kSumBlock / 16 positions with flush() after each (float partial sums stay short)
  auto by_blocks = [&](auto each, auto flush) {
    for (int64_t start = 0; start < HxW; start += kSumBlock / 16) {
      const int64_t end = start + kSumBlock / 16 < HxW ? start + kSumBlock / 16 : HxW;
      for (int64_t p = start; p < end; ++p) {
        for (int64_t c = 0; c < C; c += kLanes) {
          const size_t count = ChannelLanes(C, c);
          each(LoadUpTo(x + p * C + c, count), c, count);
        }
      }
      flush();
    }
  };
  // per-channel sums of f(x) over the positions, float blocks flushed into double
  auto channel_sums = [&](auto f) {
    for (int64_t c = 0; c < C; ++c) sums[c] = block[c] = 0.0f;
    by_blocks([&](Vec v, int64_t c, size_t count) { StoreUpTo(LoadUpTo(block + c, count) + f(v, c), block + c, count); },
              [&] {
                for (int64_t c = 0; c < C; ++c) {
                  sums[c] += block[c];
                  block[c] = 0.0f;
                }
              });
  };
  // per-channel sums of d = centre(x) (in double, as in RowSums) and of d^2 in one pass
  auto channel_sums2 = [&](auto centre) {
    for (int64_t c = 0; c < C; ++c) {
      sums[c] = sums2[c] = 0.0;
      block2[c] = 0.0f;
    }
    by_blocks(
        [&](Vec v, int64_t c, size_t count) {
          const Vec d = centre(v, c, count);
          AddToDoubles(d, sums + c, count);
          StoreUpTo(Fma(d, d, LoadUpTo(block2 + c, count)), block2 + c, count);
        },
        [&] {
          for (int64_t c = 0; c < C; ++c) {
            sums2[c] += block2[c];
            block2[c] = 0.0f;
          }
        });
  };

  for (int64_t c = 0; c < C; ++c) shift_c[c] = HxW > 0 ? ShiftOf(x + c) : 0.0f;
  // The centre starts as the mean of a sample (kSamplePositions positions spread over the sample,
  // all of them when HxW is small), as in GroupNormSlab: a pass over the sample, which does not fit
  // in L2, costs as much as the sums themselves ((2, 64, 64, 320) G = 32 float, one thread, Intel
  // Xeon, 5 placements: a first pass 1.87-2.06 ms, the sample 1.52-1.80).
  const int64_t sampled = HxW < kSamplePositions ? HxW : kSamplePositions;
  for (int64_t c = 0; c < C; ++c) block[c] = 0.0f;
  for (int64_t k = 0; k < sampled; ++k) {
    const int64_t p = sampled > 1 ? k * (HxW - 1) / (sampled - 1) : 0;
    for (int64_t c = 0; c < C; c += kLanes) {
      const size_t count = ChannelLanes(C, c);
      StoreUpTo(LoadUpTo(block + c, count) + (LoadUpTo(x + p * C + c, count) - LoadUpTo(shift_c + c, count)), block + c, count);
    }
  }
  for (int64_t grp = 0; grp < a.G; ++grp) {
    double total = 0.0;
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) total += static_cast<double>(block[c]) + static_cast<double>(shift_c[c]) * static_cast<double>(sampled);
    const float centre = CentreNear(sampled > 0 ? total / static_cast<double>(Cg * sampled) : 0.0, shift_c[grp * Cg]);
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
      mean_c[c] = centre;
      mean_lo_c[c] = 0.0f;
    }
  }
  // x - mean for channels [c, c + count) (x - centre until the mean is known)
  auto centred = [&](Vec v, int64_t c, size_t count) { return (v - LoadUpTo(mean_c + c, count)) - LoadUpTo(mean_lo_c + c, count); };
  // group grp's sums of d and d^2 over its channels
  auto group_sums = [&](int64_t grp, double* sum_d, double* sum_d2) {
    *sum_d = *sum_d2 = 0.0;
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
      *sum_d += sums[c];
      *sum_d2 += sums2[c];
    }
  };
  channel_sums2(centred);
  // sum d^2 - (sum d)^2 / M cancels past 2 when the sample missed the mean by more than the
  // group's spread (as in GroupNormSlab): such groups sum again around their own mean
  bool again = false;
  for (int64_t grp = 0; grp < a.G; ++grp) {
    double sum_d, sum_d2;
    group_sums(grp, &sum_d, &sum_d2);
    const double off = sum_d / M;
    if (off * off * M <= sum_d2 - sum_d * off) continue;
    const float centre = CentreNear(static_cast<double>(mean_c[grp * Cg]) + off, shift_c[grp * Cg]);
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) mean_c[c] = centre;
    again = true;
  }
  if (again) channel_sums2(centred);
  bool rescue = false;
  for (int64_t grp = 0; grp < a.G; ++grp) {
    double sum_d, sum_d2;
    group_sums(grp, &sum_d, &sum_d2);
    const double mean_d = static_cast<double>(mean_c[grp * Cg]) + static_cast<double>(mean_lo_c[grp * Cg]) + sum_d / M;
    squares[grp] = sum_d2 - sum_d * sum_d / M;
    if (squares[grp] < 0.0) squares[grp] = 0.0;  // rounding; NaN stays NaN
    a.mean[n * a.G + grp] = static_cast<float>(mean_d);
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
      mean_c[c] = static_cast<float>(mean_d);
      mean_lo_c[c] = static_cast<float>(mean_d - mean_c[c]);
    }
    rescue |= SquaresNeedDouble(squares[grp], M, mean_d);
  }
  if (rescue) {
    channel_sums([&](Vec v, int64_t c) {
      return Abs(centred(v, c, ChannelLanes(C, c)));
    });
    for (int64_t grp = 0; grp < a.G; ++grp) {
      const double mean_d = static_cast<double>(mean_c[grp * Cg]) + static_cast<double>(mean_lo_c[grp * Cg]);
      if (!SquaresNeedDouble(squares[grp], M, mean_d)) continue;
      double absolute = 0.0;
      for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) absolute += sums[c];
      squares[grp] = absolute == 0.0 ? 0.0 : SquaresInDouble(x + grp * Cg, HxW, Cg, C, mean_d);
    }
  }
  for (int64_t grp = 0; grp < a.G; ++grp) {
    const double total = squares[grp];
    const float rstd = static_cast<float>(1.0 / std::sqrt(total / M + static_cast<double>(a.eps)));
    a.rstd[n * a.G + grp] = rstd;
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) weight_c[c] = rstd * a.gamma[c];
  }

  const Vec scale = Vec::Broadcast(a.swish_scale);
  // z for channels [c, c + count) of position p
  auto z_at = [&](int64_t p, int64_t c, size_t count) {
    return Fma(centred(LoadUpTo(x + p * C + c, count), c, count), LoadUpTo(weight_c + c, count), LoadUpTo(a.beta + c, count));
  };
  for (int64_t p = 0; p < HxW; ++p) {
    ChannelVectors(
        C,
        [&](int64_t c) {
          Vec out[kSteps];
          for (int k = 0; k < kSteps; ++k) out[k] = z_at(p, c + k * kLanes, kLanes);
          for (int k = 0; k < kSteps; ++k) out[k] = Swish(out[k], scale, a.activate_swish);
          for (int k = 0; k < kSteps; ++k) out[k].Store(y + p * C + c + k * kLanes);
        },
        [&](int64_t c, size_t count) { StoreUpTo(Swish(z_at(p, c, count), scale, a.activate_swish), y + p * C + c, count); });
  }
}

template <typename T>
void GroupNormSwish(const GroupNormArgs& args, int64_t task) {
  if (args.channels_last) {
    GroupNormSample<T>(args, task);
  } else {
    GroupNormSlab<T>(args, task);
  }
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
