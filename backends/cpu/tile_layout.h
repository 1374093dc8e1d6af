// The byte layout of weights repacked into 16-row tiles (WeightLayout::kCpuTile16): the formats'
// header and chunk sizes, shared by the int8-dot kernels (matmul_tiled.cpp, which describes the
// layout in full) and the AMX kernels that decode the same tiles to bf16 (matmul_amx.cpp).
#pragma once
#include <cstdint>
#include <cstring>

namespace tessera::cpu {
// The tiled formats: header bytes (scales, mins) and 64-byte code chunks per tile block.
struct TileQ4_0 {
  static constexpr int kHeader = 32, kChunks = 4, kOff = -8;
  static constexpr bool kNibbles = true, kMin = false;
  static constexpr int kBlocks = 1, kSumPer = 1;
};
struct TileQ4_1 {
  static constexpr int kHeader = 64, kChunks = 4, kOff = 0;
  static constexpr bool kNibbles = true, kMin = true;
  static constexpr int kBlocks = 1, kSumPer = 1;
};
struct TileQ8_0 {
  static constexpr int kHeader = 32, kChunks = 8, kOff = -128;  // kOff: VNNI's u8 codes only
  static constexpr bool kNibbles = false, kMin = false;
  static constexpr int kBlocks = 1, kSumPer = 1;
};
// The K-quants: a tile block is 16 rows x one 256-element super-block (8 activation blocks of
// 32); kBlock is its size in the tile, kTail the bytes per tile block stored after all blocks
// of the tile (Q6_K's f16 scales, so every block stays 64-byte aligned). kSumPer: int32 offsets
// per (activation row, block) that the kernels read (Q6_K: -32 * the sum of each 16 codes).
struct TileQ4_K {
  static constexpr int kBlocks = 8, kSumPer = 0;
  static constexpr int64_t kBlock = 16 * 144, kTail = 0;
};
struct TileQ6_K {
  static constexpr int kBlocks = 8, kSumPer = 2;
  static constexpr int64_t kBlock = 16 * 208, kTail = 32;
};
template <class F>
inline constexpr int64_t kTileBlockBytes = F::kHeader + 64 * F::kChunks;
static_assert(kTileBlockBytes<TileQ4_0> == 16 * 18 && kTileBlockBytes<TileQ4_1> == 16 * 20 &&
              kTileBlockBytes<TileQ8_0> == 16 * 34);

// Bytes between consecutive tiles of a weight with |nb| activation blocks per row.
template <class F>
constexpr int64_t tile_stride(int64_t nb) {
  if constexpr (F::kBlocks == 1)
    return nb * kTileBlockBytes<F>;
  else
    return nb / F::kBlocks * (F::kBlock + F::kTail);
}

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace tessera::cpu
