// Repacking of Q4_0, Q4_1, Q8_0, Q4_K and Q6_K weight rows into the 16-row tiles the tiled
// matmul reads (layout: backends/cpu/tile_layout.h and matmul_tiled.cpp's file comment; the
// K-quants' tile blocks are described above matmul_tiled.cpp's q4k_scales). Plain C++: the same
// bytes on every target, written once per weight at load (CpuDevice::prepare_weight).
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/tile_layout.h"
#include "quant/kquants.h"

namespace tessera::cpu {

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
      std::memcpy(tb + 2 * i, blk, 2);                                  // d
      if constexpr (F::kMin) std::memcpy(tb + 32 + 2 * i, blk + 2, 2);  // m
      for (int c = 0; c < F::kChunks; ++c)
        for (int j = 0; j < 4; ++j) {
          const uint8_t v = blk[kCodesAt + 4 * c + j];
          tb[F::kHeader + 64 * c + 4 * i + j] = F::kNibbles ? v : uint8_t(v ^ 0x80);
        }
    }
  }
}

// Q4_K: rows' 144-byte super-blocks to tile blocks (layout above q4k_scales).
void repack_tile_q4k(const char* rows, int64_t ldw, int64_t t, int64_t nsb, char* dst) {
  constexpr int64_t TB = TileQ4_K::kBlock;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    auto* tb = reinterpret_cast<uint8_t*>(dst + (t * nsb + sb) * TB);
    uint8_t u[256];  // sc[j][r] at 16j + r, m[j][r] at 128 + 16j + r
    for (int i = 0; i < 16; ++i) {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(rows + (16 * t + i) * ldw + sb * int64_t(sizeof(BlockQ4_K)));
      std::memcpy(tb + 2 * i, &blk->d, 2);
      std::memcpy(tb + 32 + 2 * i, &blk->dmin, 2);
      uint8_t sc[8], m[8];
      unpack_k_scales(blk->scales, sc, m);
      for (int j = 0; j < 8; ++j) u[16 * j + i] = sc[j], u[128 + 16 * j + i] = m[j];
      for (int c = 0; c < 4; ++c)
        for (int k = 0; k < 8; ++k) std::memcpy(tb + 256 + 64 * (8 * c + k) + 4 * i, blk->qs + 32 * c + 4 * k, 4);
    }
    for (int o = 0; o < 64; ++o) {
      tb[64 + o] = uint8_t((u[o] & 15) | (u[64 + o] & 15) << 4);
      tb[128 + o] = uint8_t((u[128 + o] & 15) | (u[192 + o] & 15) << 4);
      tb[192 + o] = uint8_t((u[o] >> 4) | (u[64 + o] >> 4) << 2 | (u[128 + o] >> 4) << 4 | (u[192 + o] >> 4) << 6);
    }
  }
}

// Q6_K: rows' 210-byte super-blocks to tile blocks, the f16 scales after the tile's blocks.
void repack_tile_q6k(const char* rows, int64_t ldw, int64_t t, int64_t nsb, char* dst) {
  constexpr int64_t TB = TileQ6_K::kBlock;
  char* tile = dst + t * nsb * (TB + TileQ6_K::kTail);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    auto* tb = reinterpret_cast<uint8_t*>(tile + sb * TB);
    for (int i = 0; i < 16; ++i) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(rows + (16 * t + i) * ldw + sb * int64_t(sizeof(BlockQ6_K)));
      std::memcpy(tile + nsb * TB + 32 * sb + 2 * i, &blk->d, 2);
      for (int g = 0; g < 16; ++g) tb[16 * g + i] = uint8_t(blk->scales[g]);
      uint8_t q[256];
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, r = e % 128;
        const int lo = (blk->ql[64 * h + r % 64] >> (4 * (r / 64))) & 15;
        const int hi = (blk->qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        q[e] = uint8_t(lo | hi << 4);
      }
      for (int j = 0; j < 8; ++j) {
        uint8_t* sub = tb + 256 + 384 * j;
        const uint8_t* qj = q + 32 * j;
        for (int c = 0; c < 4; ++c)
          for (int l = 0; l < 4; ++l)
            sub[64 * c + 4 * i + l] = uint8_t((qj[4 * c + l] & 15) | (qj[16 + 4 * c + l] & 15) << 4);
        for (int h = 0; h < 2; ++h)
          for (int l = 0; l < 4; ++l) {
            uint8_t v = 0;
            for (int g = 0; g < 4; ++g) v = uint8_t(v | (qj[16 * h + 4 * g + l] >> 4) << (2 * g));
            sub[256 + 64 * h + 4 * i + l] = v;
          }
      }
    }
  }
}
}  // namespace

bool repack_tiles_supported(DType w, int64_t N, int64_t K) {
  if (N <= 0 || K <= 0 || N % 16 != 0) return false;
  if (w == DType::kQ4_0 || w == DType::kQ4_1 || w == DType::kQ8_0) return K % 32 == 0;
  if (w == DType::kQ4_K || w == DType::kQ6_K) return K % 256 == 0;
  return false;
}

void repack_tiles(ThreadPool& pool, DType w, const char* rows, int64_t ldw, int64_t N, int64_t K, char* dst) {
  const int64_t nt = N / 16, nb = K / 32;
  // Each thread first-touches the tiles its decode GEMV later streams (the shares of gemm's
  // split, up to the chunks another thread may take from their ends).
  pool.parallel_for(nt, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      switch (w) {
        case DType::kQ4_0:
          repack_tile<TileQ4_0>(rows, ldw, t, nb, dst);
          break;
        case DType::kQ4_1:
          repack_tile<TileQ4_1>(rows, ldw, t, nb, dst);
          break;
        case DType::kQ8_0:
          repack_tile<TileQ8_0>(rows, ldw, t, nb, dst);
          break;
        case DType::kQ4_K:
          repack_tile_q4k(rows, ldw, t, nb / 8, dst);
          break;
        case DType::kQ6_K:
          repack_tile_q6k(rows, ldw, t, nb / 8, dst);
          break;
        default:
          break;
      }
    }
  });
}

}  // namespace tessera::cpu
