// GroupNormSwish's vector kernel (the forward that produces mean and rstd for the backward).
// One task is one (n, group) slab (NCHW) or one sample (NHWC), as in the backward.
//
//   mean, then var = mean((x - mean)^2) in a second pass (no cancellation when |mean| >> std),
//   rstd = 1 / sqrt(var + eps),  z = (x - mean) * rstd * gamma[c] + beta[c],  y = z * sigmoid(b z)
//
// The mean is summed as shift + sum(x - shift), shift = the group's first value: float sums of x
// itself lose the digits of x - mean when |mean| >> std (x ~ N(1000, 1)), the shifted values keep
// them. It is kept as float hi + lo parts: x - mean = (x - hi) - lo, where x - hi is exact for x
// near the mean. A group whose values nearly agree (two elements 1e-3 apart) would otherwise lose
// digits of x - mean to the rounding of the mean.
#pragma once

#include <cmath>

#include "cpu/group_norm_swish_grad_kernel.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

inline Vec Swish(Vec z, Vec scale, bool activate) { return activate ? z * SigmoidOf(scale * z).s() : z; }

// x[0] as float, or 0 when it is not finite (an infinity would turn every shifted value into
// NaN where the mean is an infinity); the shift only has to be near the mean, not exact
template <typename T>
float ShiftOf(const T* x) {
  const float first = ReduceAdd(KeepFirst(LoadPartial(x, 1), 1));
  return std::isfinite(first) ? first : 0.0f;
}

// sum over row[0, n) of f(v) for the row's values v, in float blocks flushed into double
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

template <typename T, typename F>
double RowSum(const T* row, int64_t n, F f) {
  double total = 0.0;
  for (int64_t start = 0; start < n; start += kSumBlock) {
    const int64_t end = start + kSumBlock < n ? start + kSumBlock : n;
    Vec acc = Vec::Zero();
    int64_t i = start;
    for (; i + static_cast<int64_t>(kLanes) <= end; i += kLanes) acc = acc + f(Vec::Load(row + i));
    if (i < end) acc = acc + KeepFirst(f(LoadPartial(row + i, static_cast<size_t>(end - i))), static_cast<size_t>(end - i));
    total += ReduceAdd(acc);
  }
  return total;
}

template <typename T>
void GroupNormSlab(const GroupNormArgs& a, int64_t task) {
  const int64_t n = task / a.G, Cg = a.C / a.G, c0 = (task % a.G) * Cg, HxW = a.HxW;
  const int64_t offset = (n * a.C + c0) * HxW;
  const T* x = static_cast<const T*>(a.x) + offset;
  T* y = static_cast<T*>(a.y) + offset;
  const double M = static_cast<double>(Cg * HxW);

  const float shift = HxW > 0 ? ShiftOf(x) : 0.0f;
  const Vec shift_v = Vec::Broadcast(shift);
  double sum = 0.0;
  for (int64_t c = 0; c < Cg; ++c) sum += RowSum(x + c * HxW, HxW, [&](Vec v) { return v - shift_v; });
  const double mean_d = static_cast<double>(shift) + sum / M;
  const float mean = static_cast<float>(mean_d);
  const Vec hi = Vec::Broadcast(mean), lo = Vec::Broadcast(static_cast<float>(mean_d - mean));
  auto centred = [&](Vec v) { return (v - hi) - lo; };
  double squares = 0.0;
  for (int64_t c = 0; c < Cg; ++c) {
    squares += RowSum(x + c * HxW, HxW, [&](Vec v) {
      const Vec d = centred(v);
      return d * d;
    });
  }
  if (SquaresNeedDouble(squares, M, mean_d)) {
    double absolute = 0.0;
    for (int64_t c = 0; c < Cg; ++c) absolute += RowSum(x + c * HxW, HxW, [&](Vec v) { return Abs(centred(v)); });
    squares = absolute == 0.0 ? 0.0 : SquaresInDouble(x, Cg, HxW, HxW, mean_d);
  }
  const float rstd = static_cast<float>(1.0 / std::sqrt(squares / M + static_cast<double>(a.eps)));
  a.mean[task] = mean;
  a.rstd[task] = rstd;

  const Vec scale = Vec::Broadcast(a.swish_scale);
  for (int64_t c = 0; c < Cg; ++c) {
    const Vec weight = Vec::Broadcast(rstd * a.gamma[c0 + c]), beta = Vec::Broadcast(a.beta[c0 + c]);
    const T* x_row = x + c * HxW;
    T* y_row = y + c * HxW;
    int64_t i = 0;
    for (; i + static_cast<int64_t>(kLanes) <= HxW; i += kLanes) {
      Swish(Fma(centred(Vec::Load(x_row + i)), weight, beta), scale, a.activate_swish).Store(y_row + i);
    }
    if (i < HxW) {
      const size_t count = static_cast<size_t>(HxW - i);
      StorePartial(Swish(Fma(centred(LoadPartial(x_row + i, count)), weight, beta), scale, a.activate_swish), y_row + i, count);
    }
  }
}

