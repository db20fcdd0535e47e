// What an x86-64 CPU and its operating system let the kernels use, read with cpuid and xgetbv.
//
// Not __builtin_cpu_supports: its answers come from the compiler's runtime library, and zig's (the
// toolchain of the distributed wheels, build_support/wheels) has none that works: an earlier zig
// answered no to every feature, which left a wheel on the portable kernels, and ziglang 0.17.0 does
// not link it (__cpu_model, __cpu_indicator_init undefined). cpuid and xgetbv work under every compiler.
#pragma once

namespace ascend_grad {

struct X86Features {
  bool intel = false;       // vendor string "GenuineIntel"
  bool avx2 = false;        // AVX, AVX2, FMA, F16C, and the OS saves the YMM registers
  bool avx512 = false;      // avx2 and AVX-512 F, BW, DQ, VL, and the OS saves the ZMM and mask registers
  bool avx512bf16 = false;  // avx512 and AVX512_BF16
};

// All false on other architectures.
X86Features DetectX86Features();

}  // namespace ascend_grad
