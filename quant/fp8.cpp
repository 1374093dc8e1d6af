#include "quant/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/half.h"

namespace tessera {
namespace {

// A small-float format with |man_bits| mantissa bits and exponent bias |bias|; |max_code| is the
// bit pattern (without sign) of the largest finite value.
struct Fp8Format {
  int man_bits;
  int bias;
  uint8_t max_code;
  float max_value;
};
constexpr Fp8Format kE4M3{3, 7, 0x7e, kFP8E4M3Max};
constexpr Fp8Format kE5M2{2, 15, 0x7b, kFP8E5M2Max};

// Encodes |x| with round-to-nearest-even. All scalings are by powers of two, so they are exact
// and the only rounding is the final std::nearbyint (RNE in the default rounding mode).
uint8_t encode(const Fp8Format& f, float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return uint8_t(sign | 0x7f);
  const float a = std::fabs(x);
  if (a >= f.max_value) return uint8_t(sign | f.max_code);  // saturate (infinity included)
  const int min_exp = 1 - f.bias;                           // exponent of the smallest normal
  int e;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1), so the unbiased exponent is e - 1
  int code;
  if (a == 0.0f || e - 1 < min_exp) {
    // Subnormal: a multiple of 2^(min_exp - man_bits). A carry into 2^man_bits is the smallest
    // normal, whose code is the same integer.
    code = int(std::nearbyint(std::ldexp(a, f.man_bits - min_exp)));
  } else {
    const float frac = std::ldexp(a, -(e - 1)) - 1.0f;  // in [0, 1), exact
    int man = int(std::nearbyint(std::ldexp(frac, f.man_bits)));
    int exp = e - 1 + f.bias;
    if (man == (1 << f.man_bits)) { man = 0; ++exp; }
    code = (exp << f.man_bits) | man;
  }
  return uint8_t(sign | std::min<int>(code, f.max_code));
}

float scale_of_row(const float* x, int64_t n, float max_value) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax / max_value;
}

template <uint8_t (*kEncode)(float)>
void quantize_row_scaled(const float* x, void* vy, int64_t n, float max_value) {
  auto* y = static_cast<uint8_t*>(vy);
  const float scale = scale_of_row(x, n, max_value);
  std::memcpy(y, &scale, 4);
  for (int64_t i = 0; i < n; ++i) y[4 + i] = scale > 0.0f ? kEncode(x[i] / scale) : uint8_t(0);
}

template <float (*kDecode)(uint8_t)>
void dequantize_row_scaled(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(vx);
  float scale;
  std::memcpy(&scale, x, 4);
  for (int64_t i = 0; i < n; ++i) y[i] = kDecode(x[4 + i]) * scale;
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t code) {
  const bool neg = (code & 0x80) != 0;
  const int exp = (code >> 3) & 15, man = code & 7;
  float v;
  if (exp == 15 && man == 7) v = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0) v = std::ldexp(float(man), -9);  // subnormal: man * 2^-6 / 8
  else v = std::ldexp(float(8 + man), exp - 10);      // (1 + man/8) * 2^(exp-7)
  return neg ? -v : v;
}

// E5M2 is the upper byte of an IEEE binary16.
float fp8_e5m2_to_f32(uint8_t code) { return fp16_to_f32(uint16_t(code) << 8); }

uint8_t f32_to_fp8_e4m3(float x) { return encode(kE4M3, x); }
uint8_t f32_to_fp8_e5m2(float x) { return encode(kE5M2, x); }

void quantize_row_fp8_e4m3(const float* x, void* y, int64_t n) {
  quantize_row_scaled<f32_to_fp8_e4m3>(x, y, n, kFP8E4M3Max);
}
void dequantize_row_fp8_e4m3(const void* x, float* y, int64_t n) { dequantize_row_scaled<fp8_e4m3_to_f32>(x, y, n); }
void quantize_row_fp8_e5m2(const float* x, void* y, int64_t n) {
  quantize_row_scaled<f32_to_fp8_e5m2>(x, y, n, kFP8E5M2Max);
}
void dequantize_row_fp8_e5m2(const void* x, float* y, int64_t n) { dequantize_row_scaled<fp8_e5m2_to_f32>(x, y, n); }

}  // namespace tessera
