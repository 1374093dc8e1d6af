// Internal interface of the CPU kernels: one entry point per op family (dispatched from ops.cpp)
// and the shared row helpers every family uses. Kernels assume core/ validated shapes and
// dtypes (Graph), and validate only the data-dependent inputs they read (ids, block tables).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "core/graph.h"
#include "core/status.h"

namespace tessera::cpu {

// ---- op families (one file each) ------------------------------------------------------------
Status matmul(ThreadPool& pool, const Graph& g, const Node& n);        // matmul.cpp
Status matmul_id(ThreadPool& pool, const Graph& g, const Node& n);     // moe.cpp
Status topk_route(ThreadPool& pool, const Graph& g, const Node& n);    // moe.cpp
Status embed(ThreadPool& pool, const Graph& g, const Node& n);         // embed.cpp
Status rms_norm(ThreadPool& pool, const Graph& g, const Node& n);      // norm.cpp
Status layer_norm(ThreadPool& pool, const Graph& g, const Node& n);    // norm.cpp
Status gelu(ThreadPool& pool, const Graph& g, const Node& n);          // elementwise.cpp
Status rope(ThreadPool& pool, const Graph& g, const Node& n);          // rope.cpp
Status attention(ThreadPool& pool, const Graph& g, const Node& n);     // attention.cpp
Status glu(ThreadPool& pool, const Graph& g, const Node& n);           // elementwise.cpp
Status binary(ThreadPool& pool, const Graph& g, const Node& n);        // elementwise.cpp (add, mul)
Status scale(ThreadPool& pool, const Graph& g, const Node& n);         // elementwise.cpp
Status softmax(ThreadPool& pool, const Graph& g, const Node& n);       // elementwise.cpp
Status convert(ThreadPool& pool, const Graph& g, const Node& n);       // convert.cpp (cast, copy)
Status ssm_conv(ThreadPool& pool, const Graph& g, const Node& n);      // recurrent.cpp
Status gated_delta_net(ThreadPool& pool, const Graph& g, const Node& n);  // recurrent.cpp
Status lora(ThreadPool& pool, const Graph& g, const Node& n);             // lora.cpp

// ---- conversions (convert.cpp, SIMD) --------------------------------------------------------
// Contiguous |n| elements of float dtype |t| (f32/f16/bf16) to f32 and back. Stores round to
// nearest even, like quant/half.h.
void to_f32(DType t, const void* src, float* dst, int64_t n);
void from_f32(DType t, const float* src, void* dst, int64_t n);

// Row |row| (flat over the leading dims) of a float tensor with any strides, as f32. Returns a
// pointer into |t| itself when it already is contiguous f32, else converts into |scratch|
// (cols() floats).
const float* load_row_f32(const Tensor& t, int64_t row, float* scratch);
// Stores cols() f32 values into row |row| of float tensor |t| (any strides).
void store_row_f32(const Tensor& t, int64_t row, const float* src);
// Where to compute row |row| of output |t|: the row itself when |t| is dense f32 (no copy after;
// outputs never alias inputs, core/planner.cpp), else |scratch| (cols() floats). finish_row_f32
// then stores a row computed into scratch and does nothing for one computed in place.
float* out_row_f32(const Tensor& t, int64_t row, float* scratch);
void finish_row_f32(const Tensor& t, int64_t row, const float* res);
// Whether the last dimension is densely packed (element stride == element size).
bool last_dim_dense(const Tensor& t);
// A growable per-thread f32 scratch area; |slot| separates independent uses in one kernel.
float* thread_scratch(int slot, int64_t n_floats);

// Heavy-op thresholds: below this many elements a kernel runs on the calling thread only,
// since waking the pool costs more than the work.
inline constexpr int64_t kParallelMinElems = 1 << 15;

// The decode GEMV loops (q8_dot-inl.h, matmul.cpp's FP8 E4M3 path) prefetch whole weight rows
// about this far ahead of the row being computed: a software prefetch into L1 measured 10-20%
// more single-thread GB/s (K = 2048, rows of 1-2 KB); with 2 threads distances of 0-24 KB
// measured the same (docs/quant.md).
inline constexpr int64_t kGemvPrefetchBytes = 6144;

// ---- quantised activations (matmul.cpp) -----------------------------------------------------
// One 32-element block of an activation row quantised to int8 for the integer dot products.
struct ActQ8 {
  float d;          // scale: x ~= d * qs
  float s;          // d * sum(qs): the term Q4_1's min multiplies
  int8_t qs[32];
  int32_t c8[8];    // 8 * (sum of qs[4i..4i+3]): Q4_0's -8 offset, subtracted in the integer domain
};
static_assert(sizeof(ActQ8) == 72);

// Activation rows packed for one weight dtype: contiguous f32 for float weights, ActQ8 blocks
// for the block formats. The buffers only grow (M and K say how much is in use): a PackedAct kept
// across matmuls (matmul() keeps one per thread) neither reallocates nor zero-fills, which for a
// prefill batch of 2048 rows were ~10-26 MB of serial memset and fresh page faults per matmul.
// The price: the thread that submits keeps its largest batch's packing (2048 x 14336 inputs:
// ~66 MB of ActQ8) until it exits.
struct PackedAct {
  int64_t M = 0, K = 0;
  bool quantized = false;
  std::vector<float> f32;   // [M, K]
  std::vector<ActQ8> q8;    // [M, K/32]
};
// Packs rows |rows[i]| (or 0..M-1 when rows is null) of activation |x| for weight dtype |w|.
void pack_activations(ThreadPool& pool, const Tensor& x, const int64_t* rows, int64_t M, DType w, PackedAct* out);
// Called by the device before it runs a graph's nodes: matmul() reuses the activations it packed
// for the previous matmul when the next one reads the same value of the same graph run (the q/k/v
// projections of one normed input, gate and up), and this ends a run's reuse. Every node writes
// values of its own, once per run (only attention also writes its external KV-cache inputs,
// which no matmul reads), so within a run a value id names one content.
void begin_graph_run();

// A weight matrix [N, K] of any supported dtype: row r starts at base + r * row_stride.
struct WeightMat {
  DType dtype;
  const char* base;
  int64_t row_stride;  // bytes
  int64_t elem_stride; // bytes between elements of a row (float dtypes; may be non-dense)
  int64_t N, K;
};
// out[m, n] = sum_k act[m, k] * w[n, k] for all M x N, f32, row stride |ldo| floats. Threads
// split N for a few rows (decode) and M x N tiles for many (prefill).
void gemm(ThreadPool& pool, const PackedAct& act, const WeightMat& w, float* out, int64_t ldo);

// Tiles on one thread: out[m, n] for m in [m0, m1), n in [n0, n1). |x| rows are |ldx| floats
// (or ActQ8 blocks) apart; weight rows |ldw| bytes apart and dense.
void gemm_float_tile(DType w, const float* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                     int64_t n0, int64_t n1, int64_t K, float* out, int64_t ldo);   // matmul.cpp
void gemm_q8_tile(DType w, const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                  int64_t n0, int64_t n1, int64_t nb, float* out, int64_t ldo);     // matmul_q8.cpp
// The K-quants and NVFP4 (matmul_kq.cpp); gemm_q8_tile routes them there.
void gemm_q8_tile_kq(DType w, const ActQ8* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                     int64_t n0, int64_t n1, int64_t nb, float* out, int64_t ldo);
// ---- weights repacked into row tiles (matmul_tiled.cpp, WeightLayout::kCpuTile16) --------------
// Whether |w| [N, K] can be repacked: Q4_0, Q4_1 or Q8_0 with N a multiple of 16 (K of 32), or
// Q4_K or Q6_K (K a multiple of 256).
bool repack_tiles_supported(DType w, int64_t N, int64_t K);
// Writes the tiles of the rows |rows| (|ldw| bytes apart) into |dst| (N * row bytes), on |pool|.
void repack_tiles(ThreadPool& pool, DType w, const char* rows, int64_t ldw, int64_t N, int64_t K, char* dst);
// out[m, n] = sum_k act[m, k] * w[n, k] for tiled weights |tiles| (act quantised to ActQ8).
void gemm_tiled(ThreadPool& pool, const PackedAct& act, DType w, const char* tiles, int64_t N, float* out,
                int64_t ldo);
// One thread's part: out[m, 16 t0 .. 16 t1) for m in [m0, m1); |xsum| holds sum(qx) per
// (row, block) of |x| (rows |ldx| blocks apart, nb blocks each).
void gemm_tiled_range(DType w, const ActQ8* x, int64_t ldx, const int32_t* xsum, int64_t m0, int64_t m1,
                      const char* tiles, int64_t t0, int64_t t1, int64_t nb, float* out, int64_t ldo);

// Whether weight dtype |w| runs on int8-quantised activations (ActQ8); the other formats (float
// and FP8) take f32 activations.
inline bool uses_act_q8(DType w) {
  return dtype_traits(w).is_quantized && w != DType::kFP8_E4M3 && w != DType::kFP8_E5M2;
}

// Half the value of each E8M0 (MXFP4) and UE4M3 (NVFP4) scale byte, as GGUF decodes them
// (quant/fp4.cpp): the E2M1 codes enter the int8 dot as twice their value.
constexpr float pow2_exact(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;  // exact down to the smallest subnormal
  return r;
}
inline constexpr auto kE8m0Half = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[size_t(e)] = pow2_exact(e - 128);  // 0xFF: 2^127, finite as in GGUF
  return t;
}();
inline constexpr auto kUe4m3Half = [] {
  std::array<float, 256> t{};
  for (int v = 0; v < 256; ++v) {
    const int exp = (v >> 3) & 15, man = v & 7;  // bit 7 ignored; 0x7F (NaN in E4M3FN) reads as 0
    t[size_t(v)] = v == 0 || v == 0x7f ? 0.0f : exp == 0 ? float(man) * pow2_exact(-10)
                                                          : float(8 + man) * pow2_exact(exp - 11);
  }
  return t;
}();
// Quantises |n| floats (a multiple of 32) into n/32 ActQ8 blocks.
void quantize_act_q8(const float* x, ActQ8* out, int64_t n);                        // matmul_q8.cpp

}  // namespace tessera::cpu
