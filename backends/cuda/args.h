// The arguments of the GPU kernels (backends/cuda/kernels.h): plain structs of device addresses,
// sizes and byte strides that the host planner (plan.h) fills from a graph node and a kernel
// reads by value. Shared by the CUDA and HIP builds and by the host simulator (sim/), so they
// hold no vendor type.
#pragma once
#include <cstdint>

#include "core/op.h"
#include "quant/decode16.h"

namespace tessera::gpu {

// A tensor as kernels see it: element 0's address, dtype, up to 4 dims and byte strides.
// Rows are every dim but the last; cols the last (contiguous for block formats).
struct View {
  uint8_t* p = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  int64_t shape[4] = {0, 0, 0, 0};
  int64_t stride[4] = {0, 0, 0, 0};

  TS_HD int64_t cols() const { return rank == 0 ? 1 : shape[rank - 1]; }
  TS_HD int64_t rows() const {
    int64_t r = 1;
    for (int i = 0; i + 1 < rank; ++i) r *= shape[i];
    return r;
  }
  // Byte offset of flat row |r| (leading indices in row-major order).
  TS_HD int64_t row_offset(int64_t r) const {
    int64_t off = 0;
    for (int i = rank - 2; i >= 0; --i) {
      off += (r % shape[i]) * stride[i];
      r /= shape[i];
    }
    return off;
  }
  TS_HD uint8_t* row(int64_t r) const { return p + row_offset(r); }
  TS_HD int64_t col_stride() const { return rank == 0 ? 0 : stride[rank - 1]; }
};

// Float element access for the activation dtypes (f32, f16, bf16) and i32.
TS_HD float load_f(const uint8_t* p, DType t) {
  switch (t) {
    case DType::kF16: return decode::f16_to_f32(decode::u16(p));
    case DType::kBF16: return decode::bf16_to_f32(decode::u16(p));
    case DType::kI32: return float(int32_t(decode::u32(p)));
    default: return decode::f32_at(p);
  }
}
TS_HD void store_f(uint8_t* p, DType t, float v) {
  switch (t) {
    case DType::kF16: { const uint16_t h = decode::f32_to_f16(v); p[0] = uint8_t(h); p[1] = uint8_t(h >> 8); break; }
    case DType::kBF16: { const uint16_t h = decode::f32_to_bf16(v); p[0] = uint8_t(h); p[1] = uint8_t(h >> 8); break; }
    default: { const uint32_t u = decode::f32_bits(v); for (int i = 0; i < 4; ++i) p[i] = uint8_t(u >> (8 * i)); break; }
  }
}
TS_HD int32_t load_i32(const View& v, int64_t flat) {
  const int64_t c = v.cols();
  return int32_t(decode::u32(v.row(flat / c) + (flat % c) * v.col_stride()));
}

// Errors kernels find in data they read at run time (token or expert ids, block tables, slots):
// the first one is stored in the device's error word, which the device reads when it waits.
enum class KernelError : int32_t {
  kNone = 0,
  kEmbedId = 1,        // embed: an id outside the weight's rows
  kExpertId = 2,       // matmul_id: an expert id outside [0, E)
  kAttnMetadata = 3,   // attention: query_start / seq_lens / block table / slot out of range
  kStateMetadata = 4,  // ssm_conv / gated_delta_net: query_start or a state slot out of range
  kLoraMetadata = 5,   // lora: a segment start, slot or rank out of range
};
const char* kernel_error_message(KernelError e);

enum class Pointwise : uint8_t { kAdd, kMul, kScale, kSiluGlu, kGeluGlu, kGelu, kConvert, kSigmoidGlu, kSwigluOai };

struct PointwiseArgs {
  Pointwise op;
  View a, b, out;  // b: the second operand of add/mul/glu (rows broadcast by r % b.rows)
  float scale;     // scale; swiglu_oai: alpha
  float limit;     // swiglu_oai
  float softcap;   // scale: > 0 caps v to softcap * tanh(v / softcap)
};
struct NormArgs {
  bool layer;      // layer_norm (mean-centred, with an optional bias) else rms_norm
  View x, w, b, out;  // w / b: p == nullptr when absent
  float eps;
};
struct SoftmaxArgs {
  View x, out;
  float scale;
};
struct RopeArgs {
  View x, pos, freq, out;  // freq: p == nullptr when absent
  RopeParams p;
};
struct EmbedArgs {
  View w, ids, out;
  int32_t* err;
};
// Activations quantised for the int8 dot-product matmul: each run of 16 elements of a row as
// int8 codes (4 per word) with their scale, value ~ d * q, and the sum of the quantised values
// d * sum(q) (what a weight format's per-run offset multiplies).
struct alignas(8) Q8Run {
  float d;
  float sum;
  int32_t q[4];
};
static_assert(sizeof(Q8Run) == 24);
struct QuantizeQ8Args {
  View x;        // [M, K] activations, K % 16 == 0
  Q8Run* out;    // [M, runs]
  int64_t runs;  // K / 16
};
struct MatmulArgs {
  View x, w, bias, out;  // w: rows of K (kRows layout); bias: p == nullptr when absent
  // The int8 path (weight formats with decode::kHasIntRun): x quantised by a QuantizeQ8 launch
  // just before, [M, K / 16] runs; nullptr runs the float path (dequantise + FMA).
  const Q8Run* xq = nullptr;
};
// Rows per warp of the matmul kernel: a warp reads each weight row once for this many activation
// rows (the decode GEMV is M <= 8 in one pass).
inline constexpr int kMatmulRows = 8;
inline constexpr int kMatmulWarps = 4;  // warps (output columns) per block
// The tensor-core tile GEMM (MatmulMmaKernel) for integer-coded weights with quantised
// activations, from kMmaMinRows activation rows on: a block of kMmaWarps warps computes a
// kMmaTile x kMmaTile tile of out (rows x columns), staging kMmaChunkRuns runs of 16 of x and w in
// shared memory at a time; each warp a 32 x 32 quarter as 2 x 4 int8 mma tiles of 16 x 8.
inline constexpr int kMmaTile = 64;
inline constexpr int kMmaWarps = 4;
inline constexpr int kMmaChunkRuns = 4;
inline constexpr int kMmaMinRows = 32;
struct MatmulIdArgs {
  View x, w, ids, weights, out;  // w [E, N, K]; weights: p == nullptr when absent
  int32_t* err;
  View bias;  // [E, N], p == nullptr when absent: row e added to expert e's results
  // Filled by the planner: the pairs grouped by expert (MoeSortArgs), the quantised x (nullptr:
  // the float path) and, with weights, the per-pair results [T * k, N] the weighted sum reads.
  const int32_t* order = nullptr;
  const int32_t* offsets = nullptr;
  const Q8Run* xq = nullptr;
  float* y = nullptr;
};
struct MoeSortArgs {
  View ids;          // [T, k] expert ids
  int64_t experts;   // E
  int32_t* order;    // [T * k] pair indices t * k + j, grouped by expert
  int32_t* offsets;  // [E + 2]: group g is order[offsets[g] .. offsets[g + 1]); group E: bad ids
  int32_t* err;
};
struct MoeWeightedSumArgs {
  View weights, out;  // [T, k], [T, N]
  const float* y;     // [T * k, N]
};
struct TopkRouteArgs {
  View logits, bias, ids, weights;
  TopkRouteParams p;
};
inline constexpr int kMaxRouteExperts = 512;
struct KvStoreArgs {
  View k, v, k_cache, v_cache, slots;  // caches viewed as [n_slots * Hkv, D] rows
  int64_t n_slots;
  int32_t* err;
};
struct AttentionArgs {
  View q, k_cache, v_cache, query_start, seq_lens, block_tables, out;
  View sinks;  // [Hq] f32 sink logits (gpt-oss); p null: none. With split-K the combine adds it.
  int64_t n_seqs, hkv, block_size, n_blocks;
  float scale, softcap;
  int sliding_window, causal;
  int32_t* err;
  // Split-K (flash decoding): with splits > 1 each (row, head) has |splits| blocks, each over one
  // part of the row's keys, writing (acc[D], max, sum) to partial[(row * Hq + head) * splits +
  // split] as D + 2 floats; an AttentionCombine launch merges them into out.
  int splits = 1;
  float* partial = nullptr;
};
struct AttentionCombineArgs {
  View out;                // [T, Hq, D]
  const float* partial;    // [T * Hq, splits, D + 2]
  int splits;
  View sinks;  // [Hq] f32, p null: none
};
inline constexpr int kAttnWarps = 4;
// Split-K policy: decode-shaped launches (fewer than kAttnSplitTarget (row, head) blocks) over
// a KV capacity (block table columns x block size) of at least 2 x kAttnSplitKeys split it
// into up to kAttnMaxSplits parts of at least kAttnSplitKeys keys, aiming at kAttnSplitTarget
// blocks: a single long decode fills the GPU instead of Hq blocks.
inline constexpr int kAttnSplitKeys = 256;
inline constexpr int kAttnSplitTarget = 512;
inline constexpr int kAttnMaxSplits = 64;
inline constexpr int kMaxHeadDim = 256;
inline constexpr int kMaxHeadDimWide = 512;  // AttentionKernelWide

// The recurrent layers (core/op.h in::SsmConv, in::GatedDeltaNet): one thread per (sequence,
// channel) of the conv and per (sequence, value head, state column) of the delta rule.
inline constexpr int kMaxConvTaps = 8;
struct SsmConvArgs {
  View x, w, state, query_start, slots, out;  // state [n_slots, K-1, C] f32, updated in place
  int64_t n_seqs;
  int silu;
  int32_t* err;
};
struct GatedDeltaNetArgs {
  View q, k, v, alpha, beta, decay_rate, dt_bias, state, query_start, slots, out;  // decay_rate.p null: absent
  int64_t n_seqs;
  float scale, eps;
  int l2_norm;
  int tiled_heads;  // key head of value head h: h % Hk, else h / (Hv / Hk)
  int32_t* err;
};

// lora (core/op.h in::Lora): one block per row; its warps shrink x through the slot's A into
// shared memory, then its threads expand through B over the output columns.
struct LoraArgs {
  View x, base, a, b, ranks, scales, seg_start, seg_slot, out;
  int32_t* err;
};

}  // namespace tessera::gpu
