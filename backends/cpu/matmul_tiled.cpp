// Quantised matmul over weights repacked at load (CpuDevice::prepare_weight, layout
// WeightLayout::kCpuTile16): Q4_0, Q4_1, Q8_0, Q4_K and Q6_K as tiles of 16 weight rows, so that
// one vector of codes feeds 16 output rows at once and a weight load is shared by several
// activation rows. The K-quants' tile blocks are described above q4k_scales.
//
// Tile layout (the same bytes on every target; a tile block is 16 rows x 32 elements):
//   tiles[N/16][K/32] of
//     d[16]   f16 row scales
//     m[16]   f16 row mins (Q4_1 only)
//     chunks  of 64 bytes: bytes 4r..4r+3 belong to row r (r = 0..15)
//       Q4_0/Q4_1, chunk c = 0..3: the row's packed bytes qs[4c..4c+3], i.e. low nibbles are
//         codes 4c..4c+3 and high nibbles codes 16+4c..16+4c+3 (GGUF's nibble order);
//       Q8_0, chunk c = 0..7: codes 4c..4c+3 as u8 (code + 128, so VNNI's u8 x s8 dot reads them;
//         the 128 * sum(x) it adds is removed in the integer domain).
// A tile block has exactly the bytes of its 16 GGUF blocks, so a repacked weight costs what the
// mapped one did.
//
// Kernels: AVX3_DL: one 512-bit load = 4 codes of 16 rows, vpdpbusd against the activation's 4
// bytes broadcast, int32 per (row, block), then one convert and FMA with d * dx. AVX2/AVX3: the
// same tiles as two 8-row halves through maddubs (+ madd). SCALAR and other targets: plain loops.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/tile_layout.h"
#include "quant/half.h"
#include "quant/kquants.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/matmul_tiled.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif
// The K-quant kernels' vector operations per target (KV), and AVX3_DL's broadcast vpdpbusd.
#include "backends/cpu/tile_vec-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// The activations of one kernel call: MR rows of ActQ8 blocks and their per-block code sums.
template <int MR>
struct TileAct {
  const ActQ8* x[MR];
  const int32_t* sum[MR];  // [nb] sum(qx) per block
  float* out[MR];          // output row, at the first tile's column
};

#if HWY_TARGET == HWY_AVX3_DL

// out[r][16t + i] for MR activation rows and TN consecutive tiles (|ts| bytes apart).
template <class F, int MR, int TN>
HWY_INLINE void tile_kernel(const TileAct<MR>& a, const char* tile0, int64_t ts, int64_t nb) {
  constexpr int64_t TB = kTileBlockBytes<F>;
  __m512 acc[MR][TN];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TN; ++t) acc[r][t] = _mm512_setzero_ps();
  const __m512i mask = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    __m512i ia[MR][TN];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512i init = F::kOff != 0 ? _mm512_set1_epi32(F::kOff * a.sum[r][b]) : _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int t = 0; t < TN; ++t) ia[r][t] = init;
    }
#pragma GCC unroll 8
    for (int c = 0; c < F::kChunks; ++c) {
      __m512i lo[TN], hi[TN];
#pragma GCC unroll 4
      for (int t = 0; t < TN; ++t) {
        const __m512i w = _mm512_loadu_si512(tile0 + t * ts + b * TB + F::kHeader + 64 * c);
        if constexpr (F::kNibbles) {
          lo[t] = _mm512_and_si512(w, mask);
          hi[t] = _mm512_and_si512(_mm512_srli_epi16(w, 4), mask);
        } else {
          lo[t] = w;
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
        for (int t = 0; t < TN; ++t) ia[r][t] = dpbusd_bcast(ia[r][t], lo[t], a.x[r][b].qs + 4 * c);
        if constexpr (F::kNibbles) {
#pragma GCC unroll 4
          for (int t = 0; t < TN; ++t) ia[r][t] = dpbusd_bcast(ia[r][t], hi[t], a.x[r][b].qs + 16 + 4 * c);
        }
      }
    }
    __m512 d[TN], mn[TN];
#pragma GCC unroll 4
    for (int t = 0; t < TN; ++t) {
      const char* h = tile0 + t * ts + b * TB;
      d[t] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
      if constexpr (F::kMin) mn[t] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 32)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 dx = _mm512_set1_ps(a.x[r][b].d);
#pragma GCC unroll 4
      for (int t = 0; t < TN; ++t) {
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][t]), _mm512_mul_ps(d[t], dx), acc[r][t]);
        if constexpr (F::kMin) acc[r][t] = _mm512_fmadd_ps(mn[t], _mm512_set1_ps(a.x[r][b].s), acc[r][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TN; ++t) _mm512_storeu_ps(a.out[r] + 16 * t, acc[r][t]);
}
// Prefill: 4 activation rows x 2 tiles (16 int32 + 16 f32 accumulators of the 32 zmm).
// Decode (every target): 1 row x 1 tile per call. Streaming one tile at a time keeps each
// thread's weight reads one sequential stream: on a 2-vCPU Zen 4 (AVX-512 VNNI) the GEMV went from 74-91% of the measured
// read bandwidth with 4 tiles per call (four independent vpdpbusd chains) to 93-100% (Q4_0, Q4_1,
// Q8_0) and Q4_K 74% -> 96%, Q6_K 75% -> 89% (`tessera-bench gemv`, 3 alternating runs); the AVX3
// target gained alike with 1 instead of 2 (docs/bench.md).
inline constexpr int kMR = 4, kTN = 2;
// K-quants: Q4_K 4 rows x 2 tiles; Q6_K 8 rows x 1 tile (two int32 accumulators per pair).
inline constexpr int kQ4KMR = 4, kQ4KTN = 2, kQ6KMR = 8, kQ6KTN = 1;

