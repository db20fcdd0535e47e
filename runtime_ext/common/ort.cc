#include "common/ort.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

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

bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow(a, b, out);
}

bool CheckedProduct(const int64_t* begin, const int64_t* end, int64_t* out) {
  for (const int64_t* d = begin; d != end; ++d) {
    if (*d < 0) return false;
  }
  for (const int64_t* d = begin; d != end; ++d) {
    if (*d == 0) {  // an empty tensor holds nothing, whatever its other dims say
      *out = 0;
      return true;
    }
  }
  int64_t product = 1;
  for (const int64_t* d = begin; d != end; ++d) {
    if (!CheckedMul(product, *d, &product)) return false;
  }
  *out = product;
  return true;
}

bool CheckedProduct(const std::vector<int64_t>& dims, int64_t* out) {
  return CheckedProduct(dims.data(), dims.data() + dims.size(), out);
}

bool CheckedBytes(int64_t count, size_t element_size, size_t* out) {
  int64_t bytes = 0;
  if (!CheckedMul(count, static_cast<int64_t>(element_size), &bytes)) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

OrtStatus* TooLarge(const char* op, const char* name, const std::vector<int64_t>& shape, const std::string& why) {
  return InvalidArgument(op, std::string(name) + " " + ShapeString(shape) + " is too large: " + why);
}

OrtStatus* ElementCount(const char* op, const char* name, const std::vector<int64_t>& shape, int64_t* count) {
  if (CheckedProduct(shape, count)) return nullptr;
  return TooLarge(op, name, shape, "its element count overflows int64");
}

OrtStatus* InternalError(const char* op, const char* what, bool out_of_memory) noexcept {
  char text[512];  // (no std::string: this may run because memory ran out)
  if (out_of_memory) {
    std::snprintf(text, sizeof(text), "[%s] out of memory (%s)", op, what);
  } else {
    std::snprintf(text, sizeof(text), "[%s] internal error: %s", op, what);
  }
  return Api().CreateStatus(ORT_RUNTIME_EXCEPTION, text);
}

namespace {
struct Fault {
  std::string stage, op, kind;
};
const Fault* ReadFault() {
  const char* spec = std::getenv("ASCEND_GRAD_TEST_THROW");
  if (spec == nullptr || *spec == '\0') return nullptr;
  static Fault fault;
  const std::string text = spec;
  const size_t a = text.find(':'), b = text.find(':', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos) return nullptr;
  fault = {text.substr(0, a), text.substr(a + 1, b - a - 1), text.substr(b + 1)};
  return &fault;
}
}  // namespace

void InjectFault(const char* stage, const char* op) {
  static const Fault* const fault = ReadFault();
  if (fault == nullptr || fault->stage != stage || (fault->op != "*" && fault->op != op)) return;
  if (fault->kind == "bad_alloc") throw std::bad_alloc();
  if (fault->kind == "length_error") throw std::length_error("injected length_error");
  throw 42;  // not a std::exception
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
