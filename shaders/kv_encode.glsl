// Encoders of the row-scaled 8-bit KV formats (quant/fp8.cpp quantize_row_fp8_e4m3,
// quant/int_group.cpp quantize_row_int8_pc), bit-exact with them. Vulkan allows 2.5 ulp for an
// f32 division and lets a device flush subnormals (lavapipe does), while the reference divides
// exactly (SSE) and keeps subnormals; so every step works on the IEEE bit patterns in integer
// arithmetic: the same results on any device. Values are magnitudes (bits without the sign);
// the callers carry the signs.
//
// NaN and infinity follow what the reference computes on x86-64, the hosts Tessera builds on:
// the row's absmax skips NaNs (std::max keeps its first argument), x / scale keeps the NaN x's
// sign, inf / inf is the default NaN (negative), and lround of a NaN or an infinity is LONG_MIN,
// whose low 32 bits (the int the reference keeps) are 0.
#define F32_INF 0x7f800000u

uint bit_length64(uint64_t m) {
  const uint hi = uint(m >> 32);
  return hi != 0u ? 33u + uint(findMSB(hi)) : uint(findMSB(uint(m))) + 1u;
}

// The f32 nearest (ties to even) to m * 2^e (0 < m < 2^63), |sticky|: the exact value is a
// little above that; subnormal results and overflow to infinity included.
uint f32_round(uint64_t m, int e, bool sticky) {
  const int lead = e + int(bit_length64(m)) - 1;  // exponent of m's leading bit
  if (lead > 127) return F32_INF;
  const int lsb = max(lead - 23, -149);  // exponent of the result's last mantissa bit
  const int shift = lsb - e;
  uint64_t q;
  if (shift <= 0) {
    q = m << uint(-shift);  // exact (then m has at most 24 bits)
  } else if (shift > 63) {
    q = 0ul;  // m * 2^e < 2^(lsb - 1): below half the smallest subnormal
  } else {
    q = m >> uint(shift);
    const uint64_t rest = m - (q << uint(shift)), half_ulp = 1ul << uint(shift - 1);
    if (rest > half_ulp || (rest == half_ulp && (sticky || (q & 1ul) != 0ul))) q += 1ul;
  }
  // A normal result (lsb > -149, or the smallest binade): q holds the implicit bit at 2^23 and
  // the biased exponent is lsb + 150, so the bits are ((lsb + 149) << 23) + q (a carry into 2^24
  // raises the exponent); a subnormal one (lsb = -149) is q itself (a carry into 2^23 is the
  // smallest normal).
  const uint bits = (uint(lsb + 149) << 23) + uint(q);
  return min(bits, F32_INF);
}

// Mantissa (with the implicit bit, normalised to [2^23, 2^24)) and exponent: a = m * 2^e.
void f32_split(uint a, out uint m, out int e) {
  const uint ex = a >> 23, man = a & 0x7fffffu;
  if (ex != 0u) {
    m = man | 0x800000u;
    e = int(ex) - 150;
  } else {
    const uint s = 23u - uint(findMSB(man));
    m = man << s;
    e = -149 - int(s);
  }
}

// a / b and a * b as IEEE f32 computes them, for finite a >= 0 and finite b > 0.
uint f32_div(uint a, uint b) {
  if (a == 0u) return 0u;
  uint ma, mb;
  int ea, eb;
  f32_split(a, ma, ea);
  f32_split(b, mb, eb);
  const uint64_t num = uint64_t(ma) << 26;  // the quotient then has 26 or 27 bits
  const uint64_t q = num / uint64_t(mb);
  return f32_round(q, ea - eb - 26, q * uint64_t(mb) != num);
}
uint f32_mul(uint a, uint b) {
  if (a == 0u || b == 0u) return 0u;
  uint ma, mb;
  int ea, eb;
  f32_split(a, ma, ea);
  f32_split(b, mb, eb);
  return f32_round(uint64_t(ma) * uint64_t(mb), ea + eb, false);
}

// Round-to-nearest-even of m / 2^shift (shift >= 1).
uint round_shift(uint m, uint shift) {
  if (shift > 25u) return 0u;  // m < 2^24: below one half
  const uint q = m >> shift, rest = m & ((1u << shift) - 1u), half_ulp = 1u << (shift - 1u);
  return q + uint(rest > half_ulp || (rest == half_ulp && (q & 1u) != 0u));
}

// FP8 E4M3 code of the magnitude |a| (f32 bits, not NaN): saturating, ties to even.
uint e4m3_code(uint a) {
  if (a >= 0x43e00000u) return 0x7eu;  // >= 448, infinity included
  const uint ex = a >> 23, man = a & 0x7fffffu;
  if (ex >= 121u) return min(round_shift(((ex - 120u) << 23) | man, 20u), 0x7eu);  // >= 2^-6: normal
  // Subnormal E4M3: a multiple of 2^-9 (a carry to 8 is the smallest normal's code).
  return round_shift(ex == 0u ? man : man | 0x800000u, 141u - max(ex, 1u));
}

// |x| rounded half away from zero, clamped to 127 (f32 bits, finite).
uint round_away_127(uint a) {
  if (a < 0x3f000000u) return 0u;  // < 0.5
  const uint ex = a >> 23;
  if (ex >= 134u) return 127u;      // >= 128
  const uint shift = 150u - ex, m = (a & 0x7fffffu) | 0x800000u;
  return min((m + (1u << (shift - 1u))) >> shift, 127u);
}

// The row's scale (f32 bits) from its absmax |amax| (bits, not NaN).
uint kv_row_scale(uint amax) {
#if KVTYPE == W_FP8_E4M3
  const uint max_code_value = 0x43e00000u;  // 448
#else
  const uint max_code_value = 0x42fe0000u;  // 127
#endif
  return amax >= F32_INF ? F32_INF : f32_div(amax, max_code_value);
}

// What the encoder multiplies or divides by: the scale (FP8), 1 / scale or 0 (INT8_PC).
uint kv_row_factor(uint scale) {
#if KVTYPE == W_FP8_E4M3
  return scale;
#else
  if (scale == 0u || scale >= F32_INF) return 0u;  // inv = 0 (scale = inf: 1 / inf)
  return f32_div(0x3f800000u, scale);
#endif
}

// The code of element |x| (f32 bits) given kv_row_factor |f| of a row whose scale is not 0.
uint kv_code(uint x, uint f) {
  const uint s = x & 0x80000000u, a = x & 0x7fffffffu;
#if KVTYPE == W_FP8_E4M3
  if (a > F32_INF) return (s >> 24) | 0x7fu;         // NaN / scale: that NaN
  if (f >= F32_INF) return a == F32_INF ? 0xffu : s >> 24;  // inf / inf: default NaN; x / inf: +-0
  if (a == F32_INF) return (s >> 24) | 0x7eu;        // inf / scale: inf, saturated
  return (s >> 24) | e4m3_code(f32_div(a, f));
#else
  if (a >= F32_INF || f == 0u) return 0u;            // x * 0 (or NaN / inf): 0
  if (f >= F32_INF) return 0u;                       // x * inf: +-inf or NaN: lround gives 0
  const uint q = round_away_127(f32_mul(a, f));
  return (s != 0u ? 256u - q : q) & 255u;
#endif
}
