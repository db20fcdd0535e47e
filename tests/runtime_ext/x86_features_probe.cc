// Prints what runtime_ext/cpu/x86_features.cc reads from cpuid and xgetbv, and what GCC's
// __builtin_cpu_supports says, for the same four facts (tests/runtime_ext/test_x86_features.py).
#include <cstdio>

#include "cpu/x86_features.h"

int main() {
  const ascend_grad::X86Features cpuid = ascend_grad::DetectX86Features();
  std::printf("cpuid intel=%d avx2=%d avx512=%d avx512bf16=%d\n", cpuid.intel, cpuid.avx2, cpuid.avx512, cpuid.avx512bf16);
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool avx512bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  std::printf("builtins intel=%d avx2=%d avx512=%d avx512bf16=%d\n", __builtin_cpu_is("intel") != 0, avx2, avx512, avx512bf16);
  return 0;
}
