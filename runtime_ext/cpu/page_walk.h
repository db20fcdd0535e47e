// Walking streams without 4K aliasing.
//
// A CPU checks a load against the older stores still in flight on the low 12 address bits first;
// a false match there makes the load wait for the store (Intel and AMD alike). In a loop that loads
// inputs and stores an output, the loads run ahead of the stores: walking forward, an output whose
// place in the page lies 1..kAliasBytes after an input's makes nearly every load wait; walking
// backward, one lying just before does. The stall is worst behind non-temporal stores (16M float
// SiluBackward, AMD EPYC Zen 3, AVX2, one thread, inputs 16 and out 64 bytes into their pages:
// 39.8 ms forward vs 20.7 backward; issue 13 saw 2.3x on a Zen 4 with AVX-512); behind cached
// stores it cost 0-25% in the placements measured. So each call picks the walk from the gaps.
// When the two inputs ask for opposite walks, the one the arithmetic starts from (x, which goes
// through exp) gets its way: its loads head the dependency chain, while the gradient's are used
// last and wait in the chain's shadow. 16M float SiluBackward, same machine, non-temporal stores,
// medians of a C++ loop around the kernel: (gradOutput, self, out) at (128, 16, 64) bytes into
// their pages 31.9 ms forward (self's loads stall) vs 18.0 backward (gradOutput's do); at (16, 128,
// 64) 18.0 forward vs 18.2 backward; (0, 0, 0) 16.6. (Before: through the cache, forward, about
// 1.2-1.3x the best; staging the stalling input through a scratch block cost more than the stall.)
// Streamed outputs on Intel walk forward whatever the gaps (StreamsWalkByGap): on an Intel Xeon
// (Sapphire Rapids class), with the inputs prefetched (elementwise_kernel.h), a forward walk did not
// stall at any placement and a backward one ran slower at all (C++ loop, 16M float SiluBackward,
// one thread, 6 placements: 3-17%). bench/alignment.py's placements, same case: the walk by gap
// 7.8-10.2 ms, always forward 7.9-8.7; 2 threads, 16M float MishBackward 4.4-5.3 vs 4.4-4.8; the
// AVX2 path on the same Xeon, SiluBackward at the placements the gaps walk backward, float 12.1-12.3
// vs 11.2-11.3, bfloat16 16.9-17.4 vs 16.0-16.1. Cached outputs keep the rule there (1M float
// MishBackward, 2 threads: by gap 0.25-0.27, forward 0.25-0.28; float GroupNormSwish (2, 320, 64,
// 64), one thread, at the placements the gaps walk backward: 1.15-1.18 ms vs 1.21-1.33 forward).
// The arithmetic per element is the same on every walk.
#pragma once

#include <cstddef>
#include <cstdint>

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

enum class Walk { kForward, kBackward };

// The walk for an output and up to two input streams (nullptr: not a stream of out's element
// size): `first` is the input the arithmetic starts from, `last` the one it uses last.
inline Walk ChooseWalk(const void* out, const void* last, const void* first) {
  auto free = [out](const void* input, bool forward) {
    if (input == nullptr) return true;
    const uintptr_t gap = PageGap(out, input);
    return forward ? !ForwardStalls(gap) : !BackwardStalls(gap);
  };
  if (free(first, true) && free(last, true)) return Walk::kForward;
  if (free(first, false) && free(last, false)) return Walk::kBackward;
  return free(first, true) ? Walk::kForward : Walk::kBackward;
}

// Over a row of n values: part(0, head) for its first head values (if any; head < kLanes), then its
// whole vectors after them, kSteps at a time by step(i) for [i, i + kSteps kLanes) while they last,
// then one at a time by whole(i) for [i, i + kLanes), and part(i, count) once for the partial vector
// at its end (if any); in address order, or in reverse when `backward`.
template <int kSteps, typename Step, typename Whole, typename Part>
void WalkRowSteps(int64_t n, bool backward, Step step, Whole whole, Part part, int64_t head = 0) {
  constexpr int64_t kSpan = kSteps * static_cast<int64_t>(kLanes);
  if (head > n) head = n;
  const int64_t end = n - (n - head) % static_cast<int64_t>(kLanes);
  if (backward) {
    if (end < n) part(end, static_cast<size_t>(n - end));
    int64_t i = end;
    for (; i - head >= kSpan; i -= kSpan) step(i - kSpan);
    while (i > head) whole(i -= kLanes);
    if (head > 0) part(0, static_cast<size_t>(head));
  } else {
    if (head > 0) part(0, static_cast<size_t>(head));
    int64_t i = head;
    for (; end - i >= kSpan; i += kSpan) step(i);
    for (; i < end; i += kLanes) whole(i);
    if (end < n) part(end, static_cast<size_t>(n - end));
  }
}

// WalkRowSteps one whole vector at a time
template <typename Whole, typename Part>
void WalkRow(int64_t n, bool backward, Whole whole, Part part, int64_t head = 0) {
  WalkRowSteps<1>(n, backward, whole, whole, part, head);
}

// Non-temporal stores walked backward pay only when each fills half a cache line or more (AVX2's
// 16-byte float16/bfloat16 stores: 16M bfloat16 SiluBackward 26.9 ms streamed backward vs 24.1
// through the cache, AMD EPYC Zen 3; 32-byte float stores: 39.8 -> 20.7 ms, the top of this file).
template <typename TOut>
constexpr bool kStreamsBackward = kLanes * sizeof(TOut) >= 32;

// Elements before out + head is aligned for non-temporal stores (a vector's bytes of TOut, so the
// head is less than a vector); false if no whole number is.
template <typename TOut>
bool StreamHead(const TOut* out, size_t* head) {
  constexpr uintptr_t kAlign = kLanes * sizeof(TOut);
  const uintptr_t bytes = (kAlign - reinterpret_cast<uintptr_t>(out) % kAlign) % kAlign;
  *head = bytes / sizeof(TOut);
  return bytes % sizeof(TOut) == 0;
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
