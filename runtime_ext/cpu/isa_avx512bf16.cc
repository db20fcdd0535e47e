// The avx512bf16 kernel table: AVX-512 plus the one-instruction float -> bfloat16 rounding
// (compiler flags in ../library/CMakeLists.txt).
#define ASCEND_GRAD_ISA avx512bf16
#include "cpu/isa_table.h"

namespace ascend_grad {
KernelTable Avx512bf16Table() { return avx512bf16::MakeTable("avx512bf16"); }
}  // namespace ascend_grad
