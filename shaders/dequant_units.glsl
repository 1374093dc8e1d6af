// load_unit for every weight format (included by dequant.glsl, which defines the units).

#if !W_FLOAT
// a * b - c and a * b + c with two roundings, as the reference computes them (no fused FMA).
float mul_sub(float a, float b, float c) {
  precise float r = a * b - c;
  return r;
}
float mul_add(float a, float b, float c) {
  precise float r = a * b + c;
  return r;
}
#endif

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
    const uint b = byte8(q, i);
    w[i] = d * float(int(b & 15u) - 8);
    w[8u + i] = d * float(int(b >> 4) - 8);
  }
#elif WTYPE == W_Q4_1
  const uint64_t blk = row + uint64_t(u >> 1) * 20u;
  const vec2 dm = unpackHalf2x16(U32Ref(blk).v);
  const uvec2 q = load8_a4(blk + 4u + (u & 1u) * 8u);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte8(q, i);
    w[i] = mul_add(dm.x, float(b & 15u), dm.y);
    w[8u + i] = mul_add(dm.x, float(b >> 4), dm.y);
  }
#elif WTYPE == W_Q5_0 || WTYPE == W_Q5_1
  // The 5th bit of element j is bit j of the block's little-endian u32 qh.
#if WTYPE == W_Q5_0
  const uint64_t blk = row + uint64_t(u >> 1) * 22u;
  const uvec2 head = load8_a2(blk);  // d, qh (2-byte aligned), then 2 bytes of qs
  const float d = f16_bits_to_f32(head.x & 0xffffu);
  const uint qh = (head.x >> 16) | (head.y << 16);
  const uvec2 q = load8_a2(blk + 6u + (u & 1u) * 8u);
#else
  const uint64_t blk = row + uint64_t(u >> 1) * 24u;
  const uvec2 head = load8_a4(blk);  // d, m, qh
  const vec2 dm = unpackHalf2x16(head.x);
  const uint qh = head.y;
  const uvec2 q = load8_a4(blk + 8u + (u & 1u) * 8u);
#endif
  const uint h0 = qh >> ((u & 1u) * 8u), h1 = qh >> (16u + (u & 1u) * 8u);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte8(q, i);
    const uint q0 = (b & 15u) | (((h0 >> i) & 1u) << 4), q1 = (b >> 4) | (((h1 >> i) & 1u) << 4);
#if WTYPE == W_Q5_0
    w[i] = d * float(int(q0) - 16);
    w[8u + i] = d * float(int(q1) - 16);
#else
    w[i] = mul_add(dm.x, float(q0), dm.y);
    w[8u + i] = mul_add(dm.x, float(q1), dm.y);
#endif
  }
#elif WTYPE == W_Q4_K || WTYPE == W_Q5_K
  // Unit u: super-block u / 16, 64-element chunk c (sub-blocks 2c and 2c + 1 in the low and
  // high nibbles of qs[32c .. 32c + 31]), bytes 8j .. 8j + 7 of that chunk.
  const uint c = (u >> 2) & 3u, j = u & 3u;
#if WTYPE == W_Q4_K
  const uint64_t blk = row + uint64_t(u >> 4) * 144u;
  const uvec2 q = load8_a4(blk + 16u + 32u * c + 8u * j);
#else
  const uint64_t blk = row + uint64_t(u >> 4) * 176u;
  const uvec2 q = load8_a4(blk + 48u + 32u * c + 8u * j);
  const uvec2 qh = load8_a4(blk + 16u + 8u * j);  // bit i of qh[l]: bit 4 of element 32i + l
#endif
  const uvec2 head = load8_a4(blk), scales = load8_a4(blk + 8u);  // d, dmin, scale bytes 0-11
  const vec2 dm = unpackHalf2x16(head.x);
  const uvec2 sm0 = k_scale_min(head.y, scales.x, scales.y, 2u * c);
  const uvec2 sm1 = k_scale_min(head.y, scales.x, scales.y, 2u * c + 1u);
  // y = (d * sc) * q - dmin * m, the reference's f32 operations.
  const float step0 = dm.x * float(sm0.x), off0 = dm.y * float(sm0.y);
  const float step1 = dm.x * float(sm1.x), off1 = dm.y * float(sm1.y);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte8(q, i);
    uint q0 = b & 15u, q1 = b >> 4;
#if WTYPE == W_Q5_K
    const uint h = byte8(qh, i);
    q0 |= ((h >> (2u * c)) & 1u) << 4;
    q1 |= ((h >> (2u * c + 1u)) & 1u) << 4;
#endif
    w[i] = mul_sub(step0, float(q0), off0);
    w[8u + i] = mul_sub(step1, float(q1), off1);
  }
