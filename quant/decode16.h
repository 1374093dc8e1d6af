// Dequantisation of 16 consecutive elements of a weight row, for every format of quant/, as
// inline functions that compile for the host and for GPU kernels alike (CUDA and HIP: TS_HD).
// The scalar reference decoders (dequantize_row in dtype.h) stay the truth; these compute the
// same f32 operations in the same order, and tests/quant/decode16_test.cpp checks every format
// against them on the host, so the GPU kernels that call them decode what the reference does.
//
// A row of n elements is the format's header (row_header_bytes: the f32 scale of FP8 and
// INT8_PC) followed by n / block_elems blocks; every format's blocks hold a multiple of 16
// elements, so element e0 (a multiple of 16) starts a run of 16 inside one block.
#pragma once
#include <cstdint>

#include "quant/dtype.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TS_HD __host__ __device__ inline __attribute__((always_inline))
#else
#define TS_HD inline
#endif

namespace tessera::decode {

TS_HD float bits_f32(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
TS_HD uint32_t f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
TS_HD uint16_t u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
TS_HD uint32_t u32(const uint8_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24); }
TS_HD float f32_at(const uint8_t* p) { return bits_f32(u32(p)); }

// IEEE binary16 -> f32, exact (quant/half.h's fp16_to_f32 without memcpy).
TS_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    const float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
TS_HD float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

// f32 -> binary16 / bfloat16, round to nearest even (quant/half.h's rules).
TS_HD uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return sign;
    const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t h = (ax >> 13) - (112u << 10);
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}
TS_HD uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

