// The loop every elementwise gradient shares: load two inputs of any float type, apply the op's
// vector math, round once to the output type. Tails go through a padded vector, so every element
// takes the same arithmetic (results do not depend on where a chunk boundary falls, nor on the
// order the vectors are walked in).
#pragma once

#include <limits>

#include "cpu/kernels.h"
#include "cpu/page_walk.h"
#include "cpu/simd.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

// The inputs are fetched into L1 2 KiB ahead of the walk. Behind non-temporal stores the hardware
// prefetchers of an Intel Xeon (Sapphire Rapids class) fell behind: 16M SiluBackward, 1 thread, a
// C++ loop around the kernel walked forward, AVX-512 bfloat16 14.7-19.5 -> 7.8-8.2 ms, float
// 10.4-13.1 -> 7.9-9.6; AVX2 float 18-31 -> 10.4-12.5 (backward walks gained less: 8.5-9.9 ->
// 8.4-9.4 and 11.8-13.2 -> 9.8-10.7). Behind cached stores too, with the arrays in L3: 1M
// MishBackward, same Xeon, 7 placements, interleaved runs, AVX-512 float 1 thread 0.449-0.495 ->
// 0.445-0.467 ms, 2 threads 0.237-0.260 -> 0.227-0.234, float16 0.480-0.529 -> 0.461-0.476; AVX2
// and bfloat16 and 1M SiluBackward (already within 5% at every placement) stayed within noise, and
// arrays in L1 or L2 (8K, 64K) timed the same. A prefetch is a hint: it never faults, and its
// address is formed as an integer, so it may lie outside the array.
constexpr uintptr_t kPrefetchBytes = 2048;
inline void PrefetchAhead(const void* p, bool backward) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + (backward ? 0 - kPrefetchBytes : kPrefetchBytes);
  __builtin_prefetch(reinterpret_cast<const void*>(at), 0, 3);
}

// The loop takes kSteps vectors a step (simd.h) and loads them all before it stores any: fewer loads
// follow a store they are 4K-aliased with. Two a step at first: Intel Xeon (Sapphire Rapids
// class), 16M float, one thread, 7 placements, interleaved runs: SiluBackward 8.73-9.50 -> 8.48-9.00
// ms, MishBackward 8.70-9.93 -> 8.95-9.11. First taken only where a vector is a whole cache line (AVX-512 float) and for float16;
// with the prefetch and masked tails of later changes, every type gained from it too (same Xeon,
// one thread, 9 to 13 placements, interleaved child processes, ms over the placements): AVX-512
// bfloat16 16M SiluBackward 6.33-7.03 -> 6.23-6.46, MishBackward 8.82-9.47 -> 8.00-8.55, 2 threads
// SiluBackward 3.25-3.69 -> 3.15-3.32; 1M MishBackward 0.530-0.552 -> 0.491-0.518; AVX2 float 16M
// SiluBackward 9.05-10.70 -> 9.20-10.17, bfloat16 14.9-15.6 -> 14.1-14.8; AVX2 float16 and float 1M
// within noise or faster; the scalar path 8.5-8.8 -> 7.9-8.1. (Measured the other way before those
// changes: AVX2 float 16M SiluBackward 10.47 -> 10.87 ms, AVX-512 bfloat16 7.97 -> 8.39.)

// out[i] = Op(dy[i], x[i]) for i < n. The first `head` elements (fewer than a vector) and the
// last ones go through padded vectors, so the whole vectors between store to `out + head` on.
template <typename Op, typename TDy, typename TX, typename TOut, bool kDyBroadcast, bool kXBroadcast, bool kStream,
          bool kBackward = false>
