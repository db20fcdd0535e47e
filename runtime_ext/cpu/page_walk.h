// Walking streams without 4K aliasing.
//
// A CPU checks a load against the older stores still in flight on the low 12 address bits first;
// a false match there makes the load wait for the store (Intel and AMD alike). In a loop that loads
// inputs and stores an output, the loads run ahead of the stores: walking forward, an output whose
// place in the page lies 1..kAliasBytes after an input's makes nearly every load wait; walking
// backward, one lying just before does. The stall is worst behind non-temporal stores (16M float
// SiluBackward, AMD EPYC Zen 3, AVX2, one thread, inputs 16 and out 64 bytes into their pages:
// 39.8 ms forward vs 20.7 backward; issue 13 saw 2.3x on a Zen 4 with AVX-512); behind cached
// stores it cost 0-25% in the placements measured. So each call picks the walk from the gaps; when
// the two inputs ask for opposite walks, the output is written through the cache, forward
// (measured there at 16M over four such placements, in one run: 17.4-20.4 ms through the cache,
// 19.0-21.0 staged through a scratch block placed clear of all three streams, and 19.8-20.7 at
// placements with no stall). The arithmetic per element is the same on every walk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "cpu/simd.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

constexpr uintptr_t kPageBytes = 4096;
// how far the loads may run ahead of pending stores (an out-of-order window of vector loads)
constexpr uintptr_t kAliasBytes = 1024;

// bytes from `earlier`'s place in its page forward to `later`'s
inline uintptr_t PageGap(const void* later, const void* earlier) {
  return (reinterpret_cast<uintptr_t>(later) - reinterpret_cast<uintptr_t>(earlier)) % kPageBytes;
}
inline bool ForwardStalls(uintptr_t out_gap) { return out_gap != 0 && out_gap <= kAliasBytes; }
inline bool BackwardStalls(uintptr_t out_gap) { return out_gap >= kPageBytes - kAliasBytes; }

enum class Walk { kForward, kBackward, kNeither };

// The walk for an output and up to two input streams (nullptr: not a stream of out's element size).
inline Walk ChooseWalk(const void* out, const void* a, const void* b) {
  bool forward = true, backward = true;
  for (const void* input : {a, b}) {
    if (input == nullptr) continue;
    const uintptr_t gap = PageGap(out, input);
    forward = forward && !ForwardStalls(gap);
    backward = backward && !BackwardStalls(gap);
  }
  return forward ? Walk::kForward : backward ? Walk::kBackward : Walk::kNeither;
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