// 2^k for |k| within the f32 normal and subnormal range, exact.
TS_HD float pow2(int k) {
  if (k >= -126) return bits_f32(uint32_t(k + 127) << 23);
  return bits_f32(0x00400000u >> (-127 - k));  // subnormal: 2^k = 2^-149 * 2^(k+149)
}
TS_HD float fp8_e4m3_to_f32(uint8_t code) {
  const int exp = (code >> 3) & 15, man = code & 7;
  float v;
  if (exp == 15 && man == 7) v = bits_f32(0x7fc00000u);
  else if (exp == 0) v = float(man) * pow2(-9);
  else v = float(8 + man) * pow2(exp - 10);
  return (code & 0x80) ? -v : v;
}
TS_HD float fp8_e5m2_to_f32(uint8_t code) { return f16_to_f32(uint16_t(code << 8)); }
TS_HD float ue4m3_to_f32(uint8_t x) {
  if (x == 0 || x == 0x7f) return 0.0f;
  const int exp = (x >> 3) & 15, man = x & 7;
  if (exp == 0) return float(man) * pow2(-9);
  return float(8 + man) * pow2(exp - 10);
}
// E2M1 value times two, by code (GGUF computes (scale / 2) * this).
TS_HD float e2m1x2(uint8_t code) {
  const int v[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const float a = float(v[code & 7]);
  return (code & 8) ? -a : a;
}
// Half of 2^(e-127) (subnormal for e < 2), as GGUF's MXFP4 decoder takes it.
TS_HD float e8m0_half(uint8_t e) { return bits_f32(e < 2 ? (0x00200000u << e) : (uint32_t(e) - 1u) << 23); }

// The 6-bit scale and min of sub-block i (0..7) of a Q4_K/Q5_K super-block (kquants.h).
TS_HD void k_scale_min(const uint8_t* s, int i, int& sc, int& m) {
  if (i < 4) {
    sc = s[i] & 63;
    m = s[4 + i] & 63;
  } else {
    sc = (s[4 + i] & 15) | ((s[i - 4] >> 6) << 4);
    m = (s[4 + i] >> 4) | ((s[i] >> 6) << 4);
  }
}

// Whether elements of |T| are an integer code times a scale plus an offset, constant over each
// run of 16 (int_run16): the formats a GPU runs on int8 dot products against quantised
// activations. The float formats (f32/f16/bf16, FP8) are not.
template <DType T>
inline constexpr bool kHasIntRun =
    T == DType::kQ8_0 || T == DType::kQ4_0 || T == DType::kQ4_1 || T == DType::kQ5_0 || T == DType::kQ5_1 ||
    T == DType::kQ4_K || T == DType::kQ5_K || T == DType::kQ6_K || T == DType::kMXFP4 || T == DType::kNVFP4 ||
    T == DType::kINT8_PC || T == DType::kINT4_G32 || T == DType::kINT4_G64 || T == DType::kINT4_G128;

// Elements e0 .. e0 + 15 of a row of |T| (kHasIntRun<T>, e0 a multiple of 16) as integer codes
// q[0..15] (each within int8) with value_i = scale * q_i + offset: decode16's values up to f32
// rounding (tests/quant/decode16_test.cpp checks every format), so a dot product with x is
// scale * sum(q_i x_i) + offset * sum(x_i).
// INT4_G* decode as float(q - zero) * d, which int_run16's d * q - zero * d does not round alike:
// decode16 keeps its own code for them.
template <DType T>
inline constexpr bool kIsInt4G = T == DType::kINT4_G32 || T == DType::kINT4_G64 || T == DType::kINT4_G128;

template <DType T>
TS_HD void int_run16(const uint8_t* row, int64_t e0, int8_t* q, float& scale, float& offset) {
  offset = 0.0f;
  if constexpr (T == DType::kQ8_0) {
    const uint8_t* b = row + (e0 / 32) * 34;
    scale = f16_to_f32(u16(b));
    const int j = int(e0 % 32);
    for (int i = 0; i < 16; ++i) q[i] = int8_t(b[2 + j + i]);
  } else if constexpr (T == DType::kQ4_0 || T == DType::kQ4_1 || T == DType::kQ5_0 || T == DType::kQ5_1) {
    constexpr bool kMin = T == DType::kQ4_1 || T == DType::kQ5_1;
    constexpr bool kFive = T == DType::kQ5_0 || T == DType::kQ5_1;
    constexpr int kBytes = T == DType::kQ4_0 ? 18 : T == DType::kQ4_1 ? 20 : T == DType::kQ5_0 ? 22 : 24;
    const uint8_t* b = row + (e0 / 32) * kBytes;
    scale = f16_to_f32(u16(b));
    if constexpr (kMin) offset = f16_to_f32(u16(b + 2));
    const uint8_t* qh = b + (kMin ? 4 : 2);
    const uint8_t* qs = b + (kMin ? 4 : 2) + (kFive ? 4 : 0);
    const int hi = int(e0 % 32) / 16;
    const uint32_t h = kFive ? u32(qh) : 0u;
    for (int i = 0; i < 16; ++i) {
      int v = (qs[i] >> (4 * hi)) & 15;
      if constexpr (kFive) v |= int((h >> (16 * hi + i)) & 1u) << 4;
      q[i] = int8_t(kMin ? v : v - (kFive ? 16 : 8));
    }
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    constexpr bool kFive = T == DType::kQ5_K;
    const uint8_t* b = row + (e0 / 256) * (kFive ? 176 : 144);
    const int e = int(e0 % 256);
    int sc, mn;
    k_scale_min(b + 4, e / 32, sc, mn);
    scale = f16_to_f32(u16(b)) * float(sc);
    offset = -(f16_to_f32(u16(b + 2)) * float(mn));
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 16 + (kFive ? 32 : 0);
    const int c = e / 64, r = e % 64;
    for (int i = 0; i < 16; ++i) {
      const int rr = r + i;
      int v = (qs[32 * c + rr % 32] >> (4 * (rr / 32))) & 15;
      if constexpr (kFive) v |= ((qh[(e + i) % 32] >> ((e + i) / 32)) & 1) << 4;
      q[i] = int8_t(v);
    }
  } else if constexpr (T == DType::kQ6_K) {
    const uint8_t* b = row + (e0 / 256) * 210;
    const int e = int(e0 % 256);
    scale = f16_to_f32(u16(b + 208)) * float(int8_t(b[192 + e / 16]));
    const int h = e / 128;
    for (int i = 0; i < 16; ++i) {
      const int r = (e + i) % 128;
      const int lo = (b[64 * h + r % 64] >> (4 * (r / 64))) & 15;
      const int hi = (b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
      q[i] = int8_t((lo | (hi << 4)) - 32);
    }
  } else if constexpr (T == DType::kMXFP4 || T == DType::kNVFP4) {
    // E2M1 codes as twice their value: 0 1 2 3 4 6 8 12 and negatives.
    const int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    if constexpr (T == DType::kMXFP4) {
      const uint8_t* b = row + (e0 / 32) * 17;
      scale = e8m0_half(b[0]);
      const int hi = int(e0 % 32) / 16;
      for (int i = 0; i < 16; ++i) q[i] = kE2M1x2[(b[1 + i] >> (4 * hi)) & 15];
    } else {
      const uint8_t* b = row + (e0 / 64) * 36;
      const int s = int(e0 % 64) / 16;
      scale = 0.5f * ue4m3_to_f32(b[s]);
      for (int l = 0; l < 8; ++l) {
        q[l] = kE2M1x2[b[4 + 8 * s + l] & 15];
        q[8 + l] = kE2M1x2[b[4 + 8 * s + l] >> 4];
      }
    }
  } else if constexpr (T == DType::kINT8_PC) {
    scale = f32_at(row);
    for (int i = 0; i < 16; ++i) q[i] = int8_t(row[4 + e0 + i]);
  } else if constexpr (T == DType::kINT4_G32 || T == DType::kINT4_G64 || T == DType::kINT4_G128) {
    constexpr int G = T == DType::kINT4_G32 ? 32 : T == DType::kINT4_G64 ? 64 : 128;
    const uint8_t* b = row + (e0 / G) * (4 + G / 2);
    scale = f16_to_f32(u16(b));
    offset = -float(b[2]) * scale;  // (q - zero) * d
    const int j = int(e0 % G);
    const int hi = j / (G / 2), j0 = j % (G / 2);
    for (int i = 0; i < 16; ++i) q[i] = int8_t((b[4 + j0 + i] >> (4 * hi)) & 15);
  } else {
    static_assert(kHasIntRun<T>, "int_run16: not an integer-coded weight format");
  }
}


// Elements e0 .. e0 + 15 of a row of |T| (e0 a multiple of 16) into out[0..15]. |row| is the
// row's first byte (its header included).
template <DType T>
TS_HD void decode16(const uint8_t* row, int64_t e0, float* out) {
  if constexpr (T == DType::kF32) {
    for (int i = 0; i < 16; ++i) out[i] = f32_at(row + 4 * (e0 + i));
  } else if constexpr (T == DType::kF16) {
    for (int i = 0; i < 16; ++i) out[i] = f16_to_f32(u16(row + 2 * (e0 + i)));
  } else if constexpr (T == DType::kBF16) {
    for (int i = 0; i < 16; ++i) out[i] = bf16_to_f32(u16(row + 2 * (e0 + i)));
  } else if constexpr (kHasIntRun<T> && !kIsInt4G<T>) {
    // The integer-coded formats whose reference computes scale * q (+ offset) in exactly this
    // order (a + (-b) is a - b in IEEE arithmetic); those without an offset add none, so a
    // negative zero stays one.
    int8_t q[16];
    float scale, offset;
    int_run16<T>(row, e0, q, scale, offset);
    constexpr bool kOffset = T == DType::kQ4_1 || T == DType::kQ5_1 || T == DType::kQ4_K || T == DType::kQ5_K;
    for (int i = 0; i < 16; ++i) {
      if constexpr (kOffset) out[i] = scale * float(q[i]) + offset;
      else out[i] = scale * float(q[i]);
    }
  } else if constexpr (T == DType::kFP8_E4M3 || T == DType::kFP8_E5M2) {
    const float scale = f32_at(row);
    for (int i = 0; i < 16; ++i) {
      const uint8_t c = row[4 + e0 + i];
      const float v = T == DType::kFP8_E4M3 ? fp8_e4m3_to_f32(c) : fp8_e5m2_to_f32(c);
      out[i] = v * scale;
    }
  } else if constexpr (T == DType::kINT4_G32 || T == DType::kINT4_G64 || T == DType::kINT4_G128) {
    constexpr int G = T == DType::kINT4_G32 ? 32 : T == DType::kINT4_G64 ? 64 : 128;
    const uint8_t* b = row + (e0 / G) * (4 + G / 2);
    const float d = f16_to_f32(u16(b));
    const int zero = b[2];
    const int j = int(e0 % G);
    const int hi = j / (G / 2), j0 = j % (G / 2);
    for (int i = 0; i < 16; ++i) out[i] = float(int((b[4 + j0 + i] >> (4 * hi)) & 15) - zero) * d;
  } else {
    static_assert(T == DType::kF32, "decode16: not a weight format");
  }
}

// Every weight format decode16 handles, for dispatch tables (X-macro: X(DType::kQ4_0)).
#define TS_FOR_EACH_WEIGHT_DTYPE(X)                                                                        \
  X(kF32) X(kF16) X(kBF16) X(kQ8_0) X(kQ4_0) X(kQ4_1) X(kQ5_0) X(kQ5_1) X(kQ4_K) X(kQ5_K) X(kQ6_K) \
  X(kMXFP4) X(kNVFP4) X(kFP8_E4M3) X(kFP8_E5M2) X(kINT8_PC) X(kINT4_G32) X(kINT4_G64) X(kINT4_G128)

// f32 -> FP8 E4M3 code, round to nearest even, saturating (quant/fp8.cpp's encode for E4M3): for
// kernels that write an FP8 KV cache.
TS_HD uint8_t f32_to_fp8_e4m3(float x) {
  const uint32_t bits = f32_bits(x);
  const uint8_t sign = (bits >> 31) ? 0x80 : 0x00;
  const uint32_t ax = bits & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint8_t(sign | 0x7f);
  const float a = bits_f32(ax);
  if (a >= 448.0f) return uint8_t(sign | 0x7e);
  const int e = int(ax >> 23) - 127;  // unbiased exponent of a normal f32 (a > 0)
  int code;
  if (ax == 0 || e < -6) {
    // Subnormal: a multiple of 2^-9; round a * 2^9 to nearest even.
    const float s = a * 512.0f;
    int q = int(s);
    const float rem = s - float(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1))) ++q;
    code = q;
  } else {
    const uint32_t m = ax & 0x7fffffu;  // 23 mantissa bits -> 3
    int man = int(m >> 20);
    const uint32_t rem = m & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (man & 1))) ++man;
    int exp = e + 7;
    if (man == 8) { man = 0; ++exp; }
    code = (exp << 3) | man;
  }
  return uint8_t(sign | (code < 0x7e ? code : 0x7e));
}

}  // namespace tessera::decode
