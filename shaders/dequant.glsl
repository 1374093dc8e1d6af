// Weight element access for the GGUF block formats and plain floats. WTYPE (a -D of the
// generator table in backends/vulkan/CMakeLists.txt) selects one format per SPIR-V variant, so
// each pipeline carries only its own dequantisation. Layouts: quant/ggml_blocks.h.
#define W_F32 0
#define W_F16 1
#define W_BF16 2
#define W_Q8_0 5
#define W_Q4_0 6
#define W_Q4_1 7

#ifndef WTYPE
#error "WTYPE must be defined"
#endif

// 8-byte loads at the alignment each layout guarantees (Q8_0 and Q4_0 blocks are 34 and 18
// bytes, so only 2-byte aligned; Q4_1 blocks are 20 bytes; float rows are element aligned). A GPU
// splits an under-aligned load into aligned pieces; lavapipe (before Mesa 23) loads every
// component of every lane separately, so fewer, wider components cut its cost the most.
layout(buffer_reference, std430, buffer_reference_align = 2) readonly buffer U64Align2 { uint64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U64Align4 { uint64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer U64Align8 { uint64_t v; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32Ref { uint v; };
uvec2 words(uint64_t v) { return uvec2(uint(v), uint(v >> 32)); }
uvec2 load8_a2(uint64_t a) { return words(U64Align2(a).v); }
uvec2 load8_a4(uint64_t a) { return words(U64Align4(a).v); }
uvec2 load8_a8(uint64_t a) { return words(U64Align8(a).v); }

// Element |k| of the weight row starting at |row|.
float load_weight(uint64_t row, uint k) {
#if WTYPE == W_F32
  return F32Ref(row + uint64_t(k) * 4u).v;
#elif WTYPE == W_F16
  return f16_bits_to_f32(uint(U16Ref(row + uint64_t(k) * 2u).v));
#elif WTYPE == W_BF16
  return bf16_bits_to_f32(uint(U16Ref(row + uint64_t(k) * 2u).v));
#elif WTYPE == W_Q8_0
  const uint64_t blk = row + uint64_t(k / 32u) * 34u;
  const float d = f16_bits_to_f32(uint(U16Ref(blk).v));
  const int q = int(uint(U8Ref(blk + 2u + (k % 32u)).v));
  return d * float(q >= 128 ? q - 256 : q);
#elif WTYPE == W_Q4_0
  const uint64_t blk = row + uint64_t(k / 32u) * 18u;
  const uint j = k % 32u;
  const float d = f16_bits_to_f32(uint(U16Ref(blk).v));
  const uint b = uint(U8Ref(blk + 2u + (j % 16u)).v);
  return d * float(int(j < 16u ? (b & 15u) : (b >> 4)) - 8);
#elif WTYPE == W_Q4_1
  const uint64_t blk = row + uint64_t(k / 32u) * 20u;
  const uint j = k % 32u;
  const float d = f16_bits_to_f32(uint(U16Ref(blk).v));
  const float m = f16_bits_to_f32(uint(U16Ref(blk + 2u).v));
  const uint b = uint(U8Ref(blk + 4u + (j % 16u)).v);
  return d * float(j < 16u ? (b & 15u) : (b >> 4)) + m;
#else
#error "unknown WTYPE"
#endif
}

// Units: the matmul kernels take a weight row 16 elements at a time, as two runs of 8
// consecutive elements starting at unit_run0(u) and unit_run0(u) + UNIT_RUN1. For the 4-bit
// formats a unit is one half of a block's quant bytes (bytes 8h..8h+7 hold elements 8h.. in
// their low nibbles and 16+8h.. in their high ones); otherwise 16 consecutive elements. Each
// unit is read with a few wide loads instead of one load (and one scale) per element.
#define UNIT 16u
#if WTYPE == W_Q4_0 || WTYPE == W_Q4_1
#define UNIT_RUN1 16u
uint unit_run0(uint u) { return (u >> 1) * 32u + (u & 1u) * 8u; }
#else
#define UNIT_RUN1 8u
uint unit_run0(uint u) { return u * 16u; }
#endif

uint byte_of(uint word, uint i) { return (word >> (8u * i)) & 255u; }
float i8_of(uint word, uint i) { return float(int(word << (24u - 8u * i)) >> 24); }

// The 16 weights of unit |u| of the row at |row|: w[0..7] is run 0, w[8..15] run 1.
void load_unit(uint64_t row, uint u, out float w[16]) {
#if WTYPE == W_F32
  const uint64_t a = row + uint64_t(u) * 64u;
  for (uint i = 0; i < 8u; ++i) {
    const uvec2 v = load8_a4(a + 8u * i);
    w[2u * i] = uintBitsToFloat(v.x);
    w[2u * i + 1u] = uintBitsToFloat(v.y);
  }
#elif WTYPE == W_F16 || WTYPE == W_BF16
  const uint64_t a = row + uint64_t(u) * 32u;
  for (uint i = 0; i < 4u; ++i) {
    const uvec2 h = load8_a2(a + 8u * i);
#if WTYPE == W_F16
    const vec2 lo = unpackHalf2x16(h.x), hi = unpackHalf2x16(h.y);
#else
    const vec2 lo = vec2(uintBitsToFloat(h.x << 16), uintBitsToFloat(h.x & 0xffff0000u));
    const vec2 hi = vec2(uintBitsToFloat(h.y << 16), uintBitsToFloat(h.y & 0xffff0000u));
#endif
    w[4u * i] = lo.x;
    w[4u * i + 1u] = lo.y;
    w[4u * i + 2u] = hi.x;
    w[4u * i + 3u] = hi.y;
  }
#elif WTYPE == W_Q8_0
  const uint64_t blk = row + uint64_t(u >> 1) * 34u;
  const float d = f16_bits_to_f32(uint(U16Ref(blk).v));
  const uint64_t q = blk + 2u + (u & 1u) * 16u;
  for (uint i = 0; i < 2u; ++i) {
    const uvec2 h = load8_a2(q + 8u * i);
    for (uint j = 0; j < 4u; ++j) {
      w[8u * i + j] = d * i8_of(h.x, j);
      w[8u * i + 4u + j] = d * i8_of(h.y, j);
    }
  }
#elif WTYPE == W_Q4_0
  const uint64_t blk = row + uint64_t(u >> 1) * 18u;
  const float d = f16_bits_to_f32(uint(U16Ref(blk).v));
  const uvec2 q = load8_a2(blk + 2u + (u & 1u) * 8u);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte_of(i < 4u ? q.x : q.y, i & 3u);
    w[i] = d * float(int(b & 15u) - 8);
    w[8u + i] = d * float(int(b >> 4) - 8);
  }
#elif WTYPE == W_Q4_1
  const uint64_t blk = row + uint64_t(u >> 1) * 20u;
  const vec2 dm = unpackHalf2x16(U32Ref(blk).v);
  const uvec2 q = load8_a4(blk + 4u + (u & 1u) * 8u);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte_of(i < 4u ? q.x : q.y, i & 3u);
    w[i] = dm.x * float(b & 15u) + dm.y;
    w[8u + i] = dm.x * float(b >> 4) + dm.y;
  }
#endif
}
