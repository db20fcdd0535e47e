// One instruction set's ExpNeg (runtime_ext/cpu/simd.h) over a block of arguments, for
// exp_accuracy.cc: built once per instruction set by test_exp.py (ASCEND_GRAD_ISA and its flags on
// the command line) and linked into one harness, so the double reference is computed once for all.
#include <cstddef>

#include "cpu/simd.h"
#include "exp_paths.h"

namespace {
using namespace ascend_grad::ASCEND_GRAD_ISA;

// n: a multiple of kLanes (exp_accuracy.cc's blocks are)
void ExpOf(const float* in, float* out, size_t n) {
  for (size_t i = 0; i < n; i += kLanes) ExpNeg(Vec::Load(in + i)).Store(out + i);
}

#define ASCEND_GRAD_STRING2(x) #x
#define ASCEND_GRAD_STRING(x) ASCEND_GRAD_STRING2(x)
const bool registered = exp_paths::Register(ASCEND_GRAD_STRING(ASCEND_GRAD_ISA), ExpOf);
}  // namespace
