// One float vector type per instruction set, with the few operations the kernels need.
//
// Each instruction-set translation unit (isa_avx512.cc, isa_avx2.cc, isa_neon.cc, isa_generic.cc)
// defines ASCEND_GRAD_ISA and includes this header with its own compiler flags; everything lands in
// namespace ascend_grad::<ISA>, so no inline function compiled for AVX-512 can be picked by the
// linker for a CPU without it. NEON is chosen by isa_neon.cc's ASCEND_GRAD_NEON, not by the
// compiler's __ARM_NEON: every AArch64 compiler defines that, for the portable table too.
//
// The math (exp of a non-positive argument, reciprocal) is written here once per ISA: AVX2, NEON and
// the scalar path share one exp algorithm, AVX-512 takes a table that its permute makes cheap.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
// gcc 12's intrinsics start some vectors as `__Y = __Y` (_mm512_undefined_ps and kin), which its
// -Wuninitialized reports at every use (gcc bug 105593): quiet inside these headers only
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#elif defined(ASCEND_GRAD_NEON)
#if !defined(__aarch64__)
#error "the NEON kernel table is written for AArch64 (vdivq_f32, vrndnq_f32, vaddvq_f32, float64x2_t)"
#endif
#include <arm_neon.h>
#endif

#include "common/dtype.h"
#include "cpu/kernels.h"

#ifndef ASCEND_GRAD_ISA
#error "define ASCEND_GRAD_ISA (the namespace of this instruction set) before including simd.h"
#endif

// The math run once per vector (exp, sigmoid, each op's gradient) goes inline wherever it is used:
// gcc 12 called SwishGrad and SwishOf out of line from many of the loops that use them, the
// constants reloaded on every call. AMD EPYC Zen 4, AVX2, GroupNormSwish (2, 320, 64, 64) float, one
// thread, 3 placements, interleaved child processes, two runs: 3.71 -> 3.06 ms, 3.54 -> 2.91
// (1M float SiluBackward 0.82 -> 0.81, within noise). Same output bits.
#define ASCEND_GRAD_MATH inline __attribute__((always_inline))

namespace ascend_grad {
namespace ASCEND_GRAD_ISA {

// Vectors a loop step takes through that math: loaded together (before any store, which the
// compiler could not move a load above), computed side by side, stored together, so the core finds
// independent work beside each long exp-and-divide chain (compiled with -fschedule-insns,
// library/CMakeLists.txt). AMD EPYC Zen 4, AVX2, one thread, 3 placements, interleaved child processes,
// medians: GroupNormSwish (2, 320, 64, 64) float 3.06 -> 2.59 ms, bfloat16 4.19 -> 3.10, NHWC
// (2, 64, 64, 320) float 4.28 -> 3.52, bfloat16 6.15 -> 4.19; two steps -> four in the elementwise
// loop: 1M float MishBackward 1.17 -> 1.04, 16M SiluBackward 13.6 -> 11.9, 1M 0.78 -> 0.76. Not
// everywhere: NHWC GroupNormSwishGrad, whose vectors each load 6-8 per-channel values, ran slower
// four a step (float 5.19 -> 5.87 ms) and keeps one. Same output bits (not timed on AVX-512 here).
constexpr int kSteps = 4;

// exp(y) for y <= 0 (NaN propagates), AVX2 and scalar: Cody-Waite reduction y = n ln2 + r,
// |r| <= ln2/2, a degree-6 polynomial for e^r in Estrin's scheme,
// 1 + r (((c5 + c6 r) r^2 + (c3 + c4 r)) r^2 + (1 + c2 r)): a chain of 4 FMAs where Horner's has 6,
// which counts in loops that wait on their dependency chain (AVX2: SiluBackward 2%, MishBackward 4%,
// GroupNormSwishGrad 6% faster). Max error over every float argument with a normal result: 1.16 ulp
// with FMAs, 1.44 in the scalar path (Horner: 1.05, 1.34); tests/runtime_ext/test_exp.py checks.
// Then e^r * 2^n rounded once, subnormal results included (AVX2 scales by 2^(n + 24), exactly, then
// by 2^-24; the scalar path by 2^n in two exact halves). y < -104.5 gives exactly 0.
constexpr float kExpLow = -104.5f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// e^r ~ 1 + r (1 + r (c2 + r (c3 + r (c4 + r (c5 + r c6))))): fitted here (relative minimax,
// weighted least squares on Chebyshev nodes)
constexpr float kExpC6 = 0.001384365139529109f;
constexpr float kExpC5 = 0.00837415549904108f;
constexpr float kExpC4 = 0.04166800156235695f;
constexpr float kExpC3 = 0.16666431725025177f;
constexpr float kExpC2 = 0.4999999403953552f;

#if defined(__AVX512F__)

constexpr size_t kLanes = 16;
using Mask = __mmask16;

struct Vec {
  __m512 v;
  static Vec Broadcast(float f) { return {_mm512_set1_ps(f)}; }
  static Vec Zero() { return {_mm512_setzero_ps()}; }
  static Vec Load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Vec Load(const Float16* p) { return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))}; }
  static Vec Load(const BFloat16* p) { return FromBFloat16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  // one permute puts bfloat16 k in the high half of float lane k and zeroes the low halves
  static Vec FromBFloat16(__m256i bits) {
    const __m512i index = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    return {_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAA, index, _mm512_castsi256_si512(bits)))};
  }
  void Store(float* p) const { _mm512_storeu_ps(p, v); }
  void Store(Float16* p) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  void Store(BFloat16* p) const {
#if defined(__AVX512BF16__)
    // one instruction rounds to nearest even and keeps NaN, but flushes subnormal floats to zero:
    // a vector holding one (rare: |v| < 2^-126) takes the integer rounding, out of line
    if (__builtin_expect(_mm512_fpclass_ps_mask(v, 0x20) != 0, 0)) return StoreRounded(v, p);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
#else
    StoreRounded(v, p);
#endif
  }
  // float -> bfloat16 with integer arithmetic: round to nearest even, NaN made quiet
  __attribute__((noinline)) static void StoreRounded(__m512 v, BFloat16* p) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __m512i bits = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bits));
  }
  // non-temporal: f32 needs 64-byte, half types 32-byte alignment
  void Stream(float* p) const { _mm512_stream_ps(p, v); }
  void Stream(Float16* p) const {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  void Stream(BFloat16* p) const {
    alignas(32) BFloat16 bits[16];
    Store(bits);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm256_load_si256(reinterpret_cast<const __m256i*>(bits)));
  }
  friend Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
};

