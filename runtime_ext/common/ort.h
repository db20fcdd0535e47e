// The slice of onnxruntime's C API the kernels use, behind small helpers.
//
// The library negotiates the C API version with the running onnxruntime (1.19 ... latest) and only
// calls functions that exist in every version from kMinApiVersion on: KernelContext_GetInput /
// GetOutput, GetTensorMutableData, GetTensorTypeAndShape, KernelContext_ParallelFor (17).
//
// Nothing thrown in the library may cross the C API (onnxruntime would report a bare
// RUNTIME_EXCEPTION, or a worker thread would terminate the process): every entry point runs under
// Guarded, and ParallelFor carries a task's exception back to the calling thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
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

// Checked shape arithmetic: EVERY product of dims, counts and element sizes goes through these
// (signed overflow is undefined behaviour, and a wrapped count passes checks it should fail).
// false when an operand is negative or the exact result does not fit int64.
bool CheckedMul(int64_t a, int64_t b, int64_t* out);
// The product of dims[begin, end) (1 for none). Exact: 0 when any dim is 0, whatever the others.
bool CheckedProduct(const int64_t* begin, const int64_t* end, int64_t* out);
bool CheckedProduct(const std::vector<int64_t>& dims, int64_t* out);
// count * element_size bytes, false unless it fits ptrdiff_t (the largest any allocation can be).
bool CheckedBytes(int64_t count, size_t element_size, size_t* out);

// A tensor's element count; ORT_INVALID_ARGUMENT "[op] name (shape) ..." when it overflows.
OrtStatus* ElementCount(const char* op, const char* name, const std::vector<int64_t>& shape, int64_t* count);
// "[op] name (shape) is too large: why"
OrtStatus* TooLarge(const char* op, const char* name, const std::vector<int64_t>& shape, const std::string& why);

// The status an exception becomes at the C API: "[op] out of memory" for std::bad_alloc, else
// "[op] internal error: <what>". Allocates nothing of its own.
OrtStatus* InternalError(const char* op, const char* what, bool out_of_memory) noexcept;

// Tests only: ASCEND_GRAD_TEST_THROW=<stage>:<Op|*>:<bad_alloc|length_error|other> makes the
// library throw at that stage (create, compute, task, destroy, register) of that op, so that the
// guards at the C API can be seen to work. Read once; a no-op when unset.
void InjectFault(const char* stage, const char* op);

// Run f() (returning OrtStatus*) and turn anything it throws into a status naming `op`.
template <typename F>
OrtStatus* Guarded(const char* op, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc& e) {
    return InternalError(op, e.what(), true);
  } catch (const std::exception& e) {
    return InternalError(op, e.what(), false);
  } catch (...) {
    return InternalError(op, "an exception that is not a std::exception", false);
  }
}

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

// Run body(task) for task in [0, tasks) on onnxruntime's intra-op thread pool. A task that throws
// is caught on its thread (an exception must not unwind through onnxruntime's pool); the rest are
// skipped and the first exception is rethrown here, for the kernel's guard to report.
template <typename Body>
OrtStatus* ParallelFor(OrtKernelContext* context, size_t tasks, Body& body) {
  if (tasks == 0) return nullptr;
  if (tasks == 1) {
    InjectFault("task", "*");
    body(size_t{0});
    return nullptr;
  }
  struct Shared {
    Body* body;
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::exception_ptr error;
  } shared;
  shared.body = &body;
  auto call = [](void* data, size_t task) noexcept {
    auto* s = static_cast<Shared*>(data);
    if (s->failed.load(std::memory_order_relaxed)) return;
    try {
      InjectFault("task", "*");
      (*s->body)(task);
    } catch (...) {
      std::lock_guard<std::mutex> lock(s->mutex);
      if (!s->error) s->error = std::current_exception();
      s->failed.store(true, std::memory_order_relaxed);
    }
  };
  OrtStatus* status = Api().KernelContext_ParallelFor(context, call, tasks, 0, &shared);
  if (shared.error) {
    if (status != nullptr) Api().ReleaseStatus(status);
    std::rethrow_exception(shared.error);
  }
  return status;
}

}  // namespace ascend_grad