#elif HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

// The same tiles as 8-row halves (h = 2t + half) through maddubs. Q4: each maddubs pair sum is
// at most 2 * 15 * 127, so the block's 8 products of a row add up in i16 (8 * 3810 < 32768)
// before one madd; Q8_0 flips the u8 codes back to s8 and moves their signs onto x.
template <class F, int MR, int TN>
HWY_INLINE void tile_kernel(const TileAct<MR>& a, const char* tile0, int64_t ts, int64_t nb) {
  constexpr int64_t TB = kTileBlockBytes<F>;
  constexpr int H = 2 * TN;
  __m256 acc[MR][H];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) acc[r][h] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i ia[MR][H];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) ia[r][h] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < F::kChunks; ++c) {
      __m256i lo[H], hi[H];
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        const __m256i w = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(tile0 + (h / 2) * ts + b * TB + F::kHeader + 64 * c + 32 * (h % 2)));
        if constexpr (F::kNibbles) {
          lo[h] = _mm256_and_si256(w, _mm256_set1_epi8(0x0f));
          hi[h] = _mm256_and_si256(_mm256_srli_epi16(w, 4), _mm256_set1_epi8(0x0f));
        } else {
          lo[h] = _mm256_xor_si256(w, _mm256_set1_epi8(int8_t(0x80)));  // s8 codes
          hi[h] = _mm256_abs_epi8(lo[h]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m256i xa = _mm256_set1_epi32(load_i32(a.x[r][b].qs + 4 * c));
        if constexpr (F::kNibbles) {
          const __m256i xb = _mm256_set1_epi32(load_i32(a.x[r][b].qs + 16 + 4 * c));
#pragma GCC unroll 4
          for (int h = 0; h < H; ++h)
            ia[r][h] = _mm256_add_epi16(ia[r][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], xa),
                                                                   _mm256_maddubs_epi16(hi[h], xb)));
        } else {
#pragma GCC unroll 4
          for (int h = 0; h < H; ++h)
            ia[r][h] = _mm256_add_epi32(
                ia[r][h], _mm256_madd_epi16(_mm256_maddubs_epi16(hi[h], _mm256_sign_epi8(xa, lo[h])), ones));
        }
      }
    }
    __m256 d[H], mn[H];
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const char* hd = tile0 + (h / 2) * ts + b * TB + 16 * (h % 2);
      d[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hd)));
      if constexpr (F::kMin) mn[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hd + 32)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m256 dx = _mm256_set1_ps(a.x[r][b].d);
      const __m256i off = _mm256_set1_epi32(F::kNibbles ? F::kOff * a.sum[r][b] : 0);
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        __m256i s = ia[r][h];
        if constexpr (F::kNibbles) s = _mm256_add_epi32(_mm256_madd_epi16(s, ones), off);
        acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d[h], dx), acc[r][h]);
        if constexpr (F::kMin) acc[r][h] = _mm256_fmadd_ps(mn[h], _mm256_set1_ps(a.x[r][b].s), acc[r][h]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(a.out[r] + 8 * h, acc[r][h]);
}
#if HWY_TARGET == HWY_AVX3
inline constexpr int kMR = 4, kTN = 1;  // 32 vector registers
inline constexpr int kQ4KMR = 4, kQ4KTN = 1, kQ6KMR = 4, kQ6KTN = 1;
#else
inline constexpr int kMR = 2, kTN = 1;  // 16 vector registers
// The K-quants take 4 rows although their accumulators then spill a few of the 16 registers:
// each tile block decoded once per 4 rows measured 9-15% faster than once per 2 (docs/bench.md).
inline constexpr int kQ4KMR = 4, kQ4KTN = 1, kQ6KMR = 4, kQ6KTN = 1;
#endif