inline Vec Fma(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline Vec FnMadd(Vec a, Vec b, Vec c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c - a b
inline Vec Abs(Vec a) { return {_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(0x7FFFFFFF)))}; }
inline Vec Neg(Vec a) { return {_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(INT32_MIN)))}; }
inline Vec NegAbs(Vec a) { return {_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(INT32_MIN)))}; }
inline Mask SignSet(Vec a) { return _mm512_movepi32_mask(_mm512_castps_si512(a.v)); }  // see the AVX2 one
inline Mask IsNaN(Vec a) { return _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q); }
inline Vec Select(Mask m, Vec if_true, Vec if_false) { return {_mm512_mask_blend_ps(m, if_false.v, if_true.v)}; }
inline float ReduceAdd(Vec a) { return _mm512_reduce_add_ps(a.v); }
inline void StreamFence() { _mm_sfence(); }

// 1/d to ~1 ulp: the 14-bit estimate and one Newton step.
ASCEND_GRAD_MATH Vec Rcp(Vec d) {
  const __m512 r = _mm512_rcp14_ps(d.v);
  return {_mm512_fmadd_ps(r, _mm512_fnmadd_ps(d.v, r, _mm512_set1_ps(1.0f)), r)};
}

// AVX-512 takes a 16-entry table of 2^(j/16) (one register, read by one permute): y = (n + j/16) ln2
// + r, |r| <= ln2/32, e^y = 2^n 2^(j/16) e^r with e^r - 1 ~ r + r^2 (d2 + d3 r). Two vector operations
// fewer than the degree-6 polynomial (11 with the clamp), and more accurate: max error over every
// float argument in [-104.5, 0] with a normal result 0.99 ulp (the polynomial: 1.16), subnormal
// results within 0.99 of their last place; 2^n by scalef, rounded once.
constexpr float kExpD2 = 5.0001621246e-01f;  // relative minimax on |r| <= 1.001 ln2/32: 1.6e-9
constexpr float kExpD3 = 1.6666720808e-01f;

