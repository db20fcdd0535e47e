// The slice of onnxruntime's C API the kernels use, behind small helpers.
//
// The library negotiates the C API version with the running onnxruntime (1.19 ... latest) and only
// calls functions that exist in every version from kMinApiVersion on: KernelContext_GetInput /
// GetOutput, GetTensorMutableData, GetTensorTypeAndShape, KernelContext_ParallelFor (17).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "onnxruntime_c_api.h"

namespace ascend_grad {

constexpr uint32_t kMinApiVersion = 17;  // KernelContext_ParallelFor

const OrtApi& Api();
void SetApi(const OrtApi* api);

// The status every bad input gets: ORT_INVALID_ARGUMENT, "[Op] message".
OrtStatus* InvalidArgument(const char* op, const std::string& message);

#define ASCEND_GRAD_RETURN_IF_ERROR(expr) \
  do {                                    \
    OrtStatus* status_ = (expr);          \
    if (status_ != nullptr) return status_; \
  } while (0)

std::string ShapeString(const std::vector<int64_t>& shape);
int64_t ElementCount(const std::vector<int64_t>& shape);

// An input or output tensor: its element type, shape and data (data is null for an output the node
// leaves out).
struct TensorView {
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  std::vector<int64_t> shape;
  void* data = nullptr;
  const OrtValue* value = nullptr;  // onnxruntime's value (null for an output the node leaves out)
};

OrtStatus* GetInput(OrtKernelContext* context, size_t index, TensorView* out);
OrtStatus* GetOutput(OrtKernelContext* context, size_t index, const std::vector<int64_t>& shape, TensorView* out);

// Attributes, read when the kernel is created.
OrtStatus* ReadAttribute(const OrtKernelInfo* info, const char* op, const char* name, int64_t* value, const int64_t* fallback);
OrtStatus* ReadAttribute(const OrtKernelInfo* info, const char* op, const char* name, float* value, float fallback);
OrtStatus* ReadAttribute(const OrtKernelInfo* info, const char* op, const char* name, std::string* value, const char* fallback);

// Run body(task) for task in [0, tasks) on onnxruntime's intra-op thread pool.
template <typename Body>
OrtStatus* ParallelFor(OrtKernelContext* context, size_t tasks, Body& body) {
  if (tasks == 0) return nullptr;
  if (tasks == 1) {
    body(size_t{0});
    return nullptr;
  }
  auto call = [](void* data, size_t task) { (*static_cast<Body*>(data))(task); };
  return Api().KernelContext_ParallelFor(context, call, tasks, 0, &body);
}

}  // namespace ascend_grad
