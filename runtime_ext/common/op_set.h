// The op set's identity; the Python package holds the same two values (ascend_grad.DOMAIN and
// ascend_grad.OPSET_VERSION) and tests/runtime_ext checks that they agree.
#pragma once

namespace ascend_grad {

constexpr const char* kDomain = "ascend.grad";
constexpr int kOpsetVersion = 1;

// the ops' names, as every backend registers them
constexpr const char* kSiluBackward = "SiluBackward";
constexpr const char* kMishBackward = "MishBackward";
constexpr const char* kGroupNormSwishGrad = "GroupNormSwishGrad";
constexpr const char* kGroupNormSwish = "GroupNormSwish";

}  // namespace ascend_grad