ASCEND_GRAD_MATH Vec ExpNeg(Vec y) {
  const __m512 x = _mm512_max_ps(_mm512_set1_ps(kExpLow), y.v);  // NaN stays: max returns its second operand
  // adding 1.5 * 2^19 (ulp 1/16) rounds x log2e to k = n + j/16 and leaves 16 k in the low mantissa
  // bits: j is t's low 4 bits, the permute's index
  const __m512 magic = _mm512_set1_ps(786432.0f);
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), magic);
  const __m512 k = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), x);  // exact: k ln2hi has at most 21 bits
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  // 2^(j/16), j = 15 .. 0, rounded to float
  const __m512 table = _mm512_set_ps(1.915206552e+00f, 1.834008098e+00f, 1.756252170e+00f, 1.681792855e+00f, 1.610490322e+00f,
                                     1.542210817e+00f, 1.476826191e+00f, 1.414213538e+00f, 1.354255557e+00f, 1.296839595e+00f,
                                     1.241857767e+00f, 1.189207077e+00f, 1.138788581e+00f, 1.090507746e+00f, 1.044273734e+00f, 1.0f);
  const __m512 scale = _mm512_permutexvar_ps(_mm512_castps_si512(t), table);
  const __m512 q = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(kExpD3), r, _mm512_set1_ps(kExpD2)), _mm512_mul_ps(r, r), r);
  // (2^(j/16) + 2^(j/16) q) 2^floor(k) in one rounding each, subnormal results included
  return {_mm512_scalef_ps(_mm512_fmadd_ps(scale, q, scale), k)};
}

// The first n <= kLanes lanes of a vector, by masked loads and stores (the masked-off lanes touch no
// memory). A copy through a stack buffer made the vector load after it wait for the copy's small
// stores: about 90 ns a row of GroupNormSwishGrad at HxW = 1 (Intel Xeon).
inline __mmask16 FirstLanes(size_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
inline Vec LoadPartial(const float* p, size_t n) { return {_mm512_maskz_loadu_ps(FirstLanes(n), p)}; }
inline Vec LoadPartial(const Float16* p, size_t n) { return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(FirstLanes(n), p))}; }
inline Vec LoadPartial(const BFloat16* p, size_t n) { return Vec::FromBFloat16(_mm256_maskz_loadu_epi16(FirstLanes(n), p)); }
inline void StorePartial(Vec v, float* p, size_t n) { _mm512_mask_storeu_ps(p, FirstLanes(n), v.v); }
inline void StorePartial(Vec v, Float16* p, size_t n) {
  _mm256_mask_storeu_epi16(p, FirstLanes(n), _mm512_cvtps_ph(v.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void StorePartial(Vec v, BFloat16* p, size_t n) {
  alignas(32) BFloat16 bits[kLanes];  // (one store and one load of the same 32 bytes: forwarded)
  v.Store(bits);
  _mm256_mask_storeu_epi16(p, FirstLanes(n), _mm256_load_si256(reinterpret_cast<const __m256i*>(bits)));
}
// v with the lanes from `count` on set to zero (a tail must not add padding into a sum)
inline Vec KeepFirst(Vec v, size_t count) { return {_mm512_maskz_mov_ps(FirstLanes(count), v.v)}; }

#elif defined(__AVX2__)

constexpr size_t kLanes = 8;
using Mask = __m256;

struct Vec {
  __m256 v;
  static Vec Broadcast(float f) { return {_mm256_set1_ps(f)}; }
  static Vec Zero() { return {_mm256_setzero_ps()}; }
  static Vec Load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static Vec Load(const Float16* p) { return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))}; }
  static Vec Load(const BFloat16* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(wide, 16))};
  }
  void Store(float* p) const { _mm256_storeu_ps(p, v); }
  void Store(Float16* p) const { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Half(p)); }
  void Store(BFloat16* p) const { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Half(p)); }
  // the 8 values rounded to float16 / bfloat16 (the pointer only picks the type)
  __m128i Half(Float16*) const { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  __m128i Half(BFloat16*) const {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    // pack the 8 low halves (values <= 0xFFFF, so unsigned saturation changes nothing)
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    return _mm256_castsi256_si128(packed);
  }
  // non-temporal: f32 needs 32-byte, half types 16-byte alignment
  void Stream(float* p) const { _mm256_stream_ps(p, v); }
  template <typename T>
  void Stream(T* p) const {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), Half(p));
  }
  friend Vec operator+(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
};

inline Vec Fma(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline Vec FnMadd(Vec a, Vec b, Vec c) { return {_mm256_fnmadd_ps(a.v, b.v, c.v)}; }
inline Vec Abs(Vec a) { return {_mm256_and_ps(a.v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)))}; }
inline Vec Neg(Vec a) { return {_mm256_xor_ps(a.v, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)))}; }
inline Vec NegAbs(Vec a) { return {_mm256_or_ps(a.v, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)))}; }
// lanes with the sign bit set (below zero, -0, NaN with the sign): blendv reads only that bit, so the
// vector is its own mask, no compare (sigmoid's branch; at -0 both branches give the same value)
inline Mask SignSet(Vec a) { return a.v; }
inline Mask IsNaN(Vec a) { return _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q); }
inline Vec Select(Mask m, Vec if_true, Vec if_false) { return {_mm256_blendv_ps(if_false.v, if_true.v, m)}; }
inline float ReduceAdd(Vec a) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
inline void StreamFence() { _mm_sfence(); }
// AVX2's reciprocal estimate has 12 bits: divide instead (one per vector, off the critical path).
ASCEND_GRAD_MATH Vec Rcp(Vec d) { return {_mm256_div_ps(_mm256_set1_ps(1.0f), d.v)}; }