#else
// Portable: every target reads the tiles (SCALAR under test on x86; the 64-bit Arm build does
// not repack, CpuDevice::prepare_weight). Signed codes, integer dot per block, f32 per block.
template <class F, int MR, int TN>
HWY_INLINE void tile_kernel(const TileAct<MR>& a, const char* tile0, int64_t ts, int64_t nb) {
  constexpr int64_t TB = kTileBlockBytes<F>;
  for (int t = 0; t < TN; ++t)
    for (int i = 0; i < 16; ++i)
      for (int r = 0; r < MR; ++r) {
        double acc = 0.0;
        for (int64_t b = 0; b < nb; ++b) {
          const auto* blk = reinterpret_cast<const uint8_t*>(tile0 + t * ts + b * TB);
          const int8_t* q = a.x[r][b].qs;
          int32_t dot = 0;
          for (int c = 0; c < F::kChunks; ++c)
            for (int j = 0; j < 4; ++j) {
              const uint8_t v = blk[F::kHeader + 64 * c + 4 * i + j];
              if constexpr (F::kNibbles)
                dot += (int32_t(v & 15) + F::kOff) * q[4 * c + j] + (int32_t(v >> 4) + F::kOff) * q[16 + 4 * c + j];
              else
                dot += int32_t(int8_t(v ^ 0x80)) * q[4 * c + j];
            }
          uint16_t dh;
          std::memcpy(&dh, blk + 2 * i, 2);
          float v = fp16_to_f32(dh) * a.x[r][b].d * float(dot);
          if constexpr (F::kMin) {
            std::memcpy(&dh, blk + 32 + 2 * i, 2);
            v += fp16_to_f32(dh) * a.x[r][b].s;
          }
          acc += v;
        }
        a.out[r][16 * t + i] = float(acc);
      }
}
inline constexpr int kMR = 4, kTN = 1;
inline constexpr int kQ4KMR = 4, kQ4KTN = 1, kQ6KMR = 4, kQ6KTN = 1;
#endif

// ---- K-quant tiles (Q4_K, Q6_K) ----------------------------------------------------------------
// Q4_K tile block (16 rows x 256 elements, 2304 bytes):
//   d[16], dmin[16]  f16
//   P0, P1, P2       64 bytes each: the 8 scales and 8 mins of every row, 6 bits each, arranged
//                    so that four vector steps unpack them for all 16 rows: with U0 = sc[0..3],
//                    U1 = sc[4..7], U2 = m[0..3], U3 = m[4..7] as bytes [j][row],
//                    P0 = lo4(U0) | lo4(U1) << 4, P1 = lo4(U2) | lo4(U3) << 4,
//                    P2 = hi2(U0) | hi2(U1) << 2 | hi2(U2) << 4 | hi2(U3) << 6.
//   codes            32 chunks of 64 bytes: chunk 8c + k, bytes 4r..4r+3 = row r's qs[32c+4k..+3]
//                    (low nibbles: sub-block 2c, elements 4k..4k+3; high nibbles: sub-block 2c+1).
// Q6_K tile block (3328 bytes; the 16 f16 row scales d of block s are at tile + nsb * 3328 + 32 s):
//   sc[16][16]       int8 scale of 16-element group g of row r at 16 g + r
//   per 32-element sub-block j, 384 bytes: 4 chunks of low nibbles (chunk c, bytes 4r..4r+3:
//                    elements 4c.. in the low nibble, 16+4c.. in the high nibble), then 2 chunks
//                    of high bit pairs (chunk h, bits 2g..2g+1 of byte 4r+l: element 16h+4g+l).
// Both decode to unsigned codes (Q4_K 0..15, Q6_K 0..63) for the u8 x s8 dot; per 32 elements
// Q4_K adds (d sc) dx dot - (dmin m) dx sum(qx); Q6_K takes sc * (dot - 32 sum(qx)) per 16 in
// int32 and d dx per 32.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// The 256 six-bit scales and mins of a Q4_K tile block as bytes: sc[j][r] at 16j + r, m at 128 + 16j + r.
HWY_INLINE void q4k_scales(const char* p, uint8_t* out) {
  const KV::I m4 = KV::bytes(0x0f), m30 = KV::bytes(0x30);
#pragma GCC unroll 2
  for (int o = 0; o < 64; o += int(sizeof(KV::I))) {
    const KV::I p0 = KV::load(p + o), p1 = KV::load(p + 64 + o), p2 = KV::load(p + 128 + o);
    KV::store(out + o, KV::or_(KV::and_(p0, m4), KV::and_(KV::sll16<4>(p2), m30)));
    KV::store(out + 64 + o, KV::or_(KV::and_(KV::srl16<4>(p0), m4), KV::and_(KV::sll16<2>(p2), m30)));
    KV::store(out + 128 + o, KV::or_(KV::and_(p1, m4), KV::and_(p2, m30)));
    KV::store(out + 192 + o, KV::or_(KV::and_(KV::srl16<4>(p1), m4), KV::and_(KV::srl16<2>(p2), m30)));
  }
}

