#include "quant/int_group.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/half.h"

namespace tessera {

void quantize_row_int8_pc(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float scale = amax / 127.0f;
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  std::memcpy(y, &scale, 4);
  for (int64_t i = 0; i < n; ++i) {
    const int q = std::clamp(int(std::lround(x[i] * inv)), -127, 127);
    y[4 + i] = uint8_t(int8_t(q));
  }
}

void dequantize_row_int8_pc(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint8_t*>(vx);
  float scale;
  std::memcpy(&scale, x, 4);
  for (int64_t i = 0; i < n; ++i) y[i] = float(int8_t(x[4 + i])) * scale;
}

template <int G>
void quantize_row_int4(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockInt4<G>*>(vy);
  for (int64_t b = 0; b < n / G; ++b) {
    const float* xb = x + b * G;
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < G; ++j) { lo = std::min(lo, xb[j]); hi = std::max(hi, xb[j]); }
    y[b].d = f32_to_fp16_round_up((hi - lo) / 15.0f);
    y[b].reserved = 0;
    const float d = fp16_to_f32(y[b].d);
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    const int zero = std::clamp(int(std::lround(-lo * inv)), 0, 15);
    y[b].zero = uint8_t(zero);
    for (int j = 0; j < G / 2; ++j) {
      const int q0 = std::clamp(int(std::lround(xb[j] * inv)) + zero, 0, 15);
      const int q1 = std::clamp(int(std::lround(xb[j + G / 2] * inv)) + zero, 0, 15);
      y[b].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

template <int G>
void dequantize_row_int4(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockInt4<G>*>(vx);
  for (int64_t b = 0; b < n / G; ++b) {
    const float d = fp16_to_f32(x[b].d);
    const int zero = x[b].zero;
    for (int j = 0; j < G / 2; ++j) {
      y[b * G + j] = float(int(x[b].qs[j] & 15) - zero) * d;
      y[b * G + j + G / 2] = float(int(x[b].qs[j] >> 4) - zero) * d;
    }
  }
}

template void quantize_row_int4<32>(const float*, void*, int64_t);
template void quantize_row_int4<64>(const float*, void*, int64_t);
template void quantize_row_int4<128>(const float*, void*, int64_t);
template void dequantize_row_int4<32>(const void*, float*, int64_t);
template void dequantize_row_int4<64>(const void*, float*, int64_t);
template void dequantize_row_int4<128>(const void*, float*, int64_t);

}  // namespace tessera
