// Which kernel table runs: chosen when the library is registered, from what the CPU has.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "cpu/kernels.h"
#include "cpu/x86_features.h"

namespace ascend_grad {

// The tables a build left out (ASCEND_GRAD_ISAS in CMakeLists.txt) count as absent from the CPU.
#ifndef ASCEND_GRAD_WITH_AVX2
#define ASCEND_GRAD_WITH_AVX2 0
#endif
#ifndef ASCEND_GRAD_WITH_AVX512
#define ASCEND_GRAD_WITH_AVX512 0
#endif
#ifndef ASCEND_GRAD_WITH_AVX512BF16
#define ASCEND_GRAD_WITH_AVX512BF16 0
#endif
#ifndef ASCEND_GRAD_WITH_NEON
#define ASCEND_GRAD_WITH_NEON 0
#endif

KernelTable GenericTable();
#if ASCEND_GRAD_WITH_AVX2
KernelTable Avx2Table();
#endif
#if ASCEND_GRAD_WITH_AVX512
KernelTable Avx512Table();
#endif
#if ASCEND_GRAD_WITH_AVX512BF16
KernelTable Avx512bf16Table();
#endif
#if ASCEND_GRAD_WITH_NEON
KernelTable NeonTable();
#endif

namespace {

KernelTable g_table = GenericTable();
bool g_streams_walk_by_gap = true;
int64_t g_stream_bytes = kStreamBytes;
int64_t g_sample_scratch_bytes = kSampleScratchBytes;
SlabRuns g_slab_runs = SlabRuns::kByL2;

bool Built(const char* isa) {
  if (std::strcmp(isa, "avx2") == 0) return ASCEND_GRAD_WITH_AVX2 == 1;
  if (std::strcmp(isa, "avx512") == 0) return ASCEND_GRAD_WITH_AVX512 == 1;
  if (std::strcmp(isa, "avx512bf16") == 0) return ASCEND_GRAD_WITH_AVX512BF16 == 1;
  if (std::strcmp(isa, "neon") == 0) return ASCEND_GRAD_WITH_NEON == 1;
  return true;
}

bool CpuHas(const char* isa) {
#if defined(__x86_64__) || defined(_M_X64)
  if (!Built(isa)) return false;
  const X86Features cpu = DetectX86Features();
  if (std::strcmp(isa, "avx512bf16") == 0) return cpu.avx512bf16;
  if (std::strcmp(isa, "avx512") == 0) return cpu.avx512;
  if (std::strcmp(isa, "avx2") == 0) return cpu.avx2;
#endif
#if defined(__aarch64__)
  // Advanced SIMD and the float16 conversions: part of every ARMv8-A CPU, but the kernel says so
  if (std::strcmp(isa, "neon") == 0) {
    const unsigned long hwcap = getauxval(AT_HWCAP);
    return Built(isa) && (hwcap & HWCAP_ASIMD) != 0 && (hwcap & HWCAP_FP) != 0;
  }
#endif
  return std::strcmp(isa, "generic") == 0;
}

// Behind non-temporal stores, AMD's cores made the loads 4K-aliased with them wait (page_walk.h);
// Intel's did not once the inputs were prefetched, and walked backward slower than forward
// (elementwise_kernel.h).
bool IsIntel() {
#if defined(__x86_64__) || defined(_M_X64)
  return DetectX86Features().intel;
#else
  return false;
#endif
}

KernelTable TableFor(const char* isa) {
#if ASCEND_GRAD_WITH_AVX512BF16
  if (std::strcmp(isa, "avx512bf16") == 0) return Avx512bf16Table();
#endif
#if ASCEND_GRAD_WITH_AVX512
  if (std::strcmp(isa, "avx512") == 0) return Avx512Table();
#endif
#if ASCEND_GRAD_WITH_AVX2
  if (std::strcmp(isa, "avx2") == 0) return Avx2Table();
#endif
#if ASCEND_GRAD_WITH_NEON
  if (std::strcmp(isa, "neon") == 0) return NeonTable();
#endif
  return GenericTable();
}

// 1 or 0 where the environment variable `name` says `yes` or `no`; -1 where it is unset or empty, or
// says anything else (reported on stderr and ignored)
int EnvChoice(const char* name, const char* yes, const char* no) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  if (std::strcmp(value, yes) == 0) return 1;
  if (std::strcmp(value, no) == 0) return 0;
  std::fprintf(stderr, "ascend-grad: %s=%s is neither %s nor %s\n", name, value, yes, no);
  return -1;
}

// The positive number of bytes the environment variable `name` gives, else `fallback` (where it
// is unset or empty; anything else is reported on stderr and ignored)
int64_t EnvBytes(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  if (*end != '\0' || parsed <= 0) {
    std::fprintf(stderr, "ascend-grad: %s=%s is not a positive number of bytes\n", name, value);
    return fallback;
  }
  return static_cast<int64_t>(parsed);
}

}  // namespace

