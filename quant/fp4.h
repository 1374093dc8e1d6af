// 4-bit floats: MXFP4 (OCP Microscaling v1.0) and NVFP4, in the block layouts of GGUF types 39
// and 40 (dequantisation matches the gguf package bit for bit; tests/quant/fp4_test.cpp).
//
// Both store E2M1 elements (sign, 2 exponent bits, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6) as
// nibbles. MXFP4 scales 32 of them by a power of two (E8M0); NVFP4 scales 16 by an unsigned E4M3
// and, in checkpoints, the whole tensor by one more f32. That tensor scale is not in the blocks
// (nor in GGUF's): it is a separate f32 parameter stored alongside the weight (GGUF: the tensor
// "<weight>.scale"), and the model multiplies the matmul output by it. See quant/README.md.
#pragma once
#include <cstdint>

namespace tessera {

inline constexpr int kQKMXFP4 = 32;
inline constexpr int kQKNVFP4 = 64;      // one GGUF block = 4 sub-blocks of 16
inline constexpr int kNVFP4Sub = 16;

struct BlockMXFP4 {
  uint8_t e;                   // E8M0 shared exponent: scale = 2^(e - 127)
  uint8_t qs[kQKMXFP4 / 2];    // element j in the low nibble of qs[j], element j+16 in the high one
};
static_assert(sizeof(BlockMXFP4) == 17);

struct BlockNVFP4 {
  uint8_t d[kQKNVFP4 / kNVFP4Sub];  // unsigned E4M3 scale of each 16-element sub-block
  uint8_t qs[kQKNVFP4 / 2];         // sub-block s in qs[8s..8s+7]: element l (<8) low nibble, 8+l high
};
static_assert(sizeof(BlockNVFP4) == 36);

// E2M1 code (low 4 bits) to float: exact.
float e2m1_to_f32(uint8_t code);
// E8M0 exponent byte to its power of two 2^(e-127), as GGUF reads it: 0xFF is 2^128, which is
// +inf in f32 (the OCP spec calls 0xFF NaN; GGUF's dequantisation multiplies by half the scale,
// 2^127, so its blocks with e = 0xFF still decode to finite values, and so do ours).
float e8m0_to_f32(uint8_t e);
// Unsigned E4M3 scale byte to float, as GGUF reads it: bit 7 is ignored, 0x7F (NaN in E4M3FN)
// reads as 0.
float ue4m3_to_f32(uint8_t x);
// Positive float to the nearest unsigned E4M3 (ties to even), saturating at 448; <= 0 gives 0.
uint8_t f32_to_ue4m3(float x);

// Scalar reference. MXFP4: n a multiple of 32; the quantizer produces the gguf package's bytes
// (shared exponent floor(log2(amax)) - 2, each element the nearest of the 16 codes, ties to the
// lower code index). NVFP4: n a multiple of 64; our own quantizer (sub-block scale amax/6 to
// nearest UE4M3, then nearest element), with an implicit tensor scale of 1.
void quantize_row_mxfp4(const float* x, void* y, int64_t n);
void dequantize_row_mxfp4(const void* x, float* y, int64_t n);
void quantize_row_nvfp4(const float* x, void* y, int64_t n);
void dequantize_row_nvfp4(const void* x, float* y, int64_t n);

// NVFP4 with a tensor scale: the recipe of NVIDIA's checkpoints picks tensor_scale =
// amax(tensor) / (6 * 448), so the sub-block scales use the whole UE4M3 range; the blocks then
// hold x / tensor_scale, and x = tensor_scale * dequantize(blocks).
float nvfp4_tensor_scale(const float* x, int64_t numel);
void quantize_row_nvfp4_scaled(const float* x, void* y, int64_t n, float tensor_scale);

}  // namespace tessera
