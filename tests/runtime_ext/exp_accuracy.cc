// ExpNeg (runtime_ext/cpu/simd.h) against double exp over every float argument in [-104.5, 0], for
// every instruction set's path linked in (exp_path.cc, built once per set by test_exp.py): the
// double reference is computed once per argument for all of them. An argument `step` checks every
// step-th float argument only (under emulation; default 1: all).
// Prints, per path: "<isa>: max_ulp E at X above_one N of M subnormal_max S" (the max error in ulps
// over normal results, where, how many above 1 ulp, the max error of subnormal results in units of
// 2^-149), then "<isa>: special A R" for each special argument.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exp_paths.h"

namespace ascend_grad {
void* ThreadScratch(size_t, int) { return nullptr; }  // (simd.h's Scratch; unused here)
}  // namespace ascend_grad

namespace exp_paths {
struct Path {
  std::string isa;
  Block block;
  double worst = 0.0, worst_subnormal = 0.0;
  float worst_at = 0.0f;
  long above_one = 0, normal = 0;
};

static std::vector<Path>& Paths() {
  static std::vector<Path> paths;  // (filled by the objects' static initialisers, before main)
  return paths;
}

bool Register(const char* isa, Block block) {
  Paths().push_back(Path{isa, block});
  return true;
}
}  // namespace exp_paths

int main(int argc, char** argv) {
  using exp_paths::Paths;
  constexpr uint32_t kFirst = 0x80000000u, kLast = 0xC2D10000u;  // -0 .. -104.5
  constexpr size_t kBlock = 4096;                                 // (a multiple of every path's lanes)
  const uint64_t step = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
  if (Paths().empty()) return 2;
  std::vector<float> in(kBlock), out(kBlock);
  std::vector<double> exact(kBlock), inverse_ulp(kBlock);
  for (uint64_t bits = kFirst; bits <= kLast; bits += kBlock * step) {
    const size_t count = static_cast<size_t>(std::min<uint64_t>(kBlock, (kLast - bits) / step + 1));
    for (size_t i = 0; i < kBlock; ++i) {  // (past the last argument: the last again, not judged)
      const uint32_t b = static_cast<uint32_t>(std::min<uint64_t>(bits + i * step, kLast));
      std::memcpy(&in[i], &b, sizeof b);
      exact[i] = std::exp(static_cast<double>(in[i]));
      const float rounded = static_cast<float>(exact[i]);
      if (rounded < std::numeric_limits<float>::min()) {
        inverse_ulp[i] = 0.0;  // (a subnormal result: judged in units of 2^-149 below)
        continue;
      }
      // one ulp of the float result, 2^(e - 23) for a result in [2^e, 2^(e+1)): its exponent bits as
      // a double's (a power of two, so the product below is the quotient exactly, without a division)
      uint32_t rounded_bits;
      std::memcpy(&rounded_bits, &rounded, sizeof rounded_bits);
      const uint64_t inverse_bits = static_cast<uint64_t>(1023 + 127 + 23 - (rounded_bits >> 23)) << 52;
      std::memcpy(&inverse_ulp[i], &inverse_bits, sizeof inverse_bits);
    }
    for (auto& path : Paths()) {
      path.block(in.data(), out.data(), kBlock);
      for (size_t i = 0; i < count; ++i) {
        const double miss = std::fabs(out[i] - exact[i]);
        if (inverse_ulp[i] == 0.0) {
          path.worst_subnormal = std::max(path.worst_subnormal, miss * 0x1p149);
          continue;
        }
        const double error = miss * inverse_ulp[i];
        ++path.normal;
        path.above_one += error > 1.0;
        if (error > path.worst) {
          path.worst = error;
          path.worst_at = in[i];
        }
      }
    }
  }
  const float special[] = {0.0f, -0.0f, -104.5f, -104.50001f, -1e30f, -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), -87.33655f};
  constexpr size_t kSpecials = sizeof special / sizeof special[0];
  for (auto& path : Paths()) {
    std::printf("%s: max_ulp %.6f at %.9g above_one %ld of %ld subnormal_max %.6f\n", path.isa.c_str(), path.worst,
                path.worst_at, path.above_one, path.normal, path.worst_subnormal);
    for (size_t s = 0; s < kSpecials; ++s) {
      std::fill(in.begin(), in.end(), special[s]);
      path.block(in.data(), out.data(), kBlock);
      std::printf("%s: special %.9g %.9g\n", path.isa.c_str(), special[s], out[0]);
    }
  }
}
