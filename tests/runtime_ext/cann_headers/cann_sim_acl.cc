// The simulated CANN runtime's declarations (tests/runtime_ext/cann_sim/src: simcann.h's numbers,
// acl_api.h's functions) compiled after CANN's own ACL headers (test_cann_headers.py takes them from
// the torch-npu wheel): each number is a static_assert against CANN's, and each function is
// declared a second time with the simulator's types, which C++ refuses for a C function unless the
// two declarations agree (parameters and return type).
#include "acl/acl.h"
#include "acl/acl_op_compiler.h"

#define SIMCANN_CHECK_AGAINST_CANN 1
extern "C" {
#include "acl_api.h"
}

int main() { return 0; }
