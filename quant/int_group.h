// Integer weight formats of HF checkpoints (no GGUF type ids):
//
// INT8_PC, per-channel symmetric, for W8A8 (activations get a dynamic per-token scale inside the
// kernel; nothing about them is stored). Each row of K (a multiple of 32) elements is
//   [f32 scale][K int8 codes]      x[k] = q[k] * scale, scale = amax(row) / 127
//
// INT4_G{32,64,128}, group-wise asymmetric (AWQ/GPTQ): each group of G elements of a row is a
// block  [f16 scale][u8 zero][u8 reserved = 0][G/2 bytes of 4-bit codes],
//   x = (q - zero) * scale,  q and zero in [0, 15];
// codes are packed like GGUF's Q4_0 (element j in the low nibble of qs[j], element j + G/2 in
// the high one) so the CPU/GPU unpack is shared. One DType per group size keeps the block size a
// property of the type (dtype_row_bytes stays n / G * (4 + G/2)).
#pragma once
#include <cstdint>

namespace tessera {

template <int G>
struct BlockInt4 {
  static constexpr int kGroup = G;
  uint16_t d;           // f16 scale
  uint8_t zero;         // zero point in [0, 15] (AWQ/GPTQ store it as 4 bits; a byte keeps d aligned)
  uint8_t reserved;     // 0
  uint8_t qs[G / 2];
};
using BlockInt4G32 = BlockInt4<32>;
using BlockInt4G64 = BlockInt4<64>;
using BlockInt4G128 = BlockInt4<128>;
static_assert(sizeof(BlockInt4G32) == 20);
static_assert(sizeof(BlockInt4G64) == 36);
static_assert(sizeof(BlockInt4G128) == 68);

// Scalar reference. INT8_PC: n a multiple of 32, the row includes its 4-byte header.
void quantize_row_int8_pc(const float* x, void* y, int64_t n);
void dequantize_row_int8_pc(const void* x, float* y, int64_t n);

// INT4: the range of each group is widened to include 0 (as GPTQ does), so the zero point is
// always in [0, 15]; scale = range / 15 rounded up to f16, so no element is clamped and the error
// is at most scale / 2.
template <int G> void quantize_row_int4(const float* x, void* y, int64_t n);
template <int G> void dequantize_row_int4(const void* x, float* y, int64_t n);

}  // namespace tessera