template <typename T>
void GroupNormSample(const GroupNormArgs& a, int64_t n) {
  const int64_t C = a.C, Cg = a.C / a.G, HxW = a.HxW;
  const T* x = static_cast<const T*>(a.x) + n * HxW * C;
  T* y = static_cast<T*>(a.y) + n * HxW * C;
  float* mean_c = Scratch(static_cast<size_t>(5 * C) + kLanes, 1);  // mean as hi + lo per channel
  float* mean_lo_c = mean_c + C;
  float* shift_c = mean_lo_c + C;  // each channel's first value (see ShiftOf)
  float* block = shift_c + C;
  float* weight_c = block + C;
  double* sums = Scratch<double>(static_cast<size_t>(C + a.G), 2);
  const double M = static_cast<double>(Cg * HxW);

  // per-channel sums of f(x) over the positions, float blocks flushed into double
  auto channel_sums = [&](auto f) {
    for (int64_t c = 0; c < C; ++c) sums[c] = 0.0;
    for (int64_t start = 0; start < HxW; start += kSumBlock / 16) {
      const int64_t end = start + kSumBlock / 16 < HxW ? start + kSumBlock / 16 : HxW;
      for (int64_t c = 0; c < C; ++c) block[c] = 0.0f;
      for (int64_t p = start; p < end; ++p) {
        for (int64_t c = 0; c < C; c += kLanes) {
          const size_t count = static_cast<size_t>(C - c < static_cast<int64_t>(kLanes) ? C - c : kLanes);
          const Vec v = f(LoadPartial(x + p * C + c, count), c);
          StorePartial(LoadPartial(block + c, count) + v, block + c, count);
        }
      }
      for (int64_t c = 0; c < C; ++c) sums[c] += block[c];
    }
  };

  for (int64_t c = 0; c < C; ++c) shift_c[c] = HxW > 0 ? ShiftOf(x + c) : 0.0f;
  channel_sums([&](Vec v, int64_t c) {
    return v - LoadPartial(shift_c + c, static_cast<size_t>(C - c < static_cast<int64_t>(kLanes) ? C - c : kLanes));
  });
  for (int64_t grp = 0; grp < a.G; ++grp) {
    double total = 0.0;
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) total += sums[c] + static_cast<double>(shift_c[c]) * static_cast<double>(HxW);
    const double mean_d = total / M;
    a.mean[n * a.G + grp] = static_cast<float>(mean_d);
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
      mean_c[c] = static_cast<float>(mean_d);
      mean_lo_c[c] = static_cast<float>(mean_d - mean_c[c]);
    }
  }
  // x - mean for channels [c, c + count)
  auto centred = [&](Vec v, int64_t c, size_t count) { return (v - LoadPartial(mean_c + c, count)) - LoadPartial(mean_lo_c + c, count); };
  channel_sums([&](Vec v, int64_t c) {
    const Vec d = centred(v, c, static_cast<size_t>(C - c < static_cast<int64_t>(kLanes) ? C - c : kLanes));
    return d * d;
  });
  double* squares = sums + C;  // per group
  bool rescue = false;
  for (int64_t grp = 0; grp < a.G; ++grp) {
    squares[grp] = 0.0;
    for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) squares[grp] += sums[c];
    rescue |= SquaresNeedDouble(squares[grp], M, static_cast<double>(mean_c[grp * Cg]));
  }
  if (rescue) {
    channel_sums([&](Vec v, int64_t c) {
      return Abs(centred(v, c, static_cast<size_t>(C - c < static_cast<int64_t>(kLanes) ? C - c : kLanes)));
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
  for (int64_t p = 0; p < HxW; ++p) {
    for (int64_t c = 0; c < C; c += kLanes) {
      const size_t count = static_cast<size_t>(C - c < static_cast<int64_t>(kLanes) ? C - c : kLanes);
      const Vec z = Fma(centred(LoadPartial(x + p * C + c, count), c, count), LoadPartial(weight_c + c, count),
                        LoadPartial(a.beta + c, count));
      StorePartial(Swish(z, scale, a.activate_swish), y + p * C + c, count);
    }
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