ASCEND_GRAD_MATH Vec ExpNeg(Vec y) {
  const __m256 x = _mm256_max_ps(_mm256_set1_ps(kExpLow), y.v);  // NaN stays
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  // the polynomial times 2^-24, every coefficient scaled so (exactly: each step's result is the
  // unscaled one's times 2^-24, all normal), then times 2^(n + 24), a normal power of two for
  // n >= -150: the one rounding of p 2^n, subnormal results included; n = -151 (2^(n + 24) would be
  // subnormal) gives 0, as p 2^n rounds. (One multiply less on the chain than p 2^(n + 24) 2^-24.)
  constexpr float k = 0x1p-24f;
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 a = _mm256_fmadd_ps(_mm256_set1_ps(kExpC6 * k), r, _mm256_set1_ps(kExpC5 * k));
  const __m256 b = _mm256_fmadd_ps(_mm256_set1_ps(kExpC4 * k), r, _mm256_set1_ps(kExpC3 * k));
  const __m256 c = _mm256_fmadd_ps(_mm256_set1_ps(kExpC2 * k), r, _mm256_set1_ps(k));
  const __m256 p = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(a, r2, b), r2, c), r, _mm256_set1_ps(k));
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127 + 24));
  return {_mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)))};
}

// The first n <= kLanes float lanes by masked loads and stores (as AVX-512 does)
inline __m256i FirstLanes(size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Vec LoadPartial(const float* p, size_t n) { return {_mm256_maskload_ps(p, FirstLanes(n))}; }
inline void StorePartial(Vec v, float* p, size_t n) { _mm256_maskstore_ps(p, FirstLanes(n), v.v); }

// The first n <= 8 16-bit values: AVX2 has no 16-bit masked load or store, so the pairs go by
// 32-bit masked ones and an odd last value by itself (no copy through a buffer, whose byte-wise
// stores the next vector load would wait on; the masked-off lanes are never touched)
inline __m128i FirstPairs(size_t n) {
  return _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(n / 2)), _mm_setr_epi32(0, 1, 2, 3));
}
inline __m128i LoadHalves(const void* p, size_t n) {
  const __m128i pairs = _mm_maskload_epi32(static_cast<const int*>(p), FirstPairs(n));
  if (n % 2 == 0) return pairs;
  uint16_t last;
  std::memcpy(&last, static_cast<const unsigned char*>(p) + 2 * (n - 1), sizeof last);
  const __m128i at_last = _mm_cmpeq_epi16(_mm_set1_epi16(static_cast<short>(n - 1)), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm_blendv_epi8(pairs, _mm_set1_epi16(static_cast<short>(last)), at_last);
}
inline void StoreHalves(__m128i bits, void* p, size_t n) {
  _mm_maskstore_epi32(static_cast<int*>(p), FirstPairs(n), bits);
  if (n % 2 == 0) return;
  // value n - 1 moved to lane 0 (a byte shuffle takes its index at run time)
  const char at = static_cast<char>(2 * (n - 1));
  const uint16_t last = static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_shuffle_epi8(bits, _mm_setr_epi8(at, at + 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))));
  std::memcpy(static_cast<unsigned char*>(p) + 2 * (n - 1), &last, sizeof last);
}
inline Vec LoadPartial(const Float16* p, size_t n) { return {_mm256_cvtph_ps(LoadHalves(p, n))}; }
inline Vec LoadPartial(const BFloat16* p, size_t n) {
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(LoadHalves(p, n)), 16))};
}
inline void StorePartial(Vec v, Float16* p, size_t n) { StoreHalves(v.Half(p), p, n); }
inline void StorePartial(Vec v, BFloat16* p, size_t n) { StoreHalves(v.Half(p), p, n); }
inline Vec KeepFirst(Vec v, size_t count) { return {_mm256_and_ps(v.v, _mm256_castsi256_ps(FirstLanes(count)))}; }

#elif defined(ASCEND_GRAD_NEON)

// AArch64's Advanced SIMD, which every ARMv8-A CPU has: 128-bit vectors, written line for line as
// the AVX2 path, with the same exp algorithm and fused operations, so each element gets the same
// arithmetic as there.
constexpr size_t kLanes = 4;
using Mask = uint32x4_t;