#elif WTYPE == W_Q6_K
  // Unit u: super-block u / 16, half hh (128 elements), bytes 8j .. 8j + 7 of the half's 64 ql
  // bytes: element 128hh + 8j + i in their low nibbles, 128hh + 64 + 8j + i in the high ones;
  // the high 2 bits of both in qh[32hh + 8(j % 4) + i], at bits 2(j / 4) and 2(2 + j / 4).
  const uint hh = (u >> 3) & 1u, j = u & 7u;
  const uint64_t blk = row + uint64_t(u >> 4) * 210u;
  const uvec2 ql = load8_a2(blk + 64u * hh + 8u * j);
  const uvec2 qh = load8_a2(blk + 128u + 32u * hh + 8u * (j & 3u));
  const float d = f16_bits_to_f32(uint(U16Ref(blk + 208u).v));
  const uint64_t sc = blk + 192u + 8u * hh + j / 2u;  // int8 scales, one per 16 elements
  const float s0 = d * float(int(uint(U8Ref(sc).v) << 24) >> 24);
  const float s1 = d * float(int(uint(U8Ref(sc + 4u).v) << 24) >> 24);
  const uint sh0 = 2u * (j >> 2), sh1 = 4u + 2u * (j >> 2);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte8(ql, i), h = byte8(qh, i);
    w[i] = s0 * float(int((b & 15u) | (((h >> sh0) & 3u) << 4)) - 32);
    w[8u + i] = s1 * float(int((b >> 4) | (((h >> sh1) & 3u) << 4)) - 32);
  }
#elif WTYPE == W_MXFP4
  // 17-byte blocks: the E8M0 exponent, then the nibbles as Q4_0's. Half the scale 2^(e-127)
  // times twice the E2M1 value, as the reference (subnormal for e < 2).
  const uint64_t blk = row + uint64_t(u >> 1) * 17u;
  const uint e = uint(U8Ref(blk).v);
  const float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : (e - 1u) << 23);
  const uvec2 q = load8_a1(blk + 1u + (u & 1u) * 8u);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte8(q, i);
    w[i] = d * e2m1x2(b & 15u);
    w[8u + i] = d * e2m1x2(b >> 4);
  }
#elif WTYPE == W_NVFP4
  // 36-byte blocks of 4 sub-blocks of 16: unit u is sub-block u % 4 of block u / 4 (UE4M3
  // scale byte s, quant bytes qs[8s .. 8s + 7]: elements i in the low nibbles, 8 + i high).
  const uint64_t blk = row + uint64_t(u >> 2) * 36u;
  const uint s = u & 3u;
  const float d = 0.5 * ue4m3(byte_of(U32Ref(blk).v, s));
  const uvec2 q = load8_a4(blk + 4u + 8u * s);
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte8(q, i);
    w[i] = d * e2m1x2(b & 15u);
    w[8u + i] = d * e2m1x2(b >> 4);
  }
#elif WTYPE == W_FP8_E4M3 || WTYPE == W_FP8_E5M2 || WTYPE == W_INT8_PC
  // Row-scaled: [f32 scale][K one-byte codes]; the row (4 + K bytes, K a multiple of 32) and so
  // its codes are 4-byte aligned.
  const float scale = F32Ref(row).v;
  const uint64_t a = row + 4u + uint64_t(u) * 16u;
  for (uint h = 0; h < 2u; ++h) {
    const uvec2 q = load8_a4(a + 8u * h);
    for (uint i = 0; i < 8u; ++i) {
#if WTYPE == W_FP8_E4M3
      w[8u * h + i] = fp8_e4m3(byte8(q, i)) * scale;
#elif WTYPE == W_FP8_E5M2
      w[8u * h + i] = fp8_e5m2(byte8(q, i)) * scale;
#else
      w[8u * h + i] = i8_of(i < 4u ? q.x : q.y, i & 3u) * scale;
#endif
    }
  }
#elif W_INT4
  // Groups of 2R = 2 * UNIT_RUN1: [f16 scale][u8 zero][u8 0][R quant bytes packed as Q4_0's].
  const uint64_t blk = row + uint64_t(u / UNITS_PER_BLOCK) * (4u + UNIT_RUN1);
  const uint head = U32Ref(blk).v;
  const float d = f16_bits_to_f32(head & 0xffffu);
  const int zero = int((head >> 16) & 255u);
  const uvec2 q = load8_a4(blk + 4u + 8u * (u % UNITS_PER_BLOCK));
  for (uint i = 0; i < 8u; ++i) {
    const uint b = byte8(q, i);
    w[i] = float(int(b & 15u) - zero) * d;
    w[8u + i] = float(int(b >> 4) - zero) * d;
  }
#else
#error "unknown WTYPE"
#endif
}
