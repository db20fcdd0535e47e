#include "cann/acl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace ascend_grad {
namespace {

constexpr const char* kDefaultLib64 = "/usr/local/Ascend/ascend-toolkit/latest/lib64";

// One CANN library: under $ASCEND_HOME_PATH/lib64, else already loaded, else the default toolkit.
void* OpenLibrary(const char* name, std::string* tried) {
  const char* home = std::getenv("ASCEND_HOME_PATH");
  if (home != nullptr && *home != '\0') {
    const std::string path = std::string(home) + "/lib64/" + name;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
    *tried += " " + path + " (" + dlerror() + ");";
  } else {
    *tried += " $ASCEND_HOME_PATH/lib64 (ASCEND_HOME_PATH is not set);";
  }
  if (void* handle = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) return handle;
  *tried += std::string(" the process's loaded libraries (no ") + name + ");";
  const std::string path = std::string(kDefaultLib64) + "/" + name;
  if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
  *tried += " " + path + " (" + dlerror() + ")";
  return nullptr;
}

struct Loaded {
  CannApi api{};
  std::string error;  // empty when every symbol was found
};

template <typename Fn>
bool Find(const std::vector<void*>& handles, const char* symbol, Fn* out, std::string* missing) {
  for (void* handle : handles) {
    if (handle == nullptr) continue;
    if (void* address = dlsym(handle, symbol)) {
      *out = reinterpret_cast<Fn>(address);
      return true;
    }
  }
  *missing += std::string(missing->empty() ? "" : ", ") + symbol;
  return false;
}

Loaded Load() {
  Loaded loaded;
  std::string tried;
  void* acl = OpenLibrary("libascendcl.so", &tried);
  void* nnopbase = OpenLibrary("libnnopbase.so", &tried);
  // the aclnn ops: libopapi.so, or the per-domain library of newer CANN releases
  std::string tried_opapi;
  void* opapi = OpenLibrary("libopapi.so", &tried_opapi);
  void* opapi_nn = OpenLibrary("libopapi_nn.so", &tried_opapi);
  if (acl == nullptr || nnopbase == nullptr || (opapi == nullptr && opapi_nn == nullptr)) {
    loaded.error = "CANN not found (source CANN's set_env.sh, or set ASCEND_HOME_PATH); looked in:" + tried +
                   (opapi == nullptr && opapi_nn == nullptr ? tried_opapi : "");
    return loaded;
  }
  CannApi& a = loaded.api;
  std::string missing;
  const std::vector<void*> base{nnopbase, acl, opapi, opapi_nn}, rt{acl}, ops{opapi, opapi_nn};
  Find(base, "aclCreateTensor", &a.aclCreateTensor, &missing);
  Find(base, "aclDestroyTensor", &a.aclDestroyTensor, &missing);
  Find(rt, "aclGetRecentErrMsg", &a.aclGetRecentErrMsg, &missing);
  Find(rt, "aclrtMemsetAsync", &a.aclrtMemsetAsync, &missing);
  Find(ops, "aclnnSiluBackwardGetWorkspaceSize", &a.aclnnSiluBackwardGetWorkspaceSize, &missing);
  Find(ops, "aclnnSiluBackward", &a.aclnnSiluBackward, &missing);
  Find(ops, "aclnnMishBackwardGetWorkspaceSize", &a.aclnnMishBackwardGetWorkspaceSize, &missing);
  Find(ops, "aclnnMishBackward", &a.aclnnMishBackward, &missing);
  Find(ops, "aclnnGroupNormSwishGradGetWorkspaceSize", &a.aclnnGroupNormSwishGradGetWorkspaceSize, &missing);
  Find(ops, "aclnnGroupNormSwishGrad", &a.aclnnGroupNormSwishGrad, &missing);
  Find(ops, "aclnnGroupNormSwishGetWorkspaceSize", &a.aclnnGroupNormSwishGetWorkspaceSize, &missing);
  Find(ops, "aclnnGroupNormSwish", &a.aclnnGroupNormSwish, &missing);
  if (!missing.empty()) loaded.error = "this CANN lacks " + missing + " (CANN 8.0 or newer has them)";
  return loaded;
}

}  // namespace

const CannApi* Cann(std::string* error) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = Load(); });
  if (!loaded.error.empty()) {
    *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

int AclDataType(DType t) {
  switch (t) {
    case DType::kFloat16:
      return kAclFloat16;
    case DType::kBFloat16:
      return kAclBFloat16;
    default:
      return kAclFloat;
  }
}

Device::~Device() {
  for (aclTensor* tensor : tensors_) api_->aclDestroyTensor(tensor);
  for (void* block : blocks_) allocator_->Free(allocator_, block);
  if (allocator_ != nullptr) Api().ReleaseAllocator(allocator_);
}

OrtStatus* Device::Open(OrtKernelContext* context, const char* op, const TensorView& device_input) {
  op_ = op;
  std::string error;
  api_ = Cann(&error);
  if (api_ == nullptr) return Api().CreateStatus(ORT_FAIL, (std::string("[") + op + "] " + error).c_str());
  ASCEND_GRAD_RETURN_IF_ERROR(Api().KernelContext_GetGPUComputeStream(context, &stream_));
  const OrtMemoryInfo* memory = nullptr;
  ASCEND_GRAD_RETURN_IF_ERROR(Api().GetTensorMemoryInfo(device_input.value, &memory));
  return Api().KernelContext_GetAllocator(context, memory, &allocator_);
}

OrtStatus* Device::Tensor(const TensorView& view, DType type, const std::vector<int64_t>& shape, aclTensor** out) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) {
    if (!CheckedMul(strides[k], shape[k], &strides[k - 1])) {
      return InvalidArgument(op_, "the strides of " + ShapeString(shape) + " overflow int64");
    }
  }
  const int64_t none = 0;  // a valid pointer for rank 0
  const int64_t* dims = shape.empty() ? &none : shape.data();
  *out = api_->aclCreateTensor(dims, shape.size(), AclDataType(type), shape.empty() ? &none : strides.data(), 0,
                               kAclFormatND, dims, shape.size(), view.data);
  if (*out == nullptr) return Failure("aclCreateTensor", -1);
  tensors_.push_back(*out);
  return nullptr;
}

OrtStatus* Device::Allocate(size_t bytes, void** out) {
  *out = allocator_->Alloc(allocator_, bytes);
  if (*out == nullptr) {
    return Api().CreateStatus(ORT_FAIL, (std::string("[") + op_ + "] the CANN EP's allocator could not give " +
                                         std::to_string(bytes) + " bytes of device memory").c_str());
  }
  blocks_.push_back(*out);
  return nullptr;
}

OrtStatus* Device::Fill(void* data, size_t bytes, int value) {
  if (bytes == 0) return nullptr;
  const aclError status = api_->aclrtMemsetAsync(data, bytes, value, bytes, stream_);
  return status == 0 ? nullptr : Failure("aclrtMemsetAsync", status);
}

OrtStatus* Device::Failure(const char* function, int code) {
  const char* message = api_->aclGetRecentErrMsg();  // (reading it clears it)
  const std::string text = std::string("[") + op_ + "] " + function + " failed with status " + std::to_string(code) +
                           (message != nullptr && *message != '\0' ? std::string(": ") + message : std::string());
  return Api().CreateStatus(ORT_FAIL, text.c_str());
}

}  // namespace ascend_grad