// Decode software prefetch. Only Q6_K's decode prefetches: the part of every tile block it
// reads next, two blocks ahead, into L2. Measured in one process, two variants
// alternating 60 times over the same 3 x 54 MB of 32000 x 2048 tiles (Zen 4 VM, GB/s, 1 / 2
// threads): Q6_K L2 17.5 -> 19.7 / 34.1 -> 38.9 against L1 (AVX2 forced: 17.8 -> 19.8 /
// 35.1 -> 38.1), and none at all 14.3 against L1's 17.7; 1 or 4 blocks ahead or every other
// step were slower. For Q4_K, Q4_0, Q4_1 and Q8_0 the hardware prefetcher alone was faster than
// any software prefetch: no prefetch against L1 two blocks (Q4_K) or 8 blocks (the others)
// ahead, Q4_K 19.2 -> 22.1, 17.5 -> 19.7 / 24.9 -> 27.4, Q4_0 18.7 -> 20.3 / 28.8 -> 29.8,
// 35.9 -> 36.8, Q4_1 19.0 -> 20.4 / 26.3 -> 27.3, Q8_0 20.8 -> 22.1 / 26.1 -> 26.9; AVX2 Q4_K
// 17.6 -> 19.1 / 23.5 -> 25.6, Q4_0 17.0 -> 18.7, Q8_0 20.5 -> 21.2. (Earlier runs-apart
// comparisons had called them even: this VM's bandwidth moves 10-30% between runs.) Other CPUs
// may differ; docs/bench.md.
template <int TN>
HWY_INLINE void q6k_prefetch(const char* tile0, int64_t ts, int64_t sb, int j) {
  constexpr int64_t part = TileQ6_K::kBlock / 8;
#pragma GCC unroll 4
  for (int t = 0; t < TN; ++t) {
    const char* p = tile0 + t * ts + (sb + 2) * TileQ6_K::kBlock + j * part;
#pragma GCC unroll 8
    for (int64_t o = 0; o < part + 63; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
  }
}

// out[r][16t + i] for MR activation rows and TN consecutive Q4_K tiles. A tile is P = 16 / L
// vectors of L rows (s = P t + half).
template <int MR, int TN>
HWY_INLINE void q4k_kernel(const TileAct<MR>& a, const char* tile0, int64_t ts, int64_t nsb) {
  using I = KV::I;
  using F = KV::F;
  constexpr int P = 16 / KV::L, S = TN * P;
  constexpr int64_t TB = TileQ4_K::kBlock;
  F acc[MR][S];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) acc[r][s] = KV::fzero();
  const I m4 = KV::bytes(0x0f);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    alignas(64) uint8_t sc[TN][256];
    F d[S], dm[S];
#pragma GCC unroll 4
    for (int t = 0; t < TN; ++t) q4k_scales(tile0 + t * ts + sb * TB + 64, sc[t]);
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const char* blk = tile0 + (s / P) * ts + sb * TB + 2 * KV::L * (s % P);
      d[s] = KV::f16(blk);
      dm[s] = KV::f16(blk + 32);
    }
