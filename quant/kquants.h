// GGUF "k-quant" super-block formats Q4_K, Q5_K and Q6_K: 256 elements per block, byte for byte
// as in GGUF files (dequantisation matches the gguf package bit for bit; tests/quant/).
//
// Q4_K/Q5_K: 8 sub-blocks of 32, x = d*sc[i]*q - dmin*m[i], with 6-bit sc/m packed in 12 bytes.
// Q6_K: 16 sub-blocks of 16, x = d*sc[i]*(q - 32), with int8 sc.
#pragma once
#include <cstdint>

namespace tessera {

inline constexpr int kQK_K = 256;
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_K {
  uint16_t d;                     // f16 super-block scale of the sub-block scales
  uint16_t dmin;                  // f16 super-block scale of the sub-block mins
  uint8_t scales[kKScaleBytes];   // 8 6-bit scales and 8 6-bit mins, see unpack_k_scales
  uint8_t qs[kQK_K / 2];          // 4-bit codes: chunk c (64 elems) = low nibbles then high nibbles of qs[32c..32c+31]
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];          // bit i of qh[l] is bit 4 of element 32*i + l
  uint8_t qs[kQK_K / 2];          // low 4 bits, packed as in Q4_K
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];          // low 4 bits: element 128h + 64s + l in nibble s of ql[64h + l]
  uint8_t qh[kQK_K / 4];          // high 2 bits: element 128h + 32t + l in bits 2t..2t+1 of qh[32h + l]
  int8_t scales[kQK_K / 16];      // one per 16 elements
  uint16_t d;                     // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

// The 12-byte packing of eight 6-bit scales and eight 6-bit mins shared by Q4_K and Q5_K:
// bytes 0-3 hold sc[0..3] in their low 6 bits and the top 2 bits of sc[4..7] above them, bytes
// 4-7 the same for the mins, bytes 8-11 the low 4 bits of sc[4+i] (low nibble) and m[4+i].
void pack_k_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t out[kKScaleBytes]);
void unpack_k_scales(const uint8_t in[kKScaleBytes], uint8_t sc[8], uint8_t m[8]);

// Scalar reference (n is a multiple of 256). The quantizers are our own (GGUF defines only the
// layout, and the gguf package has none for these types): they choose scales so every element lies
// inside its sub-block's grid, so the error is at most half a step; see quant/README.md.
void quantize_row_q4_k(const float* x, void* y, int64_t n);
void dequantize_row_q4_k(const void* x, float* y, int64_t n);
void quantize_row_q5_k(const float* x, void* y, int64_t n);
void dequantize_row_q5_k(const void* x, float* y, int64_t n);
void quantize_row_q6_k(const float* x, void* y, int64_t n);
void dequantize_row_q6_k(const void* x, float* y, int64_t n);

}  // namespace tessera
