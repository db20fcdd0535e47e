// The three element types of the op set and their scalar conversions to and from float.
//
// float16 and bfloat16 are storage types: every kernel converts to float, computes, and rounds once
// (round to nearest even, NaN kept NaN, overflow to inf), as the onnxscript bodies do.
#pragma once

#include <cstdint>
#include <cstring>

#include "onnxruntime_c_api.h"

namespace ascend_grad {

struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

enum class DType : int { kFloat = 0, kFloat16 = 1, kBFloat16 = 2 };
constexpr int kNumDTypes = 3;

// Internal linkage for everything below: the instruction-set translation units compile these with
// AVX-512 or AVX2 flags, and a shared inline copy could be the one the linker keeps for all.
namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float ToFloat(float v) { return v; }
inline float ToFloat(BFloat16 v) { return BitsFloat(static_cast<uint32_t>(v.bits) << 16); }
inline float ToFloat(Float16 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000) << 16;
  const uint32_t exponent = (v.bits >> 10) & 0x1F;
  const uint32_t mantissa = v.bits & 0x3FF;
  if (exponent == 0x1F) return BitsFloat(sign | 0x7F800000 | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // zero or subnormal: mantissa * 2^-24, exact in float
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

template <typename T>
T FromFloat(float f);

template <>
inline float FromFloat<float>(float f) {
  return f;
}

template <>
inline BFloat16 FromFloat<BFloat16>(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return {static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  const uint32_t rounded = u + 0x7FFF + ((u >> 16) & 1);                                  // nearest even
  return {static_cast<uint16_t>(rounded >> 16)};
}

template <>
inline Float16 FromFloat<Float16>(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) return {static_cast<uint16_t>(sign | 0x7E00)};  // NaN
  if (a >= 0x477FF000) return {static_cast<uint16_t>(sign | 0x7C00)};  // rounds to inf (>= 65520)
  if (a < 0x38800000) {  // below the smallest normal float16 (2^-14): subnormal or zero
    // a float16 subnormal is m * 2^-24; 2^-24 ... adding 0.5 forces the rounding to the grid
    const float magnitude = BitsFloat(a) + 0.5f;  // ulp(0.5) = 2^-24, round to nearest even
    return {static_cast<uint16_t>(sign | (FloatBits(magnitude) - 0x3F000000))};
  }
  const uint32_t rounded = a + 0x0FFF + ((a >> 13) & 1) - 0x38000000;  // rebias 127 -> 15
  return {static_cast<uint16_t>(sign | (rounded >> 13))};
}

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kFloat;
}
template <>
constexpr DType DTypeOf<Float16>() {
  return DType::kFloat16;
}
template <>
constexpr DType DTypeOf<BFloat16>() {
  return DType::kBFloat16;
}

inline size_t DTypeSize(DType t) { return t == DType::kFloat ? 4 : 2; }

inline ONNXTensorElementDataType OnnxType(DType t) {
  switch (t) {
    case DType::kFloat16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
    case DType::kBFloat16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
    default:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
}

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    default:
      return "float";
  }
}

// aclnn's promotion: equal types stay, any mix computes and returns float.
inline DType Promote(DType a, DType b) { return a == b ? a : DType::kFloat; }

// Convert n values of type t at src to float.
inline void LoadFloats(DType t, const void* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kFloat16:
        dst[i] = ToFloat(static_cast<const Float16*>(src)[i]);
        break;
      case DType::kBFloat16:
        dst[i] = ToFloat(static_cast<const BFloat16*>(src)[i]);
        break;
      default:
        dst[i] = static_cast<const float*>(src)[i];
    }
  }
}

// Round n floats to type t at dst.
inline void StoreFloats(DType t, const float* src, size_t n, void* dst) {
  for (size_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kFloat16:
        static_cast<Float16*>(dst)[i] = FromFloat<Float16>(src[i]);
        break;
      case DType::kBFloat16:
        static_cast<BFloat16*>(dst)[i] = FromFloat<BFloat16>(src[i]);
        break;
      default:
        static_cast<float*>(dst)[i] = src[i];
    }
  }
}

// Write `value`, rounded to type t, n times at dst (nothing allocated, whatever n is).
inline void FillFloats(DType t, float value, size_t n, void* dst) {
  for (size_t i = 0; i < n; ++i) StoreFloats(t, &value, 1, static_cast<unsigned char*>(dst) + i * DTypeSize(t));
}

}  // namespace
}  // namespace ascend_grad
