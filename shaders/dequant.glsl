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
