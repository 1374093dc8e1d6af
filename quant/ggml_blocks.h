// The GGUF/ggml block layouts that Tessera reads and writes, byte for byte.
#pragma once
#include <cstdint>

namespace tessera {

inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;

struct BlockQ8_0 {
  uint16_t d;          // f16 scale
  int8_t qs[kQK8_0];   // x = d * q
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;                // f16 scale
  uint8_t qs[kQK4_0 / 2];    // x[j] = d*((qs[j]&15)-8), x[j+16] = d*((qs[j]>>4)-8)
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  uint16_t d;                // f16 scale
  uint16_t m;                // f16 min
  uint8_t qs[kQK4_1 / 2];    // x[j] = d*(qs[j]&15)+m, x[j+16] = d*(qs[j]>>4)+m
};
static_assert(sizeof(BlockQ4_1) == 20);

// Scalar reference quantize/dequantize (n is a multiple of 32).
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void dequantize_row_q8_0(const void* x, float* y, int64_t n);
void quantize_row_q4_0(const float* x, void* y, int64_t n);
void dequantize_row_q4_0(const void* x, float* y, int64_t n);
void quantize_row_q4_1(const float* x, void* y, int64_t n);
void dequantize_row_q4_1(const void* x, float* y, int64_t n);

}  // namespace tessera