struct Vec {
  float32x4_t v;
  static Vec Broadcast(float f) { return {vdupq_n_f32(f)}; }
  static Vec Zero() { return {vdupq_n_f32(0.0f)}; }
  static Vec Load(const float* p) { return {vld1q_f32(p)}; }
  // FCVTL: exact, subnormal float16 included (Linux leaves FPCR's flush-to-zero bits off)
  static Vec Load(const Float16* p) { return FromHalves(vld1_u16(reinterpret_cast<const uint16_t*>(p)), p); }
  static Vec Load(const BFloat16* p) { return FromHalves(vld1_u16(reinterpret_cast<const uint16_t*>(p)), p); }
  // 4 float16 / bfloat16 values as floats (the pointer only picks the type)
  static Vec FromHalves(uint16x4_t bits, const Float16*) { return {vcvt_f32_f16(vreinterpret_f16_u16(bits))}; }
  static Vec FromHalves(uint16x4_t bits, const BFloat16*) { return {vreinterpretq_f32_u32(vshll_n_u16(bits, 16))}; }
  void Store(float* p) const { vst1q_f32(p, v); }
  void Store(Float16* p) const { vst1_u16(reinterpret_cast<uint16_t*>(p), Half(p)); }
  void Store(BFloat16* p) const { vst1_u16(reinterpret_cast<uint16_t*>(p), Half(p)); }
  // the 4 values rounded to float16 / bfloat16: FCVTN rounds to nearest even (FPCR's default mode),
  // overflows to inf and keeps NaN NaN; bfloat16 by the integer rounding of the AVX2 path
  uint16x4_t Half(Float16*) const { return vreinterpret_u16_f16(vcvt_f16_f32(v)); }
  uint16x4_t Half(BFloat16*) const {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint16x4_t rounded = vaddhn_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7FFF)));  // (u + lsb + 0x7FFF) >> 16
    const uint16x4_t nan = vorr_u16(vshrn_n_u32(u, 16), vdup_n_u16(0x40));
    return vbsl_u16(vmovn_u32(vceqq_f32(v, v)), rounded, nan);
  }
  // AArch64 has no non-temporal store of one vector that C++ can ask for (STNP stores a pair, and
  // only as a hint): streamed outputs go through the cache (untimed: no ARM machine here)
  template <typename T>
  void Stream(T* p) const {
    Store(p);
  }
  friend Vec operator+(Vec a, Vec b) { return {vaddq_f32(a.v, b.v)}; }
  friend Vec operator-(Vec a, Vec b) { return {vsubq_f32(a.v, b.v)}; }
  friend Vec operator*(Vec a, Vec b) { return {vmulq_f32(a.v, b.v)}; }
};

inline Vec Fma(Vec a, Vec b, Vec c) { return {vfmaq_f32(c.v, a.v, b.v)}; }
inline Vec FnMadd(Vec a, Vec b, Vec c) { return {vfmsq_f32(c.v, a.v, b.v)}; }  // c - a b, one rounding
inline Vec Abs(Vec a) { return {vabsq_f32(a.v)}; }
inline Vec Neg(Vec a) { return {vnegq_f32(a.v)}; }
inline Vec NegAbs(Vec a) { return {vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a.v), vdupq_n_u32(0x80000000u)))}; }
// lanes with the sign bit set (see the AVX2 one): one compare of the bits as integers below zero
inline Mask SignSet(Vec a) { return vcltzq_s32(vreinterpretq_s32_f32(a.v)); }
inline Mask IsNaN(Vec a) { return vmvnq_u32(vceqq_f32(a.v, a.v)); }
inline Vec Select(Mask m, Vec if_true, Vec if_false) { return {vbslq_f32(m, if_true.v, if_false.v)}; }
inline float ReduceAdd(Vec a) { return vaddvq_f32(a.v); }
inline void StreamFence() {}
// NEON's reciprocal estimate has 8 bits: divide instead, as AVX2 does (exact to the rounding).
ASCEND_GRAD_MATH Vec Rcp(Vec d) { return {vdivq_f32(vdupq_n_f32(1.0f), d.v)}; }

// The AVX2 algorithm, operation for operation (the same bits): see there.
ASCEND_GRAD_MATH Vec ExpNeg(Vec y) {
  const float32x4_t x = vmaxq_f32(vdupq_n_f32(kExpLow), y.v);  // NaN stays: FMAX returns a NaN operand
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(kLog2e)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(kLn2Hi));
  r = vfmsq_f32(r, n, vdupq_n_f32(kLn2Lo));
  constexpr float k = 0x1p-24f;
  const float32x4_t r2 = vmulq_f32(r, r);
  const float32x4_t a = vfmaq_f32(vdupq_n_f32(kExpC5 * k), vdupq_n_f32(kExpC6 * k), r);
  const float32x4_t b = vfmaq_f32(vdupq_n_f32(kExpC3 * k), vdupq_n_f32(kExpC4 * k), r);
  const float32x4_t c = vfmaq_f32(vdupq_n_f32(k), vdupq_n_f32(kExpC2 * k), r);
  const float32x4_t p = vfmaq_f32(vdupq_n_f32(k), vfmaq_f32(c, vfmaq_f32(b, a, r2), r2), r);
  const int32x4_t biased = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127 + 24));
  return {vmulq_f32(p, vreinterpretq_f32_s32(vshlq_n_s32(biased, 23)))};
}