#pragma GCC unroll 1
    for (int c = 0; c < 4; ++c) {
      // Sub-blocks 2c (low nibbles) and 2c+1 (high): decode (one row) reads each chunk once
      // for both; prefill reads it twice, so that its MR x S accumulators fit the registers.
      constexpr int H = MR == 1 ? 2 : 1;
#pragma GCC unroll 2
      for (int h0 = 0; h0 < 2; h0 += H) {
        I ia[H][MR][S];
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
            for (int s = 0; s < S; ++s) ia[h][r][s] = KV::zero();
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          I q[H][S];
#pragma GCC unroll 4
          for (int s = 0; s < S; ++s) {
            const I w = KV::load(tile0 + (s / P) * ts + sb * TB + 256 + 64 * (8 * c + k) + 4 * KV::L * (s % P));
            if constexpr (H == 2) {
              q[0][s] = KV::and_(w, m4);
              q[1][s] = KV::and_(KV::srl16<4>(w), m4);
            } else {
              q[0][s] = h0 ? KV::and_(KV::srl16<4>(w), m4) : KV::and_(w, m4);
            }
          }
#pragma GCC unroll 2
          for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
            for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
              for (int s = 0; s < S; ++s)
                ia[h][r][s] = KV::dot16(ia[h][r][s], q[h][s], a.x[r][8 * sb + 2 * c + h0 + h].qs + 4 * k);
        }
        // 4-bit codes: the 8 steps' 16-bit pair sums stay in range (KV::dot16).
        if constexpr (KV::kDot16) {
#pragma GCC unroll 2
          for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
            for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
              for (int s = 0; s < S; ++s) ia[h][r][s] = KV::widen16(ia[h][r][s]);
        }
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
          const int j = 2 * c + h0 + h;
          F dsc[S], dmm[S];
#pragma GCC unroll 4
          for (int s = 0; s < S; ++s) {
            const uint8_t* u = sc[s / P] + 16 * j + KV::L * (s % P);
            dsc[s] = KV::mul(KV::cvt(KV::u8(u)), d[s]);
            dmm[s] = KV::mul(KV::cvt(KV::u8(u + 128)), dm[s]);
          }
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            const ActQ8& xb = a.x[r][8 * sb + j];
            const F dx = KV::fset1(xb.d), xs = KV::fset1(xb.s);
#pragma GCC unroll 4
            for (int s = 0; s < S; ++s) {
              acc[r][s] = KV::fma(KV::cvt(ia[h][r][s]), KV::mul(dsc[s], dx), acc[r][s]);
              acc[r][s] = KV::fnma(dmm[s], xs, acc[r][s]);
            }
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) KV::fstore(a.out[r] + KV::L * s, acc[r][s]);
}

// The high bit pair g of every byte of |qh| at bits 4-5.
template <int G>
HWY_INLINE KV::I q6k_high(KV::I qh, KV::I m30) {
  if constexpr (G == 0) return KV::and_(KV::sll16<4>(qh), m30);
  if constexpr (G == 1) return KV::and_(KV::sll16<2>(qh), m30);
  if constexpr (G == 2) return KV::and_(qh, m30);
  return KV::and_(KV::srl16<2>(qh), m30);
}

template <int MR, int S, int G>
HWY_INLINE void q6k_step(const TileAct<MR>& a, int64_t b, const char* const* sub, const KV::I* qh0, const KV::I* qh1,
                         KV::I m4, KV::I m30, KV::I (*ia)[S], KV::I (*ib)[S]) {
  constexpr int P = 16 / KV::L;
  KV::I lo[S], hi[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    const KV::I w = KV::load(sub[s] + 64 * G + 4 * KV::L * (s % P));
    lo[s] = KV::and_or(w, m4, q6k_high<G>(qh0[s], m30));
    hi[s] = KV::and_or(KV::srl16<4>(w), m4, q6k_high<G>(qh1[s], m30));
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const int8_t* x = a.x[r][b].qs + 4 * G;
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      ia[r][s] = KV::dot(ia[r][s], lo[s], x);
      ib[r][s] = KV::dot(ib[r][s], hi[s], x + 16);
    }
  }
}

// out[r][16t + i] for MR activation rows and TN consecutive Q6_K tiles.
template <int MR, int TN>
HWY_INLINE void q6k_kernel(const TileAct<MR>& a, const char* tile0, int64_t ts, int64_t nsb) {
  using I = KV::I;
  using F = KV::F;
  constexpr int P = 16 / KV::L, S = TN * P;
  constexpr int64_t TB = TileQ6_K::kBlock;
  F acc[MR][S];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) acc[r][s] = KV::fzero();
  const I m4 = KV::bytes(0x0f), m30 = KV::bytes(0x30);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    F d[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) d[s] = KV::f16(tile0 + (s / P) * ts + nsb * TB + 32 * sb + 2 * KV::L * (s % P));
    // Decode: the row scales sit after all of a tile's blocks, out of the tile's sequential
    // stream, so the next tile's would be a demand miss at its first block; fetch them during
    // this tile instead, one super-block's 32 bytes per step.
    if constexpr (MR == 1) _mm_prefetch(tile0 + TN * ts + nsb * TB + 32 * sb, _MM_HINT_T0);
