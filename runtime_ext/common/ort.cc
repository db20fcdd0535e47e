#include "common/ort.h"

#include <cstring>

namespace ascend_grad {

namespace {
const OrtApi* g_api = nullptr;
}

const OrtApi& Api() { return *g_api; }
void SetApi(const OrtApi* api) { g_api = api; }

OrtStatus* InvalidArgument(const char* op, const std::string& message) {
  const std::string text = std::string("[") + op + "] " + message;
  return Api().CreateStatus(ORT_INVALID_ARGUMENT, text.c_str());
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
OrtStatus* Describe(const OrtValue* value, TensorView* out) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  ASCEND_GRAD_RETURN_IF_ERROR(Api().GetTensorTypeAndShape(value, &info));
  size_t rank = 0;
  OrtStatus* status = Api().GetTensorElementType(info, &out->type);
  if (status == nullptr) status = Api().GetDimensionsCount(info, &rank);
  if (status == nullptr) {
    out->shape.assign(rank, 0);
    status = Api().GetDimensions(info, out->shape.data(), rank);
  }
  Api().ReleaseTensorTypeAndShapeInfo(info);
  ASCEND_GRAD_RETURN_IF_ERROR(status);
  out->value = value;
  return Api().GetTensorMutableData(const_cast<OrtValue*>(value), &out->data);
}
}  // namespace

OrtStatus* GetInput(OrtKernelContext* context, size_t index, TensorView* out) {
  const OrtValue* value = nullptr;
  ASCEND_GRAD_RETURN_IF_ERROR(Api().KernelContext_GetInput(context, index, &value));
  return Describe(value, out);
}

OrtStatus* GetOutput(OrtKernelContext* context, size_t index, const std::vector<int64_t>& shape, TensorView* out) {
  size_t count = 0;
  ASCEND_GRAD_RETURN_IF_ERROR(Api().KernelContext_GetOutputCount(context, &count));
  *out = TensorView{};
  if (index >= count) return nullptr;  // an optional output the node does not have
  OrtValue* value = nullptr;
  ASCEND_GRAD_RETURN_IF_ERROR(Api().KernelContext_GetOutput(context, index, shape.data(), shape.size(), &value));
  if (value == nullptr) return nullptr;  // left out with an empty name
  return Describe(value, out);
}

namespace {
// onnxruntime answers a read of an absent attribute with an error status: tell that apart from an
// attribute of the wrong type, which becomes an error naming the op.
OrtStatus* CheckRead(OrtStatus* status, const char* op, const char* name, bool* absent) {
  *absent = false;
  if (status == nullptr) return nullptr;
  const std::string message = Api().GetErrorMessage(status);
  Api().ReleaseStatus(status);
  if (message.find("No attribute") != std::string::npos) {
    *absent = true;
    return nullptr;
  }
  return InvalidArgument(op, std::string("attribute ") + name + ": " + message);
}
}  // namespace

OrtStatus* ReadAttribute(const OrtKernelInfo* info, const char* op, const char* name, int64_t* value, const int64_t* fallback) {
  bool absent = false;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckRead(Api().KernelInfoGetAttribute_int64(info, name, value), op, name, &absent));
  if (!absent) return nullptr;
  if (fallback == nullptr) return InvalidArgument(op, std::string("attribute ") + name + " is required");
  *value = *fallback;
  return nullptr;
}

OrtStatus* ReadAttribute(const OrtKernelInfo* info, const char* op, const char* name, float* value, float fallback) {
  bool absent = false;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckRead(Api().KernelInfoGetAttribute_float(info, name, value), op, name, &absent));
  if (absent) *value = fallback;
  return nullptr;
}

OrtStatus* ReadAttribute(const OrtKernelInfo* info, const char* op, const char* name, std::string* value, const char* fallback) {
  size_t size = 0;
  bool absent = false;
  ASCEND_GRAD_RETURN_IF_ERROR(CheckRead(Api().KernelInfoGetAttribute_string(info, name, nullptr, &size), op, name, &absent));
  if (absent) {
    *value = fallback;
    return nullptr;
  }
  std::string text(size, '\0');
  ASCEND_GRAD_RETURN_IF_ERROR(Api().KernelInfoGetAttribute_string(info, name, &text[0], &size));
  text.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  *value = text;
  return nullptr;
}

}  // namespace ascend_grad