void ElementwiseLoop(const TDy* dy, const TX* x, TOut* out, size_t n, size_t head = 0) {
  const Vec dy_one = kDyBroadcast ? Vec::Broadcast(ToFloat(dy[0])) : Vec::Zero();
  const Vec x_one = kXBroadcast ? Vec::Broadcast(ToFloat(x[0])) : Vec::Zero();
  // NaN results as one quiet NaN: where two NaN operands meet, x86 keeps the one in a given operand
  // position, which the compiler picks per code site, so the pair, single and partial steps (which
  // one takes an element depends on the placement and the walk) gave NaNs of either sign
  const Vec nan = Vec::Broadcast(std::numeric_limits<float>::quiet_NaN());
  auto apply = [&nan](Vec a, Vec b) {
    const Vec r = Op::Apply(a, b);
    return Select(IsNaN(r), nan, r);
  };
  auto whole = [&](size_t i) {
    if (!kDyBroadcast) PrefetchAhead(dy + i, kBackward);
    if (!kXBroadcast) PrefetchAhead(x + i, kBackward);
    const Vec a = kDyBroadcast ? dy_one : Vec::Load(dy + i);
    const Vec b = kXBroadcast ? x_one : Vec::Load(x + i);
    if (kStream) {
      apply(a, b).Stream(out + i);
    } else {
      apply(a, b).Store(out + i);
    }
  };
  auto step = [&](size_t i) {  // kSteps vectors from i
    Vec a[kSteps], b[kSteps];
    for (int k = 0; k < kSteps; ++k) {
      if (!kDyBroadcast) PrefetchAhead(dy + i + k * kLanes, kBackward);
      if (!kXBroadcast) PrefetchAhead(x + i + k * kLanes, kBackward);
    }
    for (int k = 0; k < kSteps; ++k) {
      a[k] = kDyBroadcast ? dy_one : Vec::Load(dy + i + k * kLanes);
      b[k] = kXBroadcast ? x_one : Vec::Load(x + i + k * kLanes);
    }
    for (int k = 0; k < kSteps; ++k) a[k] = apply(a[k], b[k]);
    for (int k = 0; k < kSteps; ++k) {
      if (kStream) {
        a[k].Stream(out + i + k * kLanes);
      } else {
        a[k].Store(out + i + k * kLanes);
      }
    }
  };
  auto partial = [&](size_t i, size_t count) {
    if (count == 0) return;
    const Vec a = kDyBroadcast ? dy_one : LoadPartial(dy + i, count);
    const Vec b = kXBroadcast ? x_one : LoadPartial(x + i, count);
    StorePartial(apply(a, b), out + i, count);
  };
  if (head > n) head = n;
  const size_t end = n - (n - head) % kLanes;  // whole vectors in [head, end)
  constexpr size_t kSpan = kSteps * kLanes;
  if (kBackward) {
    partial(end, n - end);
    size_t i = end;
    for (; i - head >= kSpan; i -= kSpan) step(i - kSpan);
    while (i > head) whole(i -= kLanes);
    partial(0, head);
  } else {
    partial(0, head);
    size_t i = head;
    for (; end - i >= kSpan; i += kSpan) step(i);
    for (; i < end; i += kLanes) whole(i);
    partial(end, n - end);
  }
}

// ElementwiseLoop walked as `walk` says
template <typename Op, typename TDy, typename TX, typename TOut, bool kDyBroadcast, bool kXBroadcast, bool kStream>
void Walked(Walk walk, const TDy* dy, const TX* x, TOut* out, size_t n, size_t head = 0) {
  if (walk == Walk::kBackward) {
    ElementwiseLoop<Op, TDy, TX, TOut, kDyBroadcast, kXBroadcast, kStream, true>(dy, x, out, n, head);
  } else {
    ElementwiseLoop<Op, TDy, TX, TOut, kDyBroadcast, kXBroadcast, kStream>(dy, x, out, n, head);
  }
}

template <typename Op, typename TDy, typename TX, typename TOut>
void Elementwise(const void* dy, bool dy_broadcast, const void* x, bool x_broadcast, void* out, size_t n, bool stream) {
  const auto* a = static_cast<const TDy*>(dy);
  const auto* b = static_cast<const TX*>(x);
  auto* c = static_cast<TOut*>(out);
  // only an input of the output's element size keeps its place in the page relative to out
  const void* dy_stream = !dy_broadcast && sizeof(TDy) == sizeof(TOut) ? dy : nullptr;
  const void* x_stream = !x_broadcast && sizeof(TX) == sizeof(TOut) ? x : nullptr;
  const Walk walk = ChooseWalk(out, dy_stream, x_stream);
  const Walk stream_walk = StreamsWalkByGap() ? walk : Walk::kForward;
  size_t head = 0;
  if (dy_broadcast && x_broadcast) {
    ElementwiseLoop<Op, TDy, TX, TOut, true, true, false>(a, b, c, n);
  } else if (dy_broadcast) {
    Walked<Op, TDy, TX, TOut, true, false, false>(walk, a, b, c, n);
  } else if (x_broadcast) {
    Walked<Op, TDy, TX, TOut, false, true, false>(walk, a, b, c, n);
  } else if (stream && (stream_walk == Walk::kForward || kStreamsBackward<TOut>) && StreamHead(c, &head)) {
    // the big same-shape case
    Walked<Op, TDy, TX, TOut, false, false, true>(stream_walk, a, b, c, n, head);
    StreamFence();
  } else {
    Walked<Op, TDy, TX, TOut, false, false, false>(walk, a, b, c, n);
  }
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
