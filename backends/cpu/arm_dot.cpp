#include "backends/cpu/arm_dot.h"

#include <arm_neon.h>

#include <cstring>

#include "backends/cpu/cpu_features.h"
#include "quant/half.h"

namespace tessera::cpu {

namespace {

float block_scale(const char* wb, bool f16_scale, float dx) {
  if (!f16_scale) return dx;
  uint16_t h;
  std::memcpy(&h, wb, 2);
  return dx * fp16_to_f32(h);
}

// Every Armv8 CPU: widening multiplies, pairwise-added into i32 (|a * b| <= 128 * 128 fits i16).
float dot_blocks_smull(const char* w, int64_t stride, int64_t codes_at, bool f16_scale, const ActQ8* x, int64_t nb) {
  // Two accumulators so consecutive blocks' FMAs do not wait on each other.
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (int64_t b = 0; b < nb; ++b) {
    const char* wb = w + b * stride;
    const auto* q = reinterpret_cast<const int8_t*>(wb + codes_at);
    int32x4_t p = vdupq_n_s32(0);
    for (int h = 0; h < 32; h += 16) {
      const int8x16_t va = vld1q_s8(q + h), vb = vld1q_s8(x[b].qs + h);
      p = vpadalq_s16(p, vmull_s8(vget_low_s8(va), vget_low_s8(vb)));
      p = vpadalq_s16(p, vmull_high_s8(va, vb));
    }
    acc[b & 1] = vfmaq_n_f32(acc[b & 1], vcvtq_f32_s32(p), block_scale(wb, f16_scale, x[b].d));
  }
  return vaddvq_f32(vaddq_f32(acc[0], acc[1]));
}

// NOTE: only this function is compiled for +dotprod (sdot); arm_dot_s8_blocks checks
// HWCAP_ASIMDDP first, so a CPU without the extension never executes it.
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
float dot_blocks_sdot(const char* w, int64_t stride, int64_t codes_at, bool f16_scale, const ActQ8* x, int64_t nb) {
  float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (int64_t b = 0; b < nb; ++b) {
    const char* wb = w + b * stride;
    const auto* q = reinterpret_cast<const int8_t*>(wb + codes_at);
    int32x4_t p = vdotq_s32(vdupq_n_s32(0), vld1q_s8(q), vld1q_s8(x[b].qs));
    p = vdotq_s32(p, vld1q_s8(q + 16), vld1q_s8(x[b].qs + 16));
    acc[b & 1] = vfmaq_n_f32(acc[b & 1], vcvtq_f32_s32(p), block_scale(wb, f16_scale, x[b].d));
  }
  return vaddvq_f32(vaddq_f32(acc[0], acc[1]));
}
#pragma GCC pop_options

}  // namespace

float arm_dot_s8_blocks(const char* w, int64_t stride, int64_t codes_at, bool f16_scale, const ActQ8* x, int64_t nb) {
  if (arm_features().dotprod) return dot_blocks_sdot(w, stride, codes_at, f16_scale, x, nb);
  return dot_blocks_smull(w, stride, codes_at, f16_scale, x, nb);
}

const char* arm_dot_s8_variant() { return arm_features().dotprod ? "sdot" : "smull"; }

}  // namespace tessera::cpu
