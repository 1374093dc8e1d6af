#include "quant/fp4.h"

#include <algorithm>
#include <cmath>

#include "quant/half.h"

namespace tessera {
namespace {

// E2M1 values times two (integers), indexed by code; GGUF computes (scale/2) * this.
constexpr int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The code whose value half_scale * kE2M1x2[code] is nearest to |x|, the first on ties (the rule
// of the gguf package's MXFP4 quantizer, which we match byte for byte). The errors are computed
// in f32 exactly as there: the product is exact, the subtraction rounds once.
uint8_t nearest_e2m1(float x, float half_scale) {
  uint8_t best = 0;
  float best_err = std::fabs(half_scale * float(kE2M1x2[0]) - x);
  for (uint8_t c = 1; c < 16; ++c) {
    const float err = std::fabs(half_scale * float(kE2M1x2[c]) - x);
    if (err < best_err) { best_err = err; best = c; }
  }
  return best;
}

// Half of 2^(e-127), as an f32 bit pattern (subnormal for e < 2).
float e8m0_half(uint8_t e) {
  return bits_to_f32(e < 2 ? (0x00200000u << e) : (uint32_t(e) - 1u) << 23);
}

}  // namespace

// Code 8 is -0 in E2M1 (the GGUF tables above read it as +0 times the scale).
float e2m1_to_f32(uint8_t code) { return (code & 8) ? -0.5f * float(-kE2M1x2[code & 15]) : 0.5f * float(kE2M1x2[code & 15]); }

float e8m0_to_f32(uint8_t e) { return 2.0f * e8m0_half(e); }

float ue4m3_to_f32(uint8_t x) {
  if (x == 0 || x == 0x7f) return 0.0f;
  const int exp = (x >> 3) & 15, man = x & 7;
  if (exp == 0) return std::ldexp(float(man), -9);
  return std::ldexp(float(8 + man), exp - 10);
}

uint8_t f32_to_ue4m3(float x) {
  if (!(x > 0.0f)) return 0;
  if (x >= 448.0f) return 0x7e;
  int e;
  std::frexp(x, &e);
  if (e - 1 < -6) return uint8_t(std::nearbyint(std::ldexp(x, 9)));  // subnormal (carry = min normal)
  int man = int(std::nearbyint(std::ldexp(std::ldexp(x, -(e - 1)) - 1.0f, 3)));
  int exp = e - 1 + 7;
  if (man == 8) { man = 0; ++exp; }
  return uint8_t(std::min((exp << 3) | man, 0x7e));
}

void quantize_row_mxfp4(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockMXFP4*>(vy);
  for (int64_t b = 0; b < n / kQKMXFP4; ++b) {
    const float* xb = x + b * kQKMXFP4;
    float amax = 0.0f;
    for (int j = 0; j < kQKMXFP4; ++j) amax = std::max(amax, std::fabs(xb[j]));
    // OCP: shared exponent = floor(log2(amax)) - emax(E2M1) = ... - 2, biased by 127. frexp gives
    // floor(log2) exactly; clamped to the E8M0 range instead of wrapping.
    int e = 0;
    if (amax > 0.0f) {
      int fe;
      std::frexp(amax, &fe);
      e = std::clamp(fe - 1 - 2 + 127, 0, 254);
    }
    y[b].e = uint8_t(e);
    const float half_scale = e8m0_half(uint8_t(e));
    for (int j = 0; j < kQKMXFP4 / 2; ++j)
      y[b].qs[j] = uint8_t(nearest_e2m1(xb[j], half_scale) | (nearest_e2m1(xb[j + 16], half_scale) << 4));
  }
}

void dequantize_row_mxfp4(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockMXFP4*>(vx);
  for (int64_t b = 0; b < n / kQKMXFP4; ++b) {
    const float d = e8m0_half(x[b].e);
    for (int j = 0; j < kQKMXFP4 / 2; ++j) {
      y[b * kQKMXFP4 + j] = d * float(kE2M1x2[x[b].qs[j] & 15]);
      y[b * kQKMXFP4 + j + 16] = d * float(kE2M1x2[x[b].qs[j] >> 4]);
    }
  }
}

void quantize_row_nvfp4_scaled(const float* x, void* vy, int64_t n, float tensor_scale) {
  auto* y = static_cast<BlockNVFP4*>(vy);
  const float inv_tensor = tensor_scale > 0.0f ? 1.0f / tensor_scale : 0.0f;
  for (int64_t b = 0; b < n / kQKNVFP4; ++b) {
    for (int s = 0; s < kQKNVFP4 / kNVFP4Sub; ++s) {
      float v[kNVFP4Sub], amax = 0.0f;
      for (int l = 0; l < kNVFP4Sub; ++l) {
        v[l] = x[b * kQKNVFP4 + s * kNVFP4Sub + l] * inv_tensor;
        amax = std::max(amax, std::fabs(v[l]));
      }
      y[b].d[s] = f32_to_ue4m3(amax / 6.0f);
      const float half_scale = 0.5f * ue4m3_to_f32(y[b].d[s]);
      for (int l = 0; l < 8; ++l)
        y[b].qs[8 * s + l] = uint8_t(nearest_e2m1(v[l], half_scale) | (nearest_e2m1(v[8 + l], half_scale) << 4));
    }
  }
}

void quantize_row_nvfp4(const float* x, void* y, int64_t n) { quantize_row_nvfp4_scaled(x, y, n, 1.0f); }

void dequantize_row_nvfp4(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockNVFP4*>(vx);
  for (int64_t b = 0; b < n / kQKNVFP4; ++b) {
    for (int s = 0; s < kQKNVFP4 / kNVFP4Sub; ++s) {
      const float d = 0.5f * ue4m3_to_f32(x[b].d[s]);
      float* out = y + b * kQKNVFP4 + s * kNVFP4Sub;
      for (int l = 0; l < 8; ++l) {
        out[l] = d * float(kE2M1x2[x[b].qs[8 * s + l] & 15]);
        out[8 + l] = d * float(kE2M1x2[x[b].qs[8 * s + l] >> 4]);
      }
    }
  }
}

float nvfp4_tensor_scale(const float* x, int64_t numel) {
  float amax = 0.0f;
  for (int64_t i = 0; i < numel; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax / (6.0f * 448.0f);
}

}  // namespace tessera
