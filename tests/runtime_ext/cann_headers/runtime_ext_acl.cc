// runtime_ext/cann/acl.h declares by hand the slice of CANN the CANN kernels call (the library
// builds without CANN). Compiled against CANN's own ACL headers (test_cann_headers.py takes them
// from the torch-npu wheel): every static_assert below is one fact our declaration must share with
// CANN's, so a type, value or signature that drifts fails to compile.
//
// Not covered: aclCreateTensor, aclDestroyTensor and the aclnn functions live in aclnn's headers
// (aclnn/acl_meta.h, aclnnop/*.h), which that wheel does not ship.
#include <type_traits>

#include "acl/acl.h"
#include "cann/acl.h"

namespace ours = ascend_grad;

// the types the declarations are written in
static_assert(std::is_same<ours::aclrtStream, ::aclrtStream>::value, "aclrtStream differs from CANN's");
static_assert(std::is_same<ours::aclError, ::aclError>::value, "aclError differs from CANN's");

// the aclDataType and aclFormat values handed to aclCreateTensor
static_assert(ours::kAclFloat == ::ACL_FLOAT, "kAclFloat is not CANN's ACL_FLOAT");
static_assert(ours::kAclFloat16 == ::ACL_FLOAT16, "kAclFloat16 is not CANN's ACL_FLOAT16");
static_assert(ours::kAclBFloat16 == ::ACL_BF16, "kAclBFloat16 is not CANN's ACL_BF16");
static_assert(ours::kAclFormatND == ::ACL_FORMAT_ND, "kAclFormatND is not CANN's ACL_FORMAT_ND");

// each function pointer CannApi holds has the type of CANN's declaration of that function
#define SAME_AS_CANN(function)                                                                  \
  static_assert(std::is_same<decltype(ours::CannApi::function), decltype(&::function)>::value, \
                #function ": CannApi's pointer type differs from CANN's declaration")
SAME_AS_CANN(aclGetRecentErrMsg);
SAME_AS_CANN(aclrtMemsetAsync);

int main() { return 0; }