#pragma GCC unroll 1
    for (int j = 0; j < 8; ++j) {
      if constexpr (MR == 1) q6k_prefetch<TN>(tile0, ts, sb, j);
      const int64_t b = 8 * sb + j;
      I ia[MR][S], ib[MR][S];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const I oa = KV::set1(a.sum[r][2 * b]), ob = KV::set1(a.sum[r][2 * b + 1]);
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s) ia[r][s] = oa, ib[r][s] = ob;
      }
      const char* sub[S];
      I qh0[S], qh1[S];
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        sub[s] = tile0 + (s / P) * ts + sb * TB + 256 + 384 * j;
        qh0[s] = KV::load(sub[s] + 256 + 4 * KV::L * (s % P));
        qh1[s] = KV::load(sub[s] + 320 + 4 * KV::L * (s % P));
      }
      q6k_step<MR, S, 0>(a, b, sub, qh0, qh1, m4, m30, ia, ib);
      q6k_step<MR, S, 1>(a, b, sub, qh0, qh1, m4, m30, ia, ib);
      q6k_step<MR, S, 2>(a, b, sub, qh0, qh1, m4, m30, ia, ib);
      q6k_step<MR, S, 3>(a, b, sub, qh0, qh1, m4, m30, ia, ib);
      I sa[S], sbv[S];
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        const auto* g = reinterpret_cast<const int8_t*>(tile0 + (s / P) * ts + sb * TB) + 32 * j + KV::L * (s % P);
        sa[s] = KV::s8(g);
        sbv[s] = KV::s8(g + 16);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const F dx = KV::fset1(a.x[r][b].d);
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s) {
          const I v = KV::add(KV::mullo(ia[r][s], sa[s]), KV::mullo(ib[r][s], sbv[s]));
          acc[r][s] = KV::fma(KV::cvt(v), KV::mul(d[s], dx), acc[r][s]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) KV::fstore(a.out[r] + KV::L * s, acc[r][s]);
}

#else
// Portable K-quant tiles: plain loops over the same layout (SCALAR under test on x86).
inline void q4k_scales(const char* p, uint8_t* out) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  for (int o = 0; o < 64; ++o) {
    const uint8_t p0 = u[o], p1 = u[64 + o], p2 = u[128 + o];
    out[o] = uint8_t((p0 & 15) | ((p2 & 3) << 4));
    out[64 + o] = uint8_t((p0 >> 4) | (((p2 >> 2) & 3) << 4));
    out[128 + o] = uint8_t((p1 & 15) | (((p2 >> 4) & 3) << 4));
    out[192 + o] = uint8_t((p1 >> 4) | ((p2 >> 6) << 4));
  }
}

inline float f16_at(const char* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

template <int MR, int TN>
HWY_INLINE void q4k_kernel(const TileAct<MR>& a, const char* tile0, int64_t ts, int64_t nsb) {
  constexpr int64_t TB = TileQ4_K::kBlock;
  for (int t = 0; t < TN; ++t)
    for (int r = 0; r < MR; ++r) {
      double acc[16] = {};
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const char* blk = tile0 + t * ts + sb * TB;
        uint8_t sc[256];
        q4k_scales(blk + 64, sc);
        const auto* codes = reinterpret_cast<const uint8_t*>(blk + 256);
        for (int j = 0; j < 8; ++j) {
          const ActQ8& xb = a.x[r][8 * sb + j];
          const int c = j / 2, h = j % 2;
          for (int i = 0; i < 16; ++i) {
            int32_t dot = 0;
            for (int k = 0; k < 8; ++k)
              for (int l = 0; l < 4; ++l) dot += ((codes[64 * (8 * c + k) + 4 * i + l] >> (4 * h)) & 15) * xb.qs[4 * k + l];
            acc[i] += f16_at(blk + 2 * i) * float(sc[16 * j + i]) * xb.d * float(dot) -
                      f16_at(blk + 32 + 2 * i) * float(sc[128 + 16 * j + i]) * xb.s;
          }
        }
      }
      for (int i = 0; i < 16; ++i) a.out[r][16 * t + i] = float(acc[i]);
    }
}

