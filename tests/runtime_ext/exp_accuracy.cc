// ExpNeg (runtime_ext/cpu/simd.h) against double exp over every float argument in [-104.5, 0], built
// once per instruction set by test_exp.py (ASCEND_GRAD_ISA and the flags on the command line).
// An argument `step` checks every step-th float argument only (under emulation; default 1: all).
// Prints: max error in ulps over normal results, where, how many above 1 ulp, and the max error of
// subnormal results in units of 2^-149; then the special arguments' results.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "cpu/simd.h"

namespace ascend_grad {
void* ThreadScratch(size_t, int) { return nullptr; }  // (simd.h's Scratch; unused here)
}  // namespace ascend_grad

using namespace ascend_grad::ASCEND_GRAD_ISA;

static void ExpOf(const float* in, float* out) { ExpNeg(Vec::Load(in)).Store(out); }

int main(int argc, char** argv) {
  constexpr uint32_t kFirst = 0x80000000u, kLast = 0xC2D10000u;  // -0 .. -104.5
  const uint64_t step = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
  double worst = 0.0, worst_subnormal = 0.0;
  float worst_at = 0.0f;
  long above_one = 0, normal = 0;
  float in[kLanes], out[kLanes];
  for (uint64_t bits = kFirst; bits <= kLast; bits += kLanes * step) {
    for (size_t l = 0; l < kLanes; ++l) {
      const uint32_t b = static_cast<uint32_t>(std::min<uint64_t>(bits + l * step, kLast));
      std::memcpy(&in[l], &b, sizeof b);
    }
    ExpOf(in, out);
    for (size_t l = 0; l < kLanes; ++l) {
      const double exact = std::exp(static_cast<double>(in[l]));
      const float rounded = static_cast<float>(exact);
      if (rounded < std::numeric_limits<float>::min()) {
        worst_subnormal = std::max(worst_subnormal, std::fabs(out[l] - exact) * 0x1p149);
        continue;
      }
      // one ulp of the float result, 2^(e - 23) for a result in [2^e, 2^(e+1)): its exponent bits as a
      // double's (a power of two, so the product below is the quotient exactly, without a division)
      uint32_t bits;
      std::memcpy(&bits, &rounded, sizeof bits);
      const uint64_t inverse_ulp_bits = static_cast<uint64_t>(1023 + 127 + 23 - (bits >> 23)) << 52;
      double inverse_ulp;
      std::memcpy(&inverse_ulp, &inverse_ulp_bits, sizeof inverse_ulp);
      const double error = std::fabs(out[l] - exact) * inverse_ulp;
      ++normal;
      above_one += error > 1.0;
      if (error > worst) {
        worst = error;
        worst_at = in[l];
      }
    }
  }
  std::printf("max_ulp %.6f at %.9g above_one %ld of %ld subnormal_max %.6f\n", worst, worst_at, above_one, normal, worst_subnormal);
  const float special[] = {0.0f, -0.0f, -104.5f, -104.50001f, -1e30f, -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), -87.33655f};
  for (float s : special) {
    for (size_t l = 0; l < kLanes; ++l) in[l] = s;
    ExpOf(in, out);
    std::printf("special %.9g %.9g\n", s, out[0]);
  }
}
