// cpuid and xgetbv, as Intel's SDM (vol. 2A, CPUID; vol. 1, 13.3 "enabling the XSAVE feature set")
// and AMD's APM (vol. 3, appendix E) describe them.
#include "cpu/x86_features.h"

#if defined(__x86_64__)
#include <cpuid.h>

#include <cstdint>
#include <cstring>
#endif

namespace ascend_grad {

#if defined(__x86_64__)
namespace {

struct Cpuid {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  Cpuid(uint32_t leaf, uint32_t subleaf) { __cpuid_count(leaf, subleaf, eax, ebx, ecx, edx); }
};

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

// XCR0: the register states the OS saves and restores (bit 1 XMM, 2 YMM, 5 opmask, 6 ZMM0-15's
// upper halves, 7 ZMM16-31). A CPU with AVX-512 under an OS that leaves bits 5-7 clear faults on
// the first AVX-512 instruction. (Spelt as an instruction: the _xgetbv intrinsic needs -mxsave.)
uint64_t Xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t{edx} << 32) | eax;
}

}  // namespace

X86Features DetectX86Features() {
  X86Features found;
  const Cpuid leaf0(0, 0);
  char vendor[13] = {};
  std::memcpy(vendor, &leaf0.ebx, 4);
  std::memcpy(vendor + 4, &leaf0.edx, 4);
  std::memcpy(vendor + 8, &leaf0.ecx, 4);
  found.intel = std::strcmp(vendor, "GenuineIntel") == 0;
  if (leaf0.eax < 7) return found;  // (no leaf 7: no AVX2)

  const Cpuid leaf1(1, 0);
  if (!Bit(leaf1.ecx, 27)) return found;  // OSXSAVE clear: no xgetbv, and no YMM state
  const uint64_t xcr0 = Xcr0();
  const bool ymm_state = (xcr0 & 0x06) == 0x06;
  const bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0;

  const Cpuid leaf7(7, 0);
  found.avx2 = ymm_state && Bit(leaf1.ecx, 28) /* AVX */ && Bit(leaf1.ecx, 12) /* FMA */ &&
               Bit(leaf1.ecx, 29) /* F16C */ && Bit(leaf7.ebx, 5) /* AVX2 */;
  found.avx512 = found.avx2 && zmm_state && Bit(leaf7.ebx, 16) /* F */ && Bit(leaf7.ebx, 17) /* DQ */ &&
                 Bit(leaf7.ebx, 30) /* BW */ && Bit(leaf7.ebx, 31) /* VL */;
  // AVX512_BF16 is in subleaf 1 (EAX bit 5), which exists where subleaf 0's EAX says so
  found.avx512bf16 = found.avx512 && leaf7.eax >= 1 && Bit(Cpuid(7, 1).eax, 5);
  return found;
}

#else

X86Features DetectX86Features() { return {}; }

#endif

}  // namespace ascend_grad
