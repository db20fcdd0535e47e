// The avx512 kernel table (compiler flags in ../library/CMakeLists.txt).
#define ASCEND_GRAD_ISA avx512
#include "cpu/isa_table.h"

namespace ascend_grad {
KernelTable Avx512Table() { return avx512::MakeTable("avx512"); }
}  // namespace ascend_grad
