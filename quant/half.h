// Scalar conversions between f32 and the 16-bit float formats (IEEE binary16, bfloat16).
// Bit-exact, round-to-nearest-even, NaN and Inf preserved. Backends have SIMD versions; these
// are the reference they are tested against.
#pragma once
#include <cstdint>
#include <cstring>

namespace tessera {

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or nan
    return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u));
  }
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: overflow to inf
  if (ax < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (ax < 0x33000000u) return sign;  // < 2^-25 rounds to zero (ties at 2^-25 go to even = 0)
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14 + (127 - e) - 1 ... result = m >> (shift - 1 + 1)
    // half subnormal value = round(x * 2^24); x = m * 2^(e-150) -> m >> (126 - e)
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  // normal: rebias exponent, round mantissa to 10 bits (RNE); carry may bump exponent
  uint32_t h = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

// The smallest f16 >= |v| for finite v >= 0 (saturating at the largest finite f16). Scales are
// rounded this way when the codes computed against them must not overflow their range.
inline uint16_t f32_to_fp16_round_up(float v) {
  uint16_t h = f32_to_fp16(v);
  if (fp16_to_f32(h) < v && h < 0x7bffu) ++h;
  return h;
}

inline float bf16_to_f32(uint16_t b) { return bits_to_f32(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

}  // namespace tessera
