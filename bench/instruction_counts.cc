// One kernel of one instruction set's table over n elements, once: the program whose executed
// instructions bench/instruction_counts.py counts under qemu (built with the table's flags and
// -DASCEND_GRAD_ISA=<isa>, as runtime_ext builds isa_<isa>.cc).
//
//   instruction_counts OP DTYPE N      OP: silu | mish | gn | gn_grad; DTYPE: float | float16 | bfloat16
//
// The GroupNorm ops take (1, 32, N / 32), 8 groups, NCHW. Inputs are fixed pseudo-random values
// (x in [-8, 8]), so both sides of the exp's sigmoid branch are taken.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu/isa_table.h"

namespace ascend_grad {
// what dispatch.cc gives the kernels in the library
void* ThreadScratch(size_t bytes, int slot) {
  static std::vector<unsigned char> buffers[4];
  if (buffers[slot].size() < bytes + 64) buffers[slot].resize(bytes + 64);
  const auto address = reinterpret_cast<uintptr_t>(buffers[slot].data());
  return buffers[slot].data() + ((64 - address % 64) % 64);
}
bool StreamsWalkByGap() { return true; }
SlabRuns SlabRunsRule() { return SlabRuns::kOff; }
}  // namespace ascend_grad

using namespace ascend_grad;

namespace {

uint32_t state = 12345;
float Random(float low, float high) {  // (a linear congruential generator: the same inputs on every ISA)
  state = state * 1664525u + 1013904223u;
  return low + (high - low) * static_cast<float>(state >> 8) / 16777216.0f;
}

// n values of the dtype in a 64-byte aligned buffer
void* Values(int dtype, size_t n, float low, float high) {
  const size_t size = dtype == 0 ? 4 : 2;
  void* p = std::aligned_alloc(64, (n * size + 63) / 64 * 64);
  for (size_t i = 0; i < n; ++i) {
    const float v = Random(low, high);
    if (dtype == 0) static_cast<float*>(p)[i] = v;
    if (dtype == 1) static_cast<Float16*>(p)[i] = FromFloat<Float16>(v);
    if (dtype == 2) static_cast<BFloat16*>(p)[i] = FromFloat<BFloat16>(v);
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s silu|mish|gn|gn_grad float|float16|bfloat16 N\n", argv[0]);
    return 2;
  }
  const char* op = argv[1];
  const int dtype = std::strcmp(argv[2], "float") == 0 ? 0 : std::strcmp(argv[2], "float16") == 0 ? 1 : 2;
  const size_t n = std::strtoull(argv[3], nullptr, 10);
  const KernelTable table = ASCEND_GRAD_ISA::MakeTable("counted");
  void* x = Values(dtype, n, -8.0f, 8.0f);
  void* other = Values(dtype, n, -1.0f, 1.0f);  // dy
  void* out = Values(dtype, n, 0.0f, 0.0f);
  if (std::strcmp(op, "silu") == 0) {
    table.silu_backward[dtype](other, false, x, false, out, n, false);
  } else if (std::strcmp(op, "mish") == 0) {
    table.mish_backward[dtype][dtype](other, false, x, false, out, n, false);
  } else {
    const int64_t N = 1, C = 32, G = 8, HxW = static_cast<int64_t>(n) / C;
    std::vector<float> gamma(C), beta(C), mean(N * G, 0.0f), rstd(N * G, 0.2f), dbeta(N * C), dgamma(N * C);
    for (int64_t c = 0; c < C; ++c) {
      gamma[c] = Random(0.5f, 1.5f);
      beta[c] = Random(-0.5f, 0.5f);
    }
    if (std::strcmp(op, "gn") == 0) {
      const GroupNormArgs args{x, out, gamma.data(), beta.data(), mean.data(), rstd.data(), N, C, HxW, G, 1e-5f, 1.0f, true, false, false};
      for (int64_t task = 0; task < N * G; ++task) table.group_norm_swish[dtype](args, task);
    } else {
      const GroupNormGradArgs args{other, x, out, mean.data(), rstd.data(), gamma.data(), beta.data(), dbeta.data(), dgamma.data(),
                                   N, C, HxW, G, 1.0f, false, 1};
      for (int64_t task = 0; task < N * G; ++task) table.group_norm_swish_grad[dtype](args, task);
    }
  }
  // (read the output, so nothing is left out as unused)
  unsigned char check = 0;
  for (size_t i = 0; i < n * (dtype == 0 ? 4 : 2); ++i) check ^= static_cast<unsigned char>(static_cast<unsigned char*>(out)[i]);
  std::printf("%s %s %zu %u\n", op, argv[2], n, check);
  return 0;
}
