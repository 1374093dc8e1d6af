// Per-target SIMD helpers shared by the CPU kernel families. Included from inside each family's
// HWY_TARGET_INCLUDE pass (Highway's -inl.h convention: the include guard toggles per target).
#if defined(TESSERA_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TESSERA_CPU_SIMD_INL_H_
#undef TESSERA_CPU_SIMD_INL_H_
#else
#define TESSERA_CPU_SIMD_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "quant/dtype.h"
#include "quant/half.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Loads Lanes(df) elements of f32/f16/bf16 (or FP8/int8 codes) at |p| as f32. bf16 goes through integer shifts
// because Highway 1.0.3 has no bf16 support on every target (SCALAR in particular).
template <DType T>
HWY_INLINE VF load_as_f32(DF df, const void* p) {
  if constexpr (T == DType::kF32) {
    return hn::LoadU(df, static_cast<const float*>(p));
  } else if constexpr (T == DType::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, static_cast<const hwy::float16_t*>(p)));
  } else if constexpr (T == DType::kFP8_E5M2) {
    // E5M2 is the top byte of an f16: exact.
    const hn::Rebind<uint8_t, DF> du8;
    const hn::Rebind<uint16_t, DF> du16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::BitCast(dh, hn::ShiftLeft<8>(hn::PromoteTo(du16, hn::LoadU(du8, static_cast<const uint8_t*>(p))))));
  } else if constexpr (T == DType::kFP8_E4M3) {
    // E4M3 bits shifted into an f16 (sign to bit 15, exponent and mantissa to bits 7..13) read
    // 2^-8 times the E4M3 value, subnormals included; callers fold the 256 into the row scale.
    // The E4M3FN NaN code reads as 480 * 2^-8 (the quantisers never write it).
    const hn::Rebind<int8_t, DF> di8;
    const hn::Rebind<int16_t, DF> di16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto v = hn::ShiftLeft<7>(hn::PromoteTo(di16, hn::LoadU(di8, static_cast<const int8_t*>(p))));
    return hn::PromoteTo(df, hn::BitCast(dh, hn::And(v, hn::Set(di16, int16_t(-16385)))));  // 0xBFFF
  } else if constexpr (T == DType::kINT8_PC) {
    // The codes alone; the row scale is applied by the caller (row_scale).
    const hn::Rebind<int8_t, DF> di8;
    const hn::RebindToSigned<DF> di32;
    return hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, static_cast<const int8_t*>(p))));
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::RebindToUnsigned<DF> du32;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, static_cast<const uint16_t*>(p)))));
  }
}

// One scalar element of dtype T as f32 (tails).
template <DType T>
HWY_INLINE float scalar_as_f32(const void* p) {
  if constexpr (T == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  } else if constexpr (T == DType::kFP8_E5M2 || T == DType::kFP8_E4M3) {
    const uint8_t c = *static_cast<const uint8_t*>(p);
    return T == DType::kFP8_E5M2 ? fp16_to_f32(uint16_t(c << 8))
                                 : fp16_to_f32(uint16_t(((c & 0x80) << 8) | ((c & 0x7f) << 7)));  // x 2^-8, as above
  } else if constexpr (T == DType::kINT8_PC) {
    return float(*static_cast<const int8_t*>(p));
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return T == DType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
  }
}

template <DType T>
constexpr int64_t elem_bytes() {
  return T == DType::kF32 ? 4 : T == DType::kFP8_E4M3 || T == DType::kFP8_E5M2 || T == DType::kINT8_PC ? 1 : 2;
}

// FP8 and INT8_PC rows are [f32 scale][codes]: the scale multiplies what load_as_f32 decodes.
template <DType T>
constexpr bool is_row_scaled() { return T == DType::kFP8_E4M3 || T == DType::kFP8_E5M2 || T == DType::kINT8_PC; }

// Bytes before a row's first code.
template <DType T>
constexpr int64_t row_header_bytes() { return is_row_scaled<T>() ? 4 : 0; }

// The factor for a row's decoded codes: its stored scale (times 256 for E4M3, which load_as_f32
// decodes at 2^-8 of its value); 1 for unscaled rows.
template <DType T>
HWY_INLINE float row_scale(const char* row) {
  if constexpr (is_row_scaled<T>()) {
    float s;
    std::memcpy(&s, row, 4);
    return T == DType::kFP8_E4M3 ? s * 256.0f : s;
  } else {
    return 1.0f;
  }
}

// Stores |v| as Lanes(df) elements of dtype T at |p|, rounding to nearest even.
template <DType T>
HWY_INLINE void store_from_f32(DF df, VF v, void* p) {
  if constexpr (T == DType::kF32) {
    hn::StoreU(v, df, static_cast<float*>(p));
  } else if constexpr (T == DType::kF16) {
#if HWY_TARGET == HWY_SCALAR
    // NOTE: the SCALAR target's DemoteTo truncates; use the exact scalar conversion.
    const uint16_t h = f32_to_fp16(hn::GetLane(v));
    std::memcpy(p, &h, 2);
#else
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, static_cast<hwy::float16_t*>(p));
#endif
  } else {
    const hn::RebindToUnsigned<DF> du32;
    const hn::RebindToSigned<DF> di32;
    const hn::Rebind<uint16_t, DF> du16;
    const auto u = hn::BitCast(du32, v);
    const auto round = hn::Add(hn::Set(du32, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du32, 1u)));
    auto r = hn::ShiftRight<16>(hn::Add(u, round));
    // NaN stays NaN (quieted), as quant/half.h does.
    const auto is_nan = hn::Gt(hn::BitCast(di32, hn::And(u, hn::Set(du32, 0x7fffffffu))), hn::Set(di32, 0x7f800000));
    r = hn::IfThenElse(hn::RebindMask(du32, is_nan), hn::Or(hn::ShiftRight<16>(u), hn::Set(du32, 0x40u)), r);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, r)), du16, static_cast<uint16_t*>(p));
  }
}

template <DType T>
HWY_INLINE void scalar_from_f32(float f, void* p) {
  if constexpr (T == DType::kF32) {
    std::memcpy(p, &f, 4);
  } else {
    const uint16_t h = T == DType::kF16 ? f32_to_fp16(f) : f32_to_bf16(f);
    std::memcpy(p, &h, 2);
  }
}

// Horizontal sum.
HWY_INLINE float reduce_sum(DF df, VF v) { return hn::GetLane(hn::SumOfLanes(df, v)); }

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TESSERA_CPU_SIMD_INL_H_
