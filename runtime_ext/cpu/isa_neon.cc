// The neon kernel table (AArch64 Advanced SIMD: no compiler flags, every ARMv8-A CPU has it).
#define ASCEND_GRAD_ISA neon
#define ASCEND_GRAD_NEON 1
#include "cpu/isa_table.h"

namespace ascend_grad {
KernelTable NeonTable() { return neon::MakeTable("neon"); }
}  // namespace ascend_grad
