// Weight element access for every weight format. WTYPE (a -D of the generator table in
// backends/vulkan/CMakeLists.txt; the values of tessera::DType) selects one format per SPIR-V
// variant, so each pipeline carries only its own dequantisation. Layouts and the scalar
// reference decoders: quant/ggml_blocks.h, kquants.h, fp4.h, int_group.h, fp8.h. Every decoder
// here computes the same f32 operations in the same order as the reference, marked `precise` so
// no multiply-add is contracted: the dequantised values are bit-exact (tests/vulkan).
#define W_F32 0
#define W_F16 1
#define W_BF16 2
#define W_Q8_0 5
#define W_Q4_0 6
#define W_Q4_1 7
#define W_Q5_0 8
#define W_Q5_1 9
#define W_Q4_K 10
#define W_Q5_K 11
#define W_Q6_K 12
#define W_MXFP4 13
#define W_NVFP4 14
#define W_FP8_E4M3 15
#define W_FP8_E5M2 16
#define W_INT8_PC 17
#define W_INT4_G32 18
#define W_INT4_G64 19
#define W_INT4_G128 20

#ifndef WTYPE
#error "WTYPE must be defined"
#endif
#define W_FLOAT (WTYPE <= W_BF16)
#define W_INT4 (WTYPE >= W_INT4_G32 && WTYPE <= W_INT4_G128)

