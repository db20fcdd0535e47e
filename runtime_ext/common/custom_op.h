// One OrtCustomOp per (op, dtype combination). onnxruntime merges the registrations of one name
// into a schema whose inputs accept the union of the types, and picks the kernel whose types match
// the node: that is how one op serves every dtype pair its onnxscript function serves.
//
// A Kernel type provides:
//   static constexpr const char* kName;
//   static constexpr const char* kProvider;   // the execution provider; nullptr = CPU
//   static constexpr size_t kInputs, kOutputs, kRequiredOutputs;   // outputs past these are optional
//   OrtStatus* Init(const OrtKernelInfo*, const DType* types);   // attributes; an error drops the kernel
//   OrtStatus* Compute(OrtKernelContext*);
#pragma once

#include <array>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "common/ort.h"

namespace ascend_grad {

template <typename Kernel>
struct TypedOp : OrtCustomOp {
  // the dtype of each input then each output
  std::array<DType, Kernel::kInputs + Kernel::kOutputs> types;

  TypedOp(uint32_t api_version, const std::array<DType, Kernel::kInputs + Kernel::kOutputs>& dtypes)
      : OrtCustomOp{}, types(dtypes) {
    // onnxruntime reads only the members that exist in the API version we report, so the same
    // binary registers with 1.19 (API 19) and with the newest runtime.
    version = api_version;
    GetName = [](const OrtCustomOp*) { return Kernel::kName; };
    GetExecutionProviderType = [](const OrtCustomOp*) -> const char* { return Kernel::kProvider; };
    GetInputTypeCount = [](const OrtCustomOp*) { return Kernel::kInputs; };
    GetOutputTypeCount = [](const OrtCustomOp*) { return Kernel::kOutputs; };
    GetInputType = [](const OrtCustomOp* op, size_t i) { return OnnxType(Self(op)->types[i]); };
    GetOutputType = [](const OrtCustomOp* op, size_t i) { return OnnxType(Self(op)->types[Kernel::kInputs + i]); };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    GetOutputCharacteristic = [](const OrtCustomOp*, size_t i) {
      return i < Kernel::kRequiredOutputs ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
    };
    GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
    GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
    // The three calls that run our code: each under a guard (no exception crosses the C API).
    CreateKernelV2 = [](const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** kernel) noexcept -> OrtStatusPtr {
      return Guarded(Kernel::kName, [&]() -> OrtStatus* {
        InjectFault("create", Kernel::kName);
        auto created = std::make_unique<Kernel>();
        ASCEND_GRAD_RETURN_IF_ERROR(created->Init(info, Self(op)->types.data()));
        *kernel = created.release();
        return nullptr;
      });
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* context) noexcept -> OrtStatusPtr {
      return Guarded(Kernel::kName, [&]() -> OrtStatus* {
        InjectFault("compute", Kernel::kName);
        return static_cast<Kernel*>(kernel)->Compute(context);
      });
    };
    KernelDestroy = [](void* kernel) noexcept {
      // nothing to report an error to: a throwing destructor is swallowed (and leaks, at worst)
      OrtStatus* status = Guarded(Kernel::kName, [&]() -> OrtStatus* {
        InjectFault("destroy", Kernel::kName);
        delete static_cast<Kernel*>(kernel);
        return nullptr;
      });
      if (status != nullptr) Api().ReleaseStatus(status);
    };
    GetStartVersion = [](const OrtCustomOp*) { return 1; };
    GetEndVersion = [](const OrtCustomOp*) { return INT_MAX; };
  }

 private:
  static const TypedOp* Self(const OrtCustomOp* op) { return static_cast<const TypedOp*>(op); }
};

// The ops one library registers, in its one domain. make_shared<TypedOp<K>> deletes through the real
// type (OrtCustomOp has no virtual destructor: a unique_ptr<OrtCustomOp> would be a mismatched
// delete, which the sanitizer job reports at unload).
struct Registry {
  OrtCustomOpDomain* domain = nullptr;
  std::vector<std::shared_ptr<OrtCustomOp>> ops;

  template <typename Kernel, typename... Types>
  void Add(uint32_t api_version, Types... types) {
    ops.push_back(std::make_shared<TypedOp<Kernel>>(api_version, std::array<DType, sizeof...(Types)>{types...}));
  }
};

}  // namespace ascend_grad
