// Quantised matmul over weights repacked at load (CpuDevice::prepare_weight, layout
// WeightLayout::kCpuTile16): Q4_0, Q4_1 and Q8_0 as tiles of 16 weight rows, so that one vector
// of codes feeds 16 output rows at once and a weight load is shared by several activation rows.
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
#include <vector>

#include "backends/cpu/kernels.h"
#include "quant/half.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/matmul_tiled.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

namespace tessera::cpu {
#ifndef TESSERA_CPU_TILE_FORMATS_
#define TESSERA_CPU_TILE_FORMATS_
// The tiled formats: header bytes (scales, mins) and 64-byte code chunks per tile block.
struct TileQ4_0 {
  static constexpr int kHeader = 32, kChunks = 4, kOff = -8;
  static constexpr bool kNibbles = true, kMin = false;
};
struct TileQ4_1 {
  static constexpr int kHeader = 64, kChunks = 4, kOff = 0;
  static constexpr bool kNibbles = true, kMin = true;
};
struct TileQ8_0 {
  static constexpr int kHeader = 32, kChunks = 8, kOff = -128;  // kOff: VNNI's u8 codes only
  static constexpr bool kNibbles = false, kMin = false;
};
template <class F>
inline constexpr int64_t kTileBlockBytes = F::kHeader + 64 * F::kChunks;
static_assert(kTileBlockBytes<TileQ4_0> == 16 * 18 && kTileBlockBytes<TileQ4_1> == 16 * 20 &&
              kTileBlockBytes<TileQ8_0> == 16 * 34);

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
#endif  // TESSERA_CPU_TILE_FORMATS_
}  // namespace tessera::cpu

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// The activations of one kernel call: MR rows of ActQ8 blocks and their per-block code sums.
template <int MR>
struct TileAct {
  const ActQ8* x[MR];
  const int32_t* sum[MR];  // [nb] sum(qx) per block
  float* out[MR];          // output row, at the first tile's column
};

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Decode streams TN tiles at once; each tile block is prefetched kPrefetchBlocks ahead.
inline constexpr int64_t kPrefetchBlocks = 8;
template <class F, int TN>
HWY_INLINE void prefetch_ahead(const char* tile0, int64_t ts, int64_t b) {
  constexpr int64_t TB = kTileBlockBytes<F>;
#pragma GCC unroll 4
  for (int t = 0; t < TN; ++t) {
    const char* p = tile0 + t * ts + (b + kPrefetchBlocks) * TB;
#pragma GCC unroll 9
    for (int64_t o = 0; o < TB; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  }
}
#endif

#if HWY_TARGET == HWY_AVX3_DL
// acc += sum4(u8 |w| * s8 of the 4 bytes at |x|, broadcast): vpdpbusd with an embedded broadcast.
// NOTE: Highway 1.0.3's AVX3_DL target attributes lack avx512vnni (q8_dot-inl.h's NOTE), so
// _mm512_dpbusd_epi32 does not compile here; the runtime check is Highway's (AVX512-VNNI).
HWY_INLINE __m512i dpbusd_bcast(__m512i acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

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
    if constexpr (MR == 1) prefetch_ahead<F, TN>(tile0, ts, b);
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
// Decode: 1 row x 4 tiles, four independent vpdpbusd chains.
inline constexpr int kMR = 4, kTN = 2, kGemvTN = 4;

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
    if constexpr (MR == 1) prefetch_ahead<F, TN>(tile0, ts, b);
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
inline constexpr int kMR = 4, kTN = 1, kGemvTN = 2;  // 32 vector registers
#else
inline constexpr int kMR = 2, kTN = 1, kGemvTN = 1;  // 16 vector registers
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
inline constexpr int kMR = 4, kTN = 1, kGemvTN = 1;
#endif

// MR activation rows from row |m| against TN tiles from tile |t|.
template <class F, int MR, int TN>
HWY_INLINE void run_block(const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m, const char* tiles, int64_t t,
                          int64_t nb, float* out, int64_t ldo) {
  TileAct<MR> a;
  for (int r = 0; r < MR; ++r) {
    a.x[r] = x + (m + r) * ldx;
    a.sum[r] = xsum + (m + r) * nb;
    a.out[r] = out + (m + r) * ldo + 16 * t;
  }
  const int64_t ts = nb * kTileBlockBytes<F>;
  tile_kernel<F, MR, TN>(a, tiles + t * ts, ts, nb);
}

// out[m, 16 t0 .. 16 t1) for m in [m0, m1): per group of tiles, every activation row passes
// while the tiles stay in cache.
template <class F>
void tiled_range(const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m0, int64_t m1, const char* tiles,
                 int64_t t0, int64_t t1, int64_t nb, float* out, int64_t ldo) {
  if (m1 - m0 == 1) {  // decode GEMV: several tiles per call for independent dot chains
    int64_t t = t0;
    for (; t + kGemvTN <= t1; t += kGemvTN) run_block<F, 1, kGemvTN>(x, ldx, xsum, m0, tiles, t, nb, out, ldo);
    for (; t < t1; ++t) run_block<F, 1, 1>(x, ldx, xsum, m0, tiles, t, nb, out, ldo);
    return;
  }
  for (int64_t t = t0; t < t1; t += kTN) {
    if (t + kTN <= t1) {
      int64_t m = m0;
      for (; m + kMR <= m1; m += kMR) run_block<F, kMR, kTN>(x, ldx, xsum, m, tiles, t, nb, out, ldo);
      for (; m < m1; ++m) run_block<F, 1, kTN>(x, ldx, xsum, m, tiles, t, nb, out, ldo);
    } else {
      for (int64_t tt = t; tt < t1; ++tt) {
        int64_t m = m0;
        for (; m + kMR <= m1; m += kMR) run_block<F, kMR, 1>(x, ldx, xsum, m, tiles, tt, nb, out, ldo);
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
    default: return;  // repack_tiles_supported() admits only these
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(GemmTiledRange);

namespace {
template <class F>
void repack_tile(const char* rows, int64_t ldw, int64_t t, int64_t nb, char* dst) {
  constexpr int64_t TB = kTileBlockBytes<F>;
  constexpr int64_t kBlockBytes = F::kNibbles ? F::kHeader / 16 + 16 : 34;  // 18, 20, 34
  constexpr int kCodesAt = F::kMin ? 4 : 2;
  for (int64_t b = 0; b < nb; ++b) {
    auto* tb = reinterpret_cast<uint8_t*>(dst + (t * nb + b) * TB);
    for (int i = 0; i < 16; ++i) {
      const auto* blk = reinterpret_cast<const uint8_t*>(rows + (16 * t + i) * ldw + b * kBlockBytes);
      std::memcpy(tb + 2 * i, blk, 2);                           // d
      if constexpr (F::kMin) std::memcpy(tb + 32 + 2 * i, blk + 2, 2);  // m
      for (int c = 0; c < F::kChunks; ++c)
        for (int j = 0; j < 4; ++j) {
          const uint8_t v = blk[kCodesAt + 4 * c + j];
          tb[F::kHeader + 64 * c + 4 * i + j] = F::kNibbles ? v : uint8_t(v ^ 0x80);
        }
    }
  }
}

// How far apart the tiles of a prefill work unit's M range are: enough activation rows per pass
// over a tile group that the group's decode is amortised, few enough that they stay in L2.
constexpr int64_t kTiledMChunk = 64, kTiledTileChunk = 4;
}  // namespace

bool repack_tiles_supported(DType w, int64_t N, int64_t K) {
  if (w != DType::kQ4_0 && w != DType::kQ4_1 && w != DType::kQ8_0) return false;
  return N > 0 && K > 0 && N % 16 == 0 && K % 32 == 0;
}

void repack_tiles(ThreadPool& pool, DType w, const char* rows, int64_t ldw, int64_t N, int64_t K, char* dst) {
  const int64_t nt = N / 16, nb = K / 32;
  // Each thread first-touches the tiles its decode GEMV later streams (the same split as gemm).
  pool.parallel_for(nt, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      switch (w) {
        case DType::kQ4_0: repack_tile<TileQ4_0>(rows, ldw, t, nb, dst); break;
        case DType::kQ4_1: repack_tile<TileQ4_1>(rows, ldw, t, nb, dst); break;
        case DType::kQ8_0: repack_tile<TileQ8_0>(rows, ldw, t, nb, dst); break;
        default: break;
      }
    }
  });
}

void gemm_tiled_range(DType w, const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m0, int64_t m1,
                      const char* tiles, int64_t t0, int64_t t1, int64_t nb, float* out, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(GemmTiledRange)(w, x, ldx, xsum, m0, m1, tiles, t0, t1, nb, out, ldo);
}

void gemm_tiled(ThreadPool& pool, const PackedAct& act, DType w, const char* tiles, int64_t N, float* out,
                int64_t ldo) {
  const int64_t M = act.M, nb = act.K / 32, nt = N / 16;
  const ActQ8* x = act.q8.data();
  // sum(qx) per (row, block), for the integer offset of unsigned codes (from c8 = 8 * sum4).
  std::vector<int32_t> xsum(size_t(M * nb));
  for (int64_t i = 0; i < M * nb; ++i) {
    const int32_t* c8 = act.q8[size_t(i)].c8;
    xsum[size_t(i)] = (c8[0] + c8[1] + c8[2] + c8[3] + c8[4] + c8[5] + c8[6] + c8[7]) / 8;
  }
  const auto range = gemm_tiled_range;
  // Few rows (decode, small batches): each thread streams its own contiguous tiles once.
  if (M <= 16) {
    pool.parallel_for(nt, std::clamp<int64_t>(nt / (pool.size() * 8), 1, 16), [&](int64_t t0, int64_t t1, int) {
      range(w, x, nb, xsum.data(), 0, M, tiles, t0, t1, nb, out, ldo);
    });
    return;
  }
  // Many rows (prefill): M x N units, each a tile group passed by a chunk of activation rows.
  const int64_t mc = (M + kTiledMChunk - 1) / kTiledMChunk, tc = (nt + kTiledTileChunk - 1) / kTiledTileChunk;
  pool.parallel_for(mc * tc, 1, [&](int64_t u0, int64_t u1, int) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t mi = u / tc, ti = u % tc;
      range(w, x, nb, xsum.data(), mi * kTiledMChunk, std::min(M, (mi + 1) * kTiledMChunk), tiles,
            ti * kTiledTileChunk, std::min(nt, (ti + 1) * kTiledTileChunk), nb, out, ldo);
    }
  });
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