// The first n < kLanes values lane by lane (NEON has no masked loads or stores; a copy through a
// stack buffer would make the vector load wait on the copy's small stores); the other lanes are 0
// and the memory past n is never touched
inline Vec LoadPartial(const float* p, size_t n) {
  float32x4_t v = vdupq_n_f32(0.0f);
  switch (n) {
    case 3: v = vld1q_lane_f32(p + 2, v, 2); [[fallthrough]];
    case 2: v = vld1q_lane_f32(p + 1, v, 1); [[fallthrough]];
    case 1: v = vld1q_lane_f32(p, v, 0); [[fallthrough]];
    case 0: return {v};
    default: return Vec::Load(p);
  }
}
inline void StorePartial(Vec v, float* p, size_t n) {
  switch (n) {
    case 3: vst1q_lane_f32(p + 2, v.v, 2); [[fallthrough]];
    case 2: vst1q_lane_f32(p + 1, v.v, 1); [[fallthrough]];
    case 1: vst1q_lane_f32(p, v.v, 0); [[fallthrough]];
    case 0: return;
    default: v.Store(p);
  }
}
inline uint16x4_t LoadHalves(const void* p, size_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(p);
  uint16x4_t bits = vdup_n_u16(0);
  switch (n) {
    case 3: bits = vld1_lane_u16(h + 2, bits, 2); [[fallthrough]];
    case 2: bits = vld1_lane_u16(h + 1, bits, 1); [[fallthrough]];
    case 1: bits = vld1_lane_u16(h, bits, 0); [[fallthrough]];
    case 0: return bits;
    default: return vld1_u16(h);
  }
}
inline void StoreHalves(uint16x4_t bits, void* p, size_t n) {
  uint16_t* h = static_cast<uint16_t*>(p);
  switch (n) {
    case 3: vst1_lane_u16(h + 2, bits, 2); [[fallthrough]];
    case 2: vst1_lane_u16(h + 1, bits, 1); [[fallthrough]];
    case 1: vst1_lane_u16(h, bits, 0); [[fallthrough]];
    case 0: return;
    default: vst1_u16(h, bits);
  }
}
inline Vec LoadPartial(const Float16* p, size_t n) { return Vec::FromHalves(LoadHalves(p, n), p); }
inline Vec LoadPartial(const BFloat16* p, size_t n) { return Vec::FromHalves(LoadHalves(p, n), p); }
inline void StorePartial(Vec v, Float16* p, size_t n) { StoreHalves(v.Half(p), p, n); }
inline void StorePartial(Vec v, BFloat16* p, size_t n) { StoreHalves(v.Half(p), p, n); }
inline Vec KeepFirst(Vec v, size_t count) {
  const uint32x4_t index = {0, 1, 2, 3};
  const uint32x4_t first = vcltq_u32(index, vdupq_n_u32(static_cast<uint32_t>(count)));
  return {vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v.v), first))};
}

#else  // portable scalar: one lane, the same algorithm

constexpr size_t kLanes = 1;
using Mask = bool;

struct Vec {
  float v;
  static Vec Broadcast(float f) { return {f}; }
  static Vec Zero() { return {0.0f}; }
  template <typename T>
  static Vec Load(const T* p) {
    return {ToFloat(*p)};
  }
  template <typename T>
  void Store(T* p) const {
    *p = FromFloat<T>(v);
  }
  template <typename T>
  void Stream(T* p) const {
    Store(p);
  }
  friend Vec operator+(Vec a, Vec b) { return {a.v + b.v}; }
  friend Vec operator-(Vec a, Vec b) { return {a.v - b.v}; }
  friend Vec operator*(Vec a, Vec b) { return {a.v * b.v}; }
};

