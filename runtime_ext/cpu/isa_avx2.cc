// The avx2 kernel table (compiler flags in ../library/CMakeLists.txt).
#define ASCEND_GRAD_ISA avx2
#include "cpu/isa_table.h"

namespace ascend_grad {
KernelTable Avx2Table() { return avx2::MakeTable("avx2"); }
}  // namespace ascend_grad
