// FP8 E4M3 (the "FN" variant: no infinities, NaN = S.1111.111, max 448) and E5M2 (IEEE-like:
// infinities, NaNs, max 57344): scalar codecs and the row-scaled weight formats built on them.
//
// Weight layout (DType kFP8_E4M3 / kFP8_E5M2): each row of K elements (K a multiple of 32) is
//   [f32 scale][K fp8 codes]      x[k] = fp8_to_f32(code[k]) * scale
// The scale is per row (per output channel); a checkpoint with one per-tensor scale stores it in
// every row. The row header keeps the scale next to the codes it scales, so a backend reads a
// row without a second tensor. See quant/README.md.
#pragma once
#include <cstdint>

namespace tessera {

inline constexpr float kFP8E4M3Max = 448.0f;
inline constexpr float kFP8E5M2Max = 57344.0f;

float fp8_e4m3_to_f32(uint8_t code);
float fp8_e5m2_to_f32(uint8_t code);
// Round to nearest, ties to even; finite values beyond the largest finite one and infinities
// saturate to +-max; NaN maps to a NaN code (0x7f / 0x7f with the sign of the input).
uint8_t f32_to_fp8_e4m3(float x);
uint8_t f32_to_fp8_e5m2(float x);

// Row formats (n is a multiple of 32). quantize_row picks scale = amax(row) / max finite, so the
// largest element maps to the largest finite code; an all-zero row stores scale 0.
void quantize_row_fp8_e4m3(const float* x, void* y, int64_t n);
void dequantize_row_fp8_e4m3(const void* x, float* y, int64_t n);
void quantize_row_fp8_e5m2(const float* x, void* y, int64_t n);
void dequantize_row_fp8_e5m2(const void* x, float* y, int64_t n);

}  // namespace tessera