inline Vec Fma(Vec a, Vec b, Vec c) { return {a.v * b.v + c.v}; }
inline Vec FnMadd(Vec a, Vec b, Vec c) { return {c.v - a.v * b.v}; }
inline Vec Abs(Vec a) { return {a.v < 0.0f ? -a.v : a.v}; }
inline Vec Neg(Vec a) { return {-a.v}; }
inline Vec NegAbs(Vec a) { return {a.v > 0.0f ? -a.v : a.v}; }
inline Mask SignSet(Vec a) { return std::signbit(a.v); }
inline Mask IsNaN(Vec a) { return a.v != a.v; }
inline Vec Select(Mask m, Vec if_true, Vec if_false) { return m ? if_true : if_false; }
inline float ReduceAdd(Vec a) { return a.v; }
inline void StreamFence() {}
ASCEND_GRAD_MATH Vec Rcp(Vec d) { return {1.0f / d.v}; }

ASCEND_GRAD_MATH Vec ExpNeg(Vec y) {
  if (y.v != y.v) return y;  // NaN (before the conversion to int below)
  const float x = y.v < kExpLow ? kExpLow : y.v;
  const float t = x * kLog2e;
  const float n = static_cast<float>(static_cast<int32_t>(t - 0.5f));  // x <= 0: round half away
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float r2 = r * r;
  const float a = kExpC6 * r + kExpC5, b = kExpC4 * r + kExpC3, c = kExpC2 * r + 1.0f;
  const float p = ((a * r2 + b) * r2 + c) * r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni >> 1;
  const float s1 = BitsFloat(static_cast<uint32_t>(half + 127) << 23);
  const float s2 = BitsFloat(static_cast<uint32_t>(ni - half + 127) << 23);
  return {p * s1 * s2};
}

#endif

// One double sum per float lane: Add(v) adds each lane of v, converted exactly, to its own sum;
// AddTo(total) adds the lane sums to *total in lane order (the arithmetic of a scalar loop over lanes).
struct DoubleLanes {
#if defined(__AVX512F__)
  __m512d low = _mm512_setzero_pd(), high = _mm512_setzero_pd();
  void Add(Vec v) {
    low = _mm512_add_pd(low, _mm512_cvtps_pd(_mm512_castps512_ps256(v.v)));
    high = _mm512_add_pd(high, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.v), 1))));
  }
  void AddTo(double* total) const {
    alignas(64) double lanes[16];
    _mm512_store_pd(lanes, low);
    _mm512_store_pd(lanes + 8, high);
    for (double lane : lanes) *total += lane;
  }
#elif defined(__AVX2__)
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  void Add(Vec v) {
    low = _mm256_add_pd(low, _mm256_cvtps_pd(_mm256_castps256_ps128(v.v)));
    high = _mm256_add_pd(high, _mm256_cvtps_pd(_mm256_extractf128_ps(v.v, 1)));
  }
  void AddTo(double* total) const {
    alignas(32) double lanes[8];
    _mm256_store_pd(lanes, low);
    _mm256_store_pd(lanes + 4, high);
    for (double lane : lanes) *total += lane;
  }
#elif defined(ASCEND_GRAD_NEON)
  float64x2_t low = vdupq_n_f64(0.0), high = vdupq_n_f64(0.0);
  void Add(Vec v) {
    low = vaddq_f64(low, vcvt_f64_f32(vget_low_f32(v.v)));
    high = vaddq_f64(high, vcvt_high_f64_f32(v.v));
  }
  void AddTo(double* total) const {
    double lanes[4];
    vst1q_f64(lanes, low);
    vst1q_f64(lanes + 2, high);
    for (double lane : lanes) *total += lane;
  }
#else
  double sum = 0.0;
  void Add(Vec v) { sum += static_cast<double>(v.v); }
  void AddTo(double* total) const { *total += sum; }
#endif
};

// p[l] += v's lane l, converted exactly, for l < count: double sums per lane kept in memory (the
// channels-last kernels' per-channel sums), the arithmetic of a scalar loop over the lanes
inline void AddToDoubles(Vec v, double* p, size_t count) {
#if defined(__AVX512F__)
  const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v.v));
  const __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.v), 1)));
  if (count == kLanes) {  // masked forms only for a partial vector, as in LoadUpTo (float
                          // GroupNormSwish NHWC (2, 64, 64, 320), 4 placements: 1.61-1.89 -> 1.45-1.75 ms)
    _mm512_storeu_pd(p, _mm512_add_pd(_mm512_loadu_pd(p), a));
    _mm512_storeu_pd(p + 8, _mm512_add_pd(_mm512_loadu_pd(p + 8), b));
    return;
  }
  const __mmask16 lanes = FirstLanes(count);
  const __mmask8 low = static_cast<__mmask8>(lanes), high = static_cast<__mmask8>(lanes >> 8);
  _mm512_mask_storeu_pd(p, low, _mm512_add_pd(_mm512_maskz_loadu_pd(low, p), a));
  _mm512_mask_storeu_pd(p + 8, high, _mm512_add_pd(_mm512_maskz_loadu_pd(high, p + 8), b));
