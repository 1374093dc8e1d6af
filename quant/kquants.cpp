#include "quant/kquants.h"

#include <algorithm>
#include <cmath>

#include "quant/half.h"

namespace tessera {
namespace {

// Super-block scales are rounded up to f16 (f16_round_up) so that the sub-block scales computed
// against them never overflow their 6-bit (or int8) range.
uint16_t f16_round_up(float v) { return f32_to_fp16_round_up(v); }

// ceil(v / step) clamped to [0, hi]; 0 when the step is 0.
int ceil_div_clamped(float v, float step, int hi) {
  if (step <= 0.0f) return 0;
  return std::clamp(int(std::ceil(v / step)), 0, hi);
}

// Sub-block parameters of an affine k-quant super-block (Q4_K with levels 15, Q5_K with 31):
// q[i] in [0, levels] for each of the 256 elements, and the packed f16/6-bit scales and mins.
struct AffineSuperBlock {
  uint16_t d, dmin;
  uint8_t sc[8], m[8];
  uint8_t q[kQK_K];
};

// Mins first (the grid must start at or below each sub-block's minimum, clamped to <= 0 because
// the format subtracts an unsigned min), then scales wide enough to reach the maximum from there.
AffineSuperBlock quantize_affine_k(const float* x, int levels) {
  AffineSuperBlock out{};
  float lo[8], hi[8];
  float max_min = 0.0f;
  for (int i = 0; i < 8; ++i) {
    lo[i] = 0.0f;
    hi[i] = 0.0f;
    for (int l = 0; l < 32; ++l) { lo[i] = std::min(lo[i], x[32 * i + l]); hi[i] = std::max(hi[i], x[32 * i + l]); }
    max_min = std::max(max_min, -lo[i]);
  }
  out.dmin = f16_round_up(max_min / 63.0f);
  const float dmin = fp16_to_f32(out.dmin);
  float span[8], max_span = 0.0f;
  for (int i = 0; i < 8; ++i) {
    out.m[i] = uint8_t(ceil_div_clamped(-lo[i], dmin, 63));
    span[i] = (hi[i] + dmin * float(out.m[i])) / float(levels);
    max_span = std::max(max_span, span[i]);
  }
  out.d = f16_round_up(max_span / 63.0f);
  const float d = fp16_to_f32(out.d);
  for (int i = 0; i < 8; ++i) {
    out.sc[i] = uint8_t(ceil_div_clamped(span[i], d, 63));
    const float step = d * float(out.sc[i]);
    const float offset = dmin * float(out.m[i]);
    const float inv = step > 0.0f ? 1.0f / step : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const int q = int(std::lround((x[32 * i + l] + offset) * inv));
      out.q[32 * i + l] = uint8_t(std::clamp(q, 0, levels));
    }
  }
  return out;
}

// The low nibbles of Q4_K/Q5_K: 64-element chunk c lives in qs[32c .. 32c+31], its first 32
// elements in the low nibbles and the next 32 in the high nibbles.
void pack_k_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) qs[32 * c + l] = uint8_t((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
}

uint8_t k_nibble(const uint8_t* qs, int e) {
  const int c = e / 64, r = e % 64;
  return uint8_t((qs[32 * c + r % 32] >> (4 * (r / 32))) & 15);
}

// y = (d*sc)*q - dmin*m, in this f32 operation order (the gguf package's) for bit exactness.
void dequantize_affine_k(uint16_t d16, uint16_t dmin16, const uint8_t scales[kKScaleBytes], const uint8_t* q,
                         float* y) {
  uint8_t sc[8], m[8];
  unpack_k_scales(scales, sc, m);
  const float d = fp16_to_f32(d16), dmin = fp16_to_f32(dmin16);
  for (int i = 0; i < 8; ++i) {
    const float step = d * float(sc[i]);
    const float offset = dmin * float(m[i]);
    for (int l = 0; l < 32; ++l) y[32 * i + l] = step * float(q[32 * i + l]) - offset;
  }
}

}  // namespace

void pack_k_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t out[kKScaleBytes]) {
  for (int i = 0; i < 4; ++i) {
    out[i] = uint8_t((sc[i] & 63) | ((sc[4 + i] >> 4) << 6));
    out[4 + i] = uint8_t((m[i] & 63) | ((m[4 + i] >> 4) << 6));
    out[8 + i] = uint8_t((sc[4 + i] & 15) | ((m[4 + i] & 15) << 4));
  }
}

