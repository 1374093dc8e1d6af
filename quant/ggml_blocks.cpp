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
