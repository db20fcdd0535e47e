// RegisterCustomOps: the library's only exported symbol. onnxruntime calls it from
// SessionOptions.register_custom_ops_library; it registers every op of the set for every dtype
// combination its onnxscript function serves (when the library is registered, onnxruntime runs
// these kernels and ignores the model's function bodies, so a missing combination would break
// the model).
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "cpu/custom_op.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "op_set.h"

namespace ascend_grad {
namespace {

constexpr DType kF = DType::kFloat, kH = DType::kFloat16, kB = DType::kBFloat16;
constexpr DType kAll[] = {kF, kH, kB};

struct Registry {
  OrtCustomOpDomain* domain = nullptr;
  std::vector<std::unique_ptr<OrtCustomOp>> ops;
};

template <typename Kernel, typename... Types>
void Add(Registry* registry, uint32_t version, Types... types) {
  registry->ops.push_back(std::make_unique<TypedOp<Kernel>>(version, std::array<DType, sizeof...(Types)>{types...}));
}

OrtStatus* Build(Registry* registry, uint32_t version) {
  for (DType t : kAll) Add<SiluBackwardKernel>(registry, version, t, t, t);
  for (DType a : kAll) {
    for (DType b : kAll) {
      Add<MishBackwardKernel>(registry, version, a, b, Promote(a, b));
      Add<GroupNormSwishGradKernel>(registry, version, a, b, b, a, b, b, a, b, b);  // T, U: dy mean rstd x gamma beta -> dx dgamma dbeta
      Add<GroupNormSwishKernel>(registry, version, a, b, b, a, b, b);              // x gamma beta -> y mean rstd
    }
  }
  ASCEND_GRAD_RETURN_IF_ERROR(Api().CreateCustomOpDomain(kDomain, &registry->domain));
  for (auto& op : registry->ops) ASCEND_GRAD_RETURN_IF_ERROR(Api().CustomOpDomain_Add(registry->domain, op.get()));
  return nullptr;
}

}  // namespace
}  // namespace ascend_grad

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                                                           const OrtApiBase* api_base) {
  using namespace ascend_grad;
  // Negotiate the C API: the runtime's own version, capped at the headers' (ORT_API_VERSION).
  int major = 0, minor = 0;
  std::sscanf(api_base->GetVersionString(), "%d.%d", &major, &minor);
  const uint32_t version = major > 1 ? ORT_API_VERSION : static_cast<uint32_t>(minor < ORT_API_VERSION ? minor : ORT_API_VERSION);
  if (version < kMinApiVersion) {
    const std::string message = std::string("ascend-grad kernels need onnxruntime >= 1.17, this is ") + api_base->GetVersionString();
    return api_base->GetApi(1)->CreateStatus(ORT_FAIL, message.c_str());
  }
  static std::once_flag once;
  static Registry registry;
  static OrtStatus* built = nullptr;
  std::call_once(once, [&] {
    SetApi(api_base->GetApi(version));
    SelectKernels();
    built = Build(&registry, version);
  });
  if (built != nullptr) return Api().CreateStatus(ORT_FAIL, Api().GetErrorMessage(built));
  return Api().AddCustomOpDomain(options, registry.domain);
}