void unpack_k_scales(const uint8_t in[kKScaleBytes], uint8_t sc[8], uint8_t m[8]) {
  for (int i = 0; i < 4; ++i) {
    sc[i] = in[i] & 63;
    m[i] = in[4 + i] & 63;
    sc[4 + i] = uint8_t((in[8 + i] & 15) | ((in[i] >> 6) << 4));
    m[4 + i] = uint8_t((in[8 + i] >> 4) | ((in[4 + i] >> 6) << 4));
  }
}

void quantize_row_q4_k(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(vy);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const AffineSuperBlock s = quantize_affine_k(x + b * kQK_K, 15);
    y[b].d = s.d;
    y[b].dmin = s.dmin;
    pack_k_scales(s.sc, s.m, y[b].scales);
    pack_k_nibbles(s.q, y[b].qs);
  }
}

void dequantize_row_q4_k(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(vx);
  uint8_t q[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int e = 0; e < kQK_K; ++e) q[e] = k_nibble(x[b].qs, e);
    dequantize_affine_k(x[b].d, x[b].dmin, x[b].scales, q, y + b * kQK_K);
  }
}

void quantize_row_q5_k(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(vy);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const AffineSuperBlock s = quantize_affine_k(x + b * kQK_K, 31);
    y[b].d = s.d;
    y[b].dmin = s.dmin;
    pack_k_scales(s.sc, s.m, y[b].scales);
    pack_k_nibbles(s.q, y[b].qs);
    for (int l = 0; l < 32; ++l) {
      uint8_t h = 0;
      for (int i = 0; i < 8; ++i) h = uint8_t(h | ((s.q[32 * i + l] >> 4) << i));
      y[b].qh[l] = h;
    }
  }
}

void dequantize_row_q5_k(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(vx);
  uint8_t q[kQK_K];
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int e = 0; e < kQK_K; ++e)
      q[e] = uint8_t(k_nibble(x[b].qs, e) | (((x[b].qh[e % 32] >> (e / 32)) & 1) << 4));
    dequantize_affine_k(x[b].d, x[b].dmin, x[b].scales, q, y + b * kQK_K);
  }
}

// Symmetric: each 16-element sub-block gets step amax/31 (codes -31..31 of the 6-bit range
// -32..31), rounded up to a multiple of the f16 super-block scale d = max step / 127.
void quantize_row_q6_k(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(vy);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    float step[16], max_step = 0.0f;
    for (int i = 0; i < 16; ++i) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(xb[16 * i + l]));
      step[i] = amax / 31.0f;
      max_step = std::max(max_step, step[i]);
    }
    y[b].d = f16_round_up(max_step / 127.0f);
    const float d = fp16_to_f32(y[b].d);
    uint8_t q[kQK_K];
    for (int i = 0; i < 16; ++i) {
      const int sc = ceil_div_clamped(step[i], d, 127);
      y[b].scales[i] = int8_t(sc);
      const float s = d * float(sc);
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      for (int l = 0; l < 16; ++l)
        q[16 * i + l] = uint8_t(std::clamp(int(std::lround(xb[16 * i + l] * inv)), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 64; ++l)
        y[b].ql[64 * h + l] = uint8_t((q[128 * h + l] & 15) | ((q[128 * h + 64 + l] & 15) << 4));
      for (int l = 0; l < 32; ++l) {
        uint8_t v = 0;
        for (int t = 0; t < 4; ++t) v = uint8_t(v | ((q[128 * h + 32 * t + l] >> 4) << (2 * t)));
        y[b].qh[32 * h + l] = v;
      }
    }
  }
}

void dequantize_row_q6_k(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(vx);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float d = fp16_to_f32(x[b].d);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, r = e % 128;
      const int lo = (x[b].ql[64 * h + r % 64] >> (4 * (r / 64))) & 15;
      const int hi = (x[b].qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
      const float scale = d * float(x[b].scales[e / 16]);
      y[b * kQK_K + e] = scale * float((lo | (hi << 4)) - 32);
    }
  }
}

}  // namespace tessera
