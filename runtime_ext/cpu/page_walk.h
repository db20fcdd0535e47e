// Walking streams without 4K aliasing.
//
// A CPU checks a load against the older stores still in flight on the low 12 address bits first;
// a false match there makes the load wait for the store (Intel and AMD alike). In a loop that loads
// inputs and stores an output, the loads run ahead of the stores: walking forward, an output whose
// place in the page lies 1..kAliasBytes after an input's makes nearly every load wait (16M float
// SiluBackward ran 2.3x slower on an AMD EPYC with AVX-512 with `self` 16 bytes into its page and
// the output from onnxruntime's arena); walking backward, one lying just before does. So each call
// picks the walk from the gaps, and when the two inputs ask for opposite walks it computes into a
// scratch block placed clear of all three streams. The arithmetic per element is the same on
// every walk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "cpu/simd.h"

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

constexpr uintptr_t kPageBytes = 4096;
// how far the loads may run ahead of pending stores (an out-of-order window of vector loads)
constexpr uintptr_t kAliasBytes = 1024;
// the scratch block of a staged walk: whole vectors of any type, half a page (see StagedLoop)
constexpr size_t kStageBytes = 2048;

// bytes from `earlier`'s place in its page forward to `later`'s
inline uintptr_t PageGap(const void* later, const void* earlier) {
  return (reinterpret_cast<uintptr_t>(later) - reinterpret_cast<uintptr_t>(earlier)) % kPageBytes;
}
inline bool ForwardStalls(uintptr_t out_gap) { return out_gap != 0 && out_gap <= kAliasBytes; }
inline bool BackwardStalls(uintptr_t out_gap) { return out_gap >= kPageBytes - kAliasBytes; }

enum class Walk { kForward, kBackward, kStaged };

// The walk for an output and up to two input streams (nullptr: not a stream of out's element size).
inline Walk ChooseWalk(const void* out, const void* a, const void* b) {
  bool forward = true, backward = true;
  for (const void* input : {a, b}) {
    if (input == nullptr) continue;
    const uintptr_t gap = PageGap(out, input);
    forward = forward && !ForwardStalls(gap);
    backward = backward && !BackwardStalls(gap);
  }
  return forward ? Walk::kForward : backward ? Walk::kBackward : Walk::kStaged;
}

// A kStageBytes block inside `room` (kStageBytes + kPageBytes bytes, 64-byte aligned) that the
// inputs can be walked forward into and that can be copied backward to out without aliasing:
// three windows of kAliasBytes are ruled out, so a 64-byte-aligned place is always left.
inline unsigned char* PlaceStage(unsigned char* room, const void* dy, const void* x, const void* out) {
  for (uintptr_t shift = 0; shift < kPageBytes; shift += 64) {
    unsigned char* stage = room + shift;
    if (!ForwardStalls(PageGap(stage, dy)) && !ForwardStalls(PageGap(stage, x)) && !BackwardStalls(PageGap(out, stage))) {
      return stage;
    }
  }
  return room;  // (unreachable: 3 windows cannot cover the page)
}

// memcpy walking down from the end, in whole vectors with non-temporal stores (`to` is aligned to
// the vector width); what does not fill a vector goes first.
inline void StreamBackward(const void* from, void* to, size_t bytes) {
  const auto* src = static_cast<const unsigned char*>(from);
  auto* dst = static_cast<unsigned char*>(to);
#if defined(__AVX512F__)
  constexpr size_t kUnit = 64;
#elif defined(__AVX2__)
  constexpr size_t kUnit = 32;
#else
  constexpr size_t kUnit = 16;
#endif
  size_t k = bytes - bytes % kUnit;
  std::memcpy(dst + k, src + k, bytes - k);
  while (k > 0) {
    k -= kUnit;
#if defined(__AVX512F__)
    const __m512i v = _mm512_loadu_si512(src + k);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + k), v);
#elif defined(__AVX2__)
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + k), v);
#else
    std::memcpy(dst + k, src + k, kUnit);
#endif
  }
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