template <int MR, int TN>
HWY_INLINE void q6k_kernel(const TileAct<MR>& a, const char* tile0, int64_t ts, int64_t nsb) {
  constexpr int64_t TB = TileQ6_K::kBlock;
  for (int t = 0; t < TN; ++t)
    for (int r = 0; r < MR; ++r) {
      double acc[16] = {};
      for (int64_t sb = 0; sb < nsb; ++sb) {
        const char* blk = tile0 + t * ts + sb * TB;
        const auto* sc = reinterpret_cast<const int8_t*>(blk);
        for (int j = 0; j < 8; ++j) {
          const int64_t b = 8 * sb + j;
          const ActQ8& xb = a.x[r][b];
          const auto* sub = reinterpret_cast<const uint8_t*>(blk + 256 + 384 * j);
          for (int i = 0; i < 16; ++i) {
            int32_t dot[2] = {a.sum[r][2 * b], a.sum[r][2 * b + 1]};
            for (int c = 0; c < 4; ++c)
              for (int l = 0; l < 4; ++l) {
                const uint8_t w = sub[64 * c + 4 * i + l];
                const int lo = (w & 15) | (((sub[256 + 4 * i + l] >> (2 * c)) & 3) << 4);
                const int hi = (w >> 4) | (((sub[320 + 4 * i + l] >> (2 * c)) & 3) << 4);
                dot[0] += lo * xb.qs[4 * c + l];
                dot[1] += hi * xb.qs[16 + 4 * c + l];
              }
            const int32_t v = sc[32 * j + i] * dot[0] + sc[32 * j + 16 + i] * dot[1];
            acc[i] += f16_at(tile0 + t * ts + nsb * TB + 32 * sb + 2 * i) * xb.d * float(v);
          }
        }
      }
      for (int i = 0; i < 16; ++i) a.out[r][16 * t + i] = float(acc[i]);
    }
}
#endif

// Rows and tiles per kernel call for format F in prefill (decode: 1 x 1).
template <class F>
struct Blocking {
  static constexpr int MR = kMR, TN = kTN;
};
template <>
struct Blocking<TileQ4_K> {
  static constexpr int MR = kQ4KMR, TN = kQ4KTN;
};
template <>
struct Blocking<TileQ6_K> {
  static constexpr int MR = kQ6KMR, TN = kQ6KTN;
};

// MR activation rows from row |m| against TN tiles from tile |t|.
template <class F, int MR, int TN>
HWY_INLINE void run_block(const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m, const char* tiles, int64_t t,
                          int64_t nb, float* out, int64_t ldo) {
  TileAct<MR> a;
  for (int r = 0; r < MR; ++r) {
    a.x[r] = x + (m + r) * ldx;
    a.sum[r] = xsum + (m + r) * nb * F::kSumPer;
    a.out[r] = out + (m + r) * ldo + 16 * t;
  }
  const int64_t ts = tile_stride<F>(nb);
  if constexpr (std::is_same_v<F, TileQ4_K>)
    q4k_kernel<MR, TN>(a, tiles + t * ts, ts, nb / 8);
  else if constexpr (std::is_same_v<F, TileQ6_K>)
    q6k_kernel<MR, TN>(a, tiles + t * ts, ts, nb / 8);
  else
    tile_kernel<F, MR, TN>(a, tiles + t * ts, ts, nb);
}

// out[m, 16 t0 .. 16 t1) for m in [m0, m1): per group of tiles, every activation row passes
// while the tiles stay in cache.
template <class F>
void tiled_range(const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m0, int64_t m1, const char* tiles,
                 int64_t t0, int64_t t1, int64_t nb, float* out, int64_t ldo) {
  constexpr int MR = Blocking<F>::MR, TN = Blocking<F>::TN;
  if (m1 - m0 == 1) {  // decode GEMV: one tile per call, one weight stream per thread (see kMR)
    for (int64_t t = t0; t < t1; ++t) run_block<F, 1, 1>(x, ldx, xsum, m0, tiles, t, nb, out, ldo);
    return;
  }
  for (int64_t t = t0; t < t1; t += TN) {
    if (t + TN <= t1) {
      int64_t m = m0;
      for (; m + MR <= m1; m += MR) run_block<F, MR, TN>(x, ldx, xsum, m, tiles, t, nb, out, ldo);
      for (; m < m1; ++m) run_block<F, 1, TN>(x, ldx, xsum, m, tiles, t, nb, out, ldo);
    } else {
      for (int64_t tt = t; tt < t1; ++tt) {
        int64_t m = m0;
        for (; m + MR <= m1; m += MR) run_block<F, MR, 1>(x, ldx, xsum, m, tiles, tt, nb, out, ldo);
        for (; m < m1; ++m) run_block<F, 1, 1>(x, ldx, xsum, m, tiles, tt, nb, out, ldo);
      }
    }
  }
}

