// The GGUF/ggml block layouts that Tessera reads and writes, byte for byte.
#pragma once
#include <cstdint>

namespace tessera {

inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;

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

// 5-bit: the low nibbles are packed as in Q4_0/Q4_1 (element j in the low nibble of qs[j],
// element j+16 in the high nibble); bit j of the little-endian u32 qh is bit 4 of element j.
struct BlockQ5_0 {
  uint16_t d;                // f16 scale
  uint8_t qh[4];             // 5th bits
  uint8_t qs[kQK5_0 / 2];    // x[j] = d*(q[j]-16)
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;                // f16 scale
  uint16_t m;                // f16 min
  uint8_t qh[4];             // 5th bits
  uint8_t qs[kQK5_1 / 2];    // x[j] = d*q[j]+m
};
static_assert(sizeof(BlockQ5_1) == 24);

// Scalar reference quantize/dequantize (n is a multiple of 32). Quantisation produces the same
// bytes as ggml's reference quantizer (and the gguf package); see tests/quant/q5_test.cpp.
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void dequantize_row_q8_0(const void* x, float* y, int64_t n);
void quantize_row_q4_0(const float* x, void* y, int64_t n);
void dequantize_row_q4_0(const void* x, float* y, int64_t n);
void quantize_row_q4_1(const float* x, void* y, int64_t n);
void dequantize_row_q4_1(const void* x, float* y, int64_t n);
void quantize_row_q5_0(const float* x, void* y, int64_t n);
void dequantize_row_q5_0(const void* x, float* y, int64_t n);
void quantize_row_q5_1(const float* x, void* y, int64_t n);
void dequantize_row_q5_1(const void* x, float* y, int64_t n);

}  // namespace tessera
