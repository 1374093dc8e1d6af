#include "quant/ggml_blocks.h"

#include <algorithm>
#include <cmath>

#include "quant/half.h"

namespace tessera {

void quantize_row_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
  }
}

void dequantize_row_q8_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float d = fp16_to_f32(x[b].d);
    for (int j = 0; j < kQK8_0; ++j) y[b * kQK8_0 + j] = float(x[b].qs[j]) * d;
  }
}

void quantize_row_q4_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(vy);
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float* xb = x + b * kQK4_0;
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(xb[j])) { amax = std::fabs(xb[j]); max = xb[j]; }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t(xb[j] * id + 8.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t(xb[j + kQK4_0 / 2] * id + 8.5f))));
      y[b].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void dequantize_row_q4_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(vx);
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = fp16_to_f32(x[b].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[b * kQK4_0 + j] = float(int(x[b].qs[j] & 15) - 8) * d;
      y[b * kQK4_0 + j + kQK4_0 / 2] = float(int(x[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_row_q4_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(vy);
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    const float* xb = x + b * kQK4_1;
    float mn = xb[0], mx = xb[0];
    for (int j = 1; j < kQK4_1; ++j) { mn = std::min(mn, xb[j]); mx = std::max(mx, xb[j]); }
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    y[b].m = f32_to_fp16(mn);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const uint8_t q0 = uint8_t(std::min(15, int(int8_t((xb[j] - mn) * id + 0.5f))));
      const uint8_t q1 = uint8_t(std::min(15, int(int8_t((xb[j + kQK4_1 / 2] - mn) * id + 0.5f))));
      y[b].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void dequantize_row_q4_1(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(vx);
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    const float d = fp16_to_f32(x[b].d);
    const float m = fp16_to_f32(x[b].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[b * kQK4_1 + j] = float(x[b].qs[j] & 15) * d + m;
      y[b * kQK4_1 + j + kQK4_1 / 2] = float(x[b].qs[j] >> 4) * d + m;
    }
  }
}

}  // namespace tessera

namespace tessera {
namespace {

// Splits 32 five-bit codes into the low nibbles (qs) and the 5th bits (qh, little-endian u32).
void pack_q5(const uint8_t q[32], uint8_t qh[4], uint8_t qs[16]) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= uint32_t(q[j] >> 4) << j;
  for (int i = 0; i < 4; ++i) qh[i] = uint8_t(h >> (8 * i));
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

void unpack_q5(const uint8_t qh[4], const uint8_t qs[16], uint8_t q[32]) {
  const uint32_t h = uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
  for (int j = 0; j < 16; ++j) {
    q[j] = uint8_t((qs[j] & 15) | (((h >> j) & 1u) << 4));
    q[j + 16] = uint8_t((qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4));
  }
}

}  // namespace

// Like Q4_0: the element of largest magnitude maps to code 0 (-16), so its sign picks the side
// of the asymmetric range [-16, 15] that gets the extra code.
void quantize_row_q5_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(vy);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float* xb = x + b * kQK5_0;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK5_0; ++j) {
      if (amax < std::fabs(xb[j])) { amax = std::fabs(xb[j]); max = xb[j]; }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    uint8_t q[kQK5_0];
    // NOTE: truncation after +16.5 (not roundf) is what makes the bytes match ggml's.
    for (int j = 0; j < kQK5_0; ++j) q[j] = uint8_t(std::min(31, int(xb[j] * id + 16.5f)));
    pack_q5(q, y[b].qh, y[b].qs);
  }
}

void dequantize_row_q5_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(vx);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float d = fp16_to_f32(x[b].d);
    uint8_t q[kQK5_0];
    unpack_q5(x[b].qh, x[b].qs, q);
    for (int j = 0; j < kQK5_0; ++j) y[b * kQK5_0 + j] = d * float(int(q[j]) - 16);
  }
}

void quantize_row_q5_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(vy);
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    const float* xb = x + b * kQK5_1;
    float mn = xb[0], mx = xb[0];
    for (int j = 1; j < kQK5_1; ++j) { mn = std::min(mn, xb[j]); mx = std::max(mx, xb[j]); }
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_fp16(d);
    y[b].m = f32_to_fp16(mn);
    uint8_t q[kQK5_1];
    for (int j = 0; j < kQK5_1; ++j) q[j] = uint8_t(std::min(31, int((xb[j] - mn) * id + 0.5f)));
    pack_q5(q, y[b].qh, y[b].qs);
  }
}

void dequantize_row_q5_1(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(vx);
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    const float d = fp16_to_f32(x[b].d);
    const float m = fp16_to_f32(x[b].m);
    uint8_t q[kQK5_1];
    unpack_q5(x[b].qh, x[b].qs, q);
    for (int j = 0; j < kQK5_1; ++j) y[b * kQK5_1 + j] = d * float(q[j]) + m;
  }
}

}  // namespace tessera