void GemmTiledRange(DType w, const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m0, int64_t m1,
                    const char* tiles, int64_t t0, int64_t t1, int64_t nb, float* out, int64_t ldo) {
  switch (w) {
    case DType::kQ4_0: return tiled_range<TileQ4_0>(x, ldx, xsum, m0, m1, tiles, t0, t1, nb, out, ldo);
    case DType::kQ4_1: return tiled_range<TileQ4_1>(x, ldx, xsum, m0, m1, tiles, t0, t1, nb, out, ldo);
    case DType::kQ8_0: return tiled_range<TileQ8_0>(x, ldx, xsum, m0, m1, tiles, t0, t1, nb, out, ldo);
    case DType::kQ4_K: return tiled_range<TileQ4_K>(x, ldx, xsum, m0, m1, tiles, t0, t1, nb, out, ldo);
    case DType::kQ6_K: return tiled_range<TileQ6_K>(x, ldx, xsum, m0, m1, tiles, t0, t1, nb, out, ldo);
    default: return;  // repack_tiles_supported() admits only these
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(GemmTiledRange);

namespace {
// How far apart the tiles of a prefill work unit's M range are: enough activation rows per pass
// over a tile group that the group's decode is amortised, few enough that they stay in L2.
constexpr int64_t kTiledMChunk = 64, kTiledTileChunk = 4;
}  // namespace

void gemm_tiled_range(DType w, const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m0, int64_t m1,
                      const char* tiles, int64_t t0, int64_t t1, int64_t nb, float* out, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(GemmTiledRange)(w, x, ldx, xsum, m0, m1, tiles, t0, t1, nb, out, ldo);
}

void gemm_tiled(ThreadPool& pool, const PackedAct& act, DType w, const char* tiles, int64_t N, float* out,
                int64_t ldo) {
  const int64_t M = act.M, nb = act.K / 32, nt = N / 16;
  const ActQ8* x = act.q8.data();
  // The integer offsets of unsigned codes per (row, block), from c8 = 8 * the sums of 4 codes:
  // sum(qx) (Q4_0/Q4_1/Q8_0), -32 * the sum of each 16 (Q6_K); Q4_K's mins use ActQ8::s.
  // Computed by all threads into a buffer that only grows (a prefill batch has M * nb of them).
  thread_local std::vector<int32_t> xsum;
  const int per = w == DType::kQ6_K ? 2 : w == DType::kQ4_K ? 0 : 1;
  if (xsum.size() < size_t(M * nb * per)) xsum.resize(size_t(M * nb * per));
  int32_t* xs = xsum.data();
  if (per > 0)
    pool.parallel_for(M * nb, 4096, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        const int32_t* c8 = act.q8[size_t(i)].c8;
        if (per == 2) {
          xs[2 * i] = -4 * (c8[0] + c8[1] + c8[2] + c8[3]);
          xs[2 * i + 1] = -4 * (c8[4] + c8[5] + c8[6] + c8[7]);
        } else {
          xs[i] = (c8[0] + c8[1] + c8[2] + c8[3] + c8[4] + c8[5] + c8[6] + c8[7]) / 8;
        }
      }
    });
  const auto range = gemm_tiled_range;
  // Few rows (decode, small batches): each thread streams its own contiguous tiles once, and a
  // thread done early takes the last tiles of a slower one (~1/32 of a share at a time).
  if (M <= 16) {
    pool.parallel_for_stealing(nt, std::max<int64_t>(1, nt / (pool.size() * 32)), [&](int64_t t0, int64_t t1, int) {
      range(w, x, nb, xs, 0, M, tiles, t0, t1, nb, out, ldo);
    });
    return;
  }
  // Many rows (prefill): M x N units, each a tile group passed by a chunk of activation rows,
  // claimed one at a time in order (the threads share an activation chunk while they pass it).
  const int64_t mc = (M + kTiledMChunk - 1) / kTiledMChunk, tc = (nt + kTiledTileChunk - 1) / kTiledTileChunk;
  pool.parallel_for_dynamic(mc * tc, 1, [&](int64_t u0, int64_t u1, int) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t mi = u / tc, ti = u % tc;
      range(w, x, nb, xs, mi * kTiledMChunk, std::min(M, (mi + 1) * kTiledMChunk), tiles,
            ti * kTiledTileChunk, std::min(nt, (ti + 1) * kTiledTileChunk), nb, out, ldo);
    }
  });
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
