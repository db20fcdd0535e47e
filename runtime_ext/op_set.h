// The op set's identity; the Python package holds the same two values (ascend_grad.DOMAIN and
// ascend_grad.OPSET_VERSION) and tests/runtime_ext checks that they agree.
#pragma once

namespace ascend_grad {

constexpr const char* kDomain = "ascend.grad";
constexpr int kOpsetVersion = 1;

}  // namespace ascend_grad