void SelectKernels() {
  const char* wanted = std::getenv("ASCEND_GRAD_ISA");  // for tests and comparisons
  const char* chosen = nullptr;
  if (wanted != nullptr && *wanted != '\0') {
    if (CpuHas(wanted)) chosen = wanted;
    else std::fprintf(stderr, "ascend-grad: ASCEND_GRAD_ISA=%s is not available on this CPU\n", wanted);
  }
  if (chosen == nullptr) {
    for (const char* isa : {"avx512bf16", "avx512", "avx2", "neon", "generic"}) {
      if (CpuHas(isa)) {
        chosen = isa;
        break;
      }
    }
  }
  g_table = TableFor(chosen);
  // overrides of the CPU's own rules, for tests and comparisons
  const int walk = EnvChoice("ASCEND_GRAD_STREAM_WALK", "gap", "forward");
  g_streams_walk_by_gap = walk < 0 ? !IsIntel() : walk == 1;
  const int runs = EnvChoice("ASCEND_GRAD_SLAB_RUNS", "on", "off");
  g_slab_runs = runs < 0 ? SlabRuns::kByL2 : runs == 1 ? SlabRuns::kOn : SlabRuns::kOff;
  g_stream_bytes = EnvBytes("ASCEND_GRAD_STREAM_BYTES", kStreamBytes);
  g_sample_scratch_bytes = EnvBytes("ASCEND_GRAD_SAMPLE_SCRATCH_BYTES", kSampleScratchBytes);
  if (std::getenv("ASCEND_GRAD_VERBOSE") != nullptr) {
    std::fprintf(stderr, "ascend-grad: %s kernels, streams walk %s, slab runs %s\n", g_table.isa,
                 g_streams_walk_by_gap ? "by page gap" : "forward",
                 g_slab_runs == SlabRuns::kByL2 ? "by L2 size" : g_slab_runs == SlabRuns::kOn ? "on" : "off");
    std::fprintf(stderr, "ascend-grad: outputs streamed from %lld bytes, NHWC sample scratch up to %lld bytes\n",
                 static_cast<long long>(g_stream_bytes), static_cast<long long>(g_sample_scratch_bytes));
  }
}

const KernelTable& Kernels() { return g_table; }

bool StreamsWalkByGap() { return g_streams_walk_by_gap; }

SlabRuns SlabRunsRule() { return g_slab_runs; }

int64_t StreamBytes() { return g_stream_bytes; }

int64_t SampleScratchBytes() { return g_sample_scratch_bytes; }

void* ThreadScratch(size_t bytes, int slot) {
  thread_local std::vector<unsigned char> buffers[4];
  std::vector<unsigned char>& buffer = buffers[slot];
  if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
  // 64-byte aligned: whole cache lines for the vector loads
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64);
}

}  // namespace ascend_grad
