// The generic kernel table (compiler flags in ../library/CMakeLists.txt).
#define ASCEND_GRAD_ISA generic
#include "cpu/isa_table.h"

namespace ascend_grad {
KernelTable GenericTable() { return generic::MakeTable("generic"); }
}  // namespace ascend_grad