#elif defined(__AVX2__)
  const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v.v)), b = _mm256_cvtps_pd(_mm256_extractf128_ps(v.v, 1));
  if (count == kLanes) {
    _mm256_storeu_pd(p, _mm256_add_pd(_mm256_loadu_pd(p), a));
    _mm256_storeu_pd(p + 4, _mm256_add_pd(_mm256_loadu_pd(p + 4), b));
    return;
  }
  const __m256i index = _mm256_setr_epi64x(0, 1, 2, 3);
  const __m256i low = _mm256_cmpgt_epi64(_mm256_set1_epi64x(static_cast<int64_t>(count)), index);
  const __m256i high = _mm256_cmpgt_epi64(_mm256_set1_epi64x(static_cast<int64_t>(count) - 4), index);
  _mm256_maskstore_pd(p, low, _mm256_add_pd(_mm256_maskload_pd(p, low), a));
  _mm256_maskstore_pd(p + 4, high, _mm256_add_pd(_mm256_maskload_pd(p + 4, high), b));
#elif defined(ASCEND_GRAD_NEON)
  const float64x2_t a = vcvt_f64_f32(vget_low_f32(v.v)), b = vcvt_high_f64_f32(v.v);
  if (count == kLanes) {
    vst1q_f64(p, vaddq_f64(vld1q_f64(p), a));
    vst1q_f64(p + 2, vaddq_f64(vld1q_f64(p + 2), b));
    return;
  }
  double lanes[4];  // (a partial vector: lane by lane, as a scalar loop adds them)
  vst1q_f64(lanes, a);
  vst1q_f64(lanes + 2, b);
  for (size_t l = 0; l < count; ++l) p[l] += lanes[l];
#else
  if (count > 0) *p += static_cast<double>(v.v);
#endif
}

// A partial vector (n < kLanes values) through a zero-padded buffer, where no masked or lane-wise
// form is above (the scalar path). (A whole vector loads directly: the channels-last kernels pass
// whole channel vectors through here.)
template <typename T>
inline Vec LoadPartial(const T* p, size_t n) {
  if (n >= kLanes) return Vec::Load(p);  // (>=: the compiler then knows the copy below fits)
  T buffer[kLanes];
  std::memset(buffer, 0, sizeof(buffer));
  std::memcpy(buffer, p, n * sizeof(T));
  return Vec::Load(buffer);
}

template <typename T>
inline void StorePartial(Vec v, T* p, size_t n) {
  if (n >= kLanes) return v.Store(p);
  T buffer[kLanes];
  v.Store(buffer);
  std::memcpy(p, buffer, n * sizeof(T));
}

// count <= kLanes values: a whole vector through a plain load or store, a partial one masked (the
// channels-last GroupNorm kernels walk C in such vectors). Masked forms for whole vectors too:
// float GroupNormSwish NHWC (2, 64, 64, 320), one thread, Intel Xeon, 5 placements, 1.96-2.29 ms
// vs 1.87-2.06 with plain ones.
template <typename T>
inline Vec LoadUpTo(const T* p, size_t count) { return count == kLanes ? Vec::Load(p) : LoadPartial(p, count); }
template <typename T>
inline void StoreUpTo(Vec v, T* p, size_t count) {
  if (count == kLanes) {
    v.Store(p);
  } else {
    StorePartial(v, p, count);
  }
}

#if !defined(__AVX512F__) && !defined(__AVX2__) && !defined(ASCEND_GRAD_NEON)
// v with the lanes from `count` on set to zero (a tail must not add padding into a sum).
inline Vec KeepFirst(Vec v, size_t count) { return count == 0 ? Vec::Zero() : v; }
#endif

template <typename T = float>
inline T* Scratch(size_t count, int slot) {
  return static_cast<T*>(ThreadScratch(count * sizeof(T), slot));
}

// sigmoid(u) from e = exp(-|u|) <= 1 and q = 1 / (1 + e): s = b q with b = 1 for u >= 0 and e for
// u < 0, so both tails are relatively exact and nothing overflows; and s (1 - s) = e q^2 on either
// side. b is ready before the divide: a product by b leaves only one multiply by q after it.
struct SigmoidParts {
  Vec e, q;
  Mask negative;
  Vec b() const { return Select(negative, e, Vec::Broadcast(1.0f)); }  // s = b q
};

ASCEND_GRAD_MATH SigmoidParts SigmoidOf(Vec u) {
  const Vec e = ExpNeg(NegAbs(u));
  return {e, Rcp(Vec::Broadcast(1.0f) + e), SignSet(u)};
}

}  // namespace ASCEND_GRAD_ISA
}  // namespace ascend_grad
