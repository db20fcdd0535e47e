// RegisterCustomOps: the library's only exported symbol. onnxruntime calls it from
// SessionOptions.register_custom_ops_library; it registers every op of the set in one domain, for
// the CPU EP (cpu/register.cc) and for the CANN EP (cann/register.cc). A runtime without the CANN EP
// never places a node there: the CANN registrations are inert on it.
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>

#include "cann/ops.h"
#include "common/custom_op.h"
#include "common/op_set.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"

namespace ascend_grad {
namespace {

OrtStatus* Build(Registry* registry, uint32_t version) {
  AddCpuKernels(registry, version);
#ifndef ASCEND_GRAD_NO_CANN  // (the sanitizer job's CPU-only build)
  AddCannKernels(registry, version);
#endif
  ASCEND_GRAD_RETURN_IF_ERROR(Api().CreateCustomOpDomain(kDomain, &registry->domain));
  for (auto& op : registry->ops) ASCEND_GRAD_RETURN_IF_ERROR(Api().CustomOpDomain_Add(registry->domain, op.get()));
  return nullptr;
}

}  // namespace
}  // namespace ascend_grad

namespace {
OrtStatus* Register(OrtSessionOptions* options, const OrtApiBase* api_base) {
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
    // a throw inside would leave the registry half built for the next call: the failure sticks
    built = Guarded("RegisterCustomOps", [&] {
      InjectFault("register", "*");
      SelectKernels();
      return Build(&registry, version);
    });
  });
  if (built != nullptr) return Api().CreateStatus(ORT_FAIL, Api().GetErrorMessage(built));
  return Api().AddCustomOpDomain(options, registry.domain);
}
}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                                                           const OrtApiBase* api_base) noexcept {
  try {
    return Register(options, api_base);
  } catch (const std::exception& e) {  // (the API may not be chosen yet: version 1 makes the status)
    char message[512];
    std::snprintf(message, sizeof(message), "[RegisterCustomOps] internal error: %s", e.what());
    return api_base->GetApi(1)->CreateStatus(ORT_RUNTIME_EXCEPTION, message);
  } catch (...) {
    return api_base->GetApi(1)->CreateStatus(ORT_RUNTIME_EXCEPTION, "[RegisterCustomOps] internal error");
  }
}
