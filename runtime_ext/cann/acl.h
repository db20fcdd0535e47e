// The slice of CANN the CANN kernels call, found at run time (never at build time: the library builds
// and serves the CPU EP without the CANN toolkit).
//
// Where (SPEC.md): the libraries under $ASCEND_HOME_PATH/lib64 (what CANN's set_env.sh sets), else
// those already loaded in the process, else /usr/local/Ascend/ascend-toolkit/latest/lib64. Resolved
// once, thread-safely, on the first CANN kernel that runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/ort.h"

namespace ascend_grad {

// CANN's types, as its headers declare them (aclnn/acl_meta.h, acl/acl_base.h): opaque handles and
// plain integers.
struct aclTensor;
struct aclOpExecutor;
using aclrtStream = void*;
using aclnnStatus = int32_t;
using aclError = int;

constexpr int kAclFloat = 0, kAclFloat16 = 1, kAclBFloat16 = 27;  // aclDataType
constexpr int kAclFormatND = 2;                                    // aclFormat

using AclnnRunFn = aclnnStatus (*)(void* workspace, uint64_t workspace_size, aclOpExecutor* executor, aclrtStream stream);

struct CannApi {
  // libnnopbase
  aclTensor* (*aclCreateTensor)(const int64_t* view_dims, uint64_t view_rank, int data_type, const int64_t* strides,
                                int64_t offset, int format, const int64_t* storage_dims, uint64_t storage_rank,
                                void* data);
  aclnnStatus (*aclDestroyTensor)(const aclTensor* tensor);
  // libascendcl
  const char* (*aclGetRecentErrMsg)();
  aclError (*aclrtMemsetAsync)(void* device, size_t capacity, int32_t value, size_t count, aclrtStream stream);
  // libopapi: the seeds' ops, two-phase
  aclnnStatus (*aclnnSiluBackwardGetWorkspaceSize)(const aclTensor* grad_output, const aclTensor* self, aclTensor* grad_input,
                                                   uint64_t* workspace_size, aclOpExecutor** executor);
  AclnnRunFn aclnnSiluBackward;
  aclnnStatus (*aclnnMishBackwardGetWorkspaceSize)(const aclTensor* grad_output, const aclTensor* self, aclTensor* grad_input,
                                                   uint64_t* workspace_size, aclOpExecutor** executor);
  AclnnRunFn aclnnMishBackward;
  aclnnStatus (*aclnnGroupNormSwishGradGetWorkspaceSize)(const aclTensor* dy, const aclTensor* mean, const aclTensor* rstd,
                                                         const aclTensor* x, const aclTensor* gamma, const aclTensor* beta,
                                                         int64_t num_groups, char* data_format, double swish_scale,
                                                         bool dgamma_is_require, bool dbeta_is_require,
                                                         const aclTensor* dx, const aclTensor* dgamma,
                                                         const aclTensor* dbeta, uint64_t* workspace_size,
                                                         aclOpExecutor** executor);
  AclnnRunFn aclnnGroupNormSwishGrad;
  aclnnStatus (*aclnnGroupNormSwishGetWorkspaceSize)(const aclTensor* x, const aclTensor* gamma, const aclTensor* beta,
                                                     int64_t num_groups, char* data_format, double eps, bool activate_swish,
                                                     double swish_scale, const aclTensor* y, const aclTensor* mean,
                                                     const aclTensor* rstd, uint64_t* workspace_size,
                                                     aclOpExecutor** executor);
  AclnnRunFn aclnnGroupNormSwish;
};

// The resolved API, or null with *error saying where CANN was looked for.
const CannApi* Cann(std::string* error);

int AclDataType(DType t);

// What one CANN kernel call works with: the EP's stream and device allocator, and CANN.
class Device {
 public:
  ~Device();
  // `op` names the kernel in errors; `device_input` is one of its inputs (its memory info picks
  // the EP's device allocator: onnxruntime 1.24 refuses to build a "Cann" OrtMemoryInfo itself).
  OrtStatus* Open(OrtKernelContext* context, const char* op, const TensorView& device_input);

  // An aclTensor over a device buffer: contiguous, format ND. Destroyed with the Device (every
  // path, errors included).
  OrtStatus* Tensor(const TensorView& view, DType type, const std::vector<int64_t>& shape, aclTensor** out);
  // Device memory from the EP's allocator, freed with the Device (after the stream-ordered work
  // was enqueued: the EP's arena hands it out again only to work on the same stream).
  OrtStatus* Allocate(size_t bytes, void** out);
  // Fill `bytes` of device memory with the byte `value`, on the stream.
  OrtStatus* Fill(void* data, size_t bytes, int value);

  // The two phases of an aclnn op: get_workspace(&size, &executor), then run(...) on the stream;
  // a failing status becomes an error naming `function` (e.g. "aclnnSiluBackward"), its code and
  // CANN's own message.
  template <typename GetWorkspace>
  OrtStatus* Run(const char* function, GetWorkspace get_workspace, AclnnRunFn run) {
    uint64_t size = 0;
    aclOpExecutor* executor = nullptr;
    const aclnnStatus got = get_workspace(&size, &executor);
    if (got != 0) return Failure((std::string(function) + "GetWorkspaceSize").c_str(), got);
    void* workspace = nullptr;
    if (size > 0) ASCEND_GRAD_RETURN_IF_ERROR(Allocate(static_cast<size_t>(size), &workspace));
    const aclnnStatus ran = run(workspace, size, executor, stream_);
    return ran == 0 ? nullptr : Failure(function, ran);
  }

  const CannApi& api() const { return *api_; }

 private:
  OrtStatus* Failure(const char* function, int code);

  const char* op_ = "";
  const CannApi* api_ = nullptr;
  aclrtStream stream_ = nullptr;
  OrtAllocator* allocator_ = nullptr;
  std::vector<aclTensor*> tensors_;
  std::vector<void*> blocks_;
};

}  // namespace ascend_grad