// 8-byte loads at the alignment each layout guarantees: min(4, the largest power of two that
// divides the block size) (backends/vulkan/matmul.cpp weight_alignment checks the rows): Q8_0,
// Q4_0, Q5_0 and Q6_K blocks are 34, 18, 22 and 210 bytes, so only 2-byte aligned, MXFP4's 17
// bytes only 1-byte aligned. A GPU splits an under-aligned load into aligned pieces; lavapipe
// (before Mesa 23) loads every component of every lane separately, so fewer, wider components
// cut its cost the most.
layout(buffer_reference, std430, buffer_reference_align = 1) readonly buffer U64Align1 { uint64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer U64Align2 { uint64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U64Align4 { uint64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer U64Align8 { uint64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32Ref { uint v; };
uvec2 words(uint64_t v) { return uvec2(uint(v), uint(v >> 32)); }
uvec2 load8_a1(uint64_t a) { return words(U64Align1(a).v); }
uvec2 load8_a2(uint64_t a) { return words(U64Align2(a).v); }
uvec2 load8_a4(uint64_t a) { return words(U64Align4(a).v); }
uvec2 load8_a8(uint64_t a) { return words(U64Align8(a).v); }

uint byte_of(uint word, uint i) { return (word >> (8u * i)) & 255u; }
uint byte8(uvec2 v, uint i) { return byte_of(i < 4u ? v.x : v.y, i & 3u); }
float i8_of(uint word, uint i) { return float(int(word << (24u - 8u * i)) >> 24); }

// Units: the matmul kernels take a weight row 16 elements at a time, as two runs of 8
// consecutive elements starting at unit_run0(u) and unit_run0(u) + UNIT_RUN1, each unit read
// with a few wide loads instead of one load (and one scale) per element.
// - UNIT_RUN1 8: 16 consecutive elements (floats, Q8_0, NVFP4's sub-blocks, the FP8/INT8 rows).
// - UNIT_RUN1 R > 8: nibble formats whose blocks of 2R elements keep element l (< R) in the low
//   nibble of byte l and element R + l in the high one (Q4_0/Q4_1/Q5_*/MXFP4 with R 16, INT4
//   groups of 2R, Q4_K/Q5_K chunks of 64, Q6_K halves of 128): a unit is 8 quant bytes, R/8
//   units per block.
#define UNIT 16u
#if WTYPE == W_Q4_0 || WTYPE == W_Q4_1 || WTYPE == W_Q5_0 || WTYPE == W_Q5_1 || WTYPE == W_MXFP4 || \
    WTYPE == W_INT4_G32
#define RUN1 16  // UNIT_RUN1 for the preprocessor, which takes no 'u' suffix
#define UNIT_RUN1 16u
#elif WTYPE == W_Q4_K || WTYPE == W_Q5_K || WTYPE == W_INT4_G64
#define RUN1 32
#define UNIT_RUN1 32u
#elif WTYPE == W_Q6_K || WTYPE == W_INT4_G128
#define RUN1 64
#define UNIT_RUN1 64u
#else
#define RUN1 8
#define UNIT_RUN1 8u
#endif
#define UNITS_PER_BLOCK (UNIT_RUN1 / 8u)  // of the nibble formats' 2 * UNIT_RUN1 elements

#if RUN1 == 8
uint unit_run0(uint u) { return u * 16u; }
#else
uint unit_run0(uint u) { return (u / UNITS_PER_BLOCK) * (2u * UNIT_RUN1) + (u % UNITS_PER_BLOCK) * 8u; }
#endif

// The tiled GEMM stages K in windows of 32 (a multiple of 32 at |k0|): the TILE_UNITS units
// tile_unit(k0, 0..TILE_UNITS-1) hold every element of the window (those with UNIT_RUN1 >= 32 in
// one of their two runs only).
#if RUN1 <= 16
#define TILE_UNITS 2u
uint tile_unit(uint k0, uint i) { return k0 / 16u + i; }
#else
#define TILE_UNITS 4u
uint tile_unit(uint k0, uint i) {
  return (k0 / (2u * UNIT_RUN1)) * UNITS_PER_BLOCK + (k0 % UNIT_RUN1) / 8u + i;
}
#endif

#if !W_FLOAT
// E2M1 element code (4 bits) times two, as the reference's kE2M1x2 table: 0, 1, 2, 3, 4, 6, 8,
// 12 and their negatives; code 8 (-0) reads as +0.
float e2m1x2(uint c) {
  const uint m = c & 7u;
  const int v = int(m < 2u ? m : (2u + (m & 1u)) << ((m >> 1) - 1u));
  return float((c & 8u) != 0u ? -v : v);
}
// Unsigned E4M3 scale byte as quant/fp4.cpp ue4m3_to_f32 reads it: bit 7 ignored, but only the
// byte 0x7F (not 0xFF) is the zero that stands for E4M3FN's NaN.
float ue4m3(uint x) {
  if (x == 0u || x == 0x7fu) return 0.0;
  const uint e = (x >> 3) & 15u, m = x & 7u;
  return e == 0u ? float(m) * 0.001953125 /* 2^-9 */ : uintBitsToFloat(((e + 120u) << 23) | (m << 20));
}
// FP8 E4M3 ("FN": no infinities, S.1111.111 is NaN) code to f32, exactly.
float fp8_e4m3(uint c) {
  const uint e = (c >> 3) & 15u, m = c & 7u, s = (c & 0x80u) << 24;
  if (e == 15u && m == 7u) return uintBitsToFloat(s | 0x7fc00000u);
  if (e == 0u) return uintBitsToFloat(s | floatBitsToUint(float(m) * 0.001953125));
  return uintBitsToFloat(s | ((e + 120u) << 23) | (m << 20));
}
// FP8 E5M2 is the upper byte of an f16.
float fp8_e5m2(uint c) { return unpackHalf2x16(c << 8).x; }
// Sub-block |i| (0..7) scale and min of the 12-byte Q4_K/Q5_K packing (bytes 0-3 in s0, 4-7 in
// s1, 8-11 in s2); see quant/kquants.h pack_k_scales.
uvec2 k_scale_min(uint s0, uint s1, uint s2, uint i) {
  if (i < 4u) return uvec2(byte_of(s0, i) & 63u, byte_of(s1, i) & 63u);
  const uint lo = byte_of(s2, i - 4u);
  return uvec2((lo & 15u) | ((byte_of(s0, i - 4u) >> 6) << 4), (lo >> 4) | ((byte_of(s1, i - 4u) >> 6) << 4));
}
#endif

#include "dequant_units.glsl"

// Element |k| of the weight row starting at |row|. Block formats decode the unit holding it: this
// serves only the float tails of the matmul kernels, which block formats never reach.
float load_weight(uint64_t row, uint k) {
#if WTYPE == W_F32
  return F32Ref(row + uint64_t(k) * 4u).v;
#elif WTYPE == W_F16
  return f16_bits_to_f32(uint(U16Ref(row + uint64_t(k) * 2u).v));
#elif WTYPE == W_BF16
  return bf16_bits_to_f32(uint(U16Ref(row + uint64_t(k) * 2u).v));
#else
  float w[16];
#if RUN1 == 8
  load_unit(row, k / 16u, w);
  return w[k % 16u];
#else
  const uint o = k % (2u * UNIT_RUN1);
  load_unit(row, (k / (2u * UNIT_RUN1)) * UNITS_PER_BLOCK + (o % UNIT_RUN1) / 8u, w);
  return w[(o / UNIT_RUN1) * 8u + o % 8u];
#endif
#endif
}
