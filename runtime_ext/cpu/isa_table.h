// The kernel table of one instruction set: included once by each isa_*.cc, after it defines
// ASCEND_GRAD_ISA, so every template below is compiled with that file's flags.
#pragma once

#include <type_traits>

#include "cpu/group_norm_swish_grad_kernel.h"
#include "cpu/group_norm_swish_kernel.h"
#include "cpu/kernels.h"
#include "cpu/mish_backward_kernel.h"
#include "cpu/silu_backward_kernel.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

template <typename TDy, typename TX>
constexpr ElementwiseFn MishFor() {
  // the output dtype is the promotion: equal types stay, any mix is float
  if constexpr (std::is_same_v<TDy, TX>) {
    return &MishBackward<TDy, TX, TDy>;
  } else {
    return &MishBackward<TDy, TX, float>;
  }
}

template <typename TDy>
constexpr void FillMishRow(ElementwiseFn (&row)[kNumDTypes]) {
  row[0] = MishFor<TDy, float>();
  row[1] = MishFor<TDy, Float16>();
  row[2] = MishFor<TDy, BFloat16>();
}

inline KernelTable MakeTable(const char* name) {
  KernelTable table{};
  table.isa = name;
  table.silu_backward[0] = &SiluBackward<float>;
  table.silu_backward[1] = &SiluBackward<Float16>;
  table.silu_backward[2] = &SiluBackward<BFloat16>;
  FillMishRow<float>(table.mish_backward[0]);
  FillMishRow<Float16>(table.mish_backward[1]);
  FillMishRow<BFloat16>(table.mish_backward[2]);
  table.group_norm_swish_grad[0] = &GroupNormSwishGrad<float>;
  table.group_norm_swish_grad[1] = &GroupNormSwishGrad<Float16>;
  table.group_norm_swish_grad[2] = &GroupNormSwishGrad<BFloat16>;
  table.group_norm_swish[0] = &GroupNormSwish<float>;
  table.group_norm_swish[1] = &GroupNormSwish<Float16>;
  table.group_norm_swish[2] = &GroupNormSwish<BFloat16>;
  return table;
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
