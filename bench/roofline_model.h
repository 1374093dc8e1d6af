// The roofline model of tessera-bench: what each kernel moves and computes, counted from its
// shapes, and the statistics every measured figure is reported with.
//
// Counting rules (docs/bench.md): every input is read once and every output written once, at
// its storage size (block formats at their packed size, scales included); an op that reads only
// part of an input (embed's rows, matmul_id's routed experts, attention's visible context) counts
// only that part. FLOPs count multiply and add separately (a multiply-add is 2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "quant/dtype.h"

namespace tessera::bench {

struct Cost {
  double bytes = 0.0;  // moved to and from memory
  double flops = 0.0;  // floating-point (or integer dot-product) operations
  // FLOP per byte; 0 when nothing is moved.
  double intensity() const { return bytes > 0.0 ? flops / bytes : 0.0; }
};

// Bytes of |n| elements of |t| (block formats: whole blocks).
double dtype_bytes(DType t, int64_t n);

// out [M, N] = x [M, K] (act) @ w [N, K]^T (weight) (+ bias [N], act dtype).
Cost matmul_cost(int64_t m, int64_t n, int64_t k, DType act, DType weight, bool bias = false);

// MoE grouped matmul: x [T, K]; w [E, N, K]; ids [T, k] i32; weights [T, k] f32; out [T, N]
// (mixed). Reads the min(E, T*k) distinct experts a balanced routing touches.
Cost matmul_id_cost(int64_t t, int64_t k_slots, int64_t n_experts, int64_t n, int64_t k, DType act, DType weight);

// out [T, dim] (out dtype) = weight[ids[t], :]: reads T rows of the table and T ids.
Cost embed_cost(int64_t t, int64_t dim, DType weight, DType out);

// x [rows, dim], w [dim]: 4 FLOP per element (square, sum, scale by 1/rms, times w).
Cost rms_norm_cost(int64_t rows, int64_t dim, DType act);

// x [T, H, D] rotated over its first n_dims of each head; positions [T] i32: 6 FLOP per pair.
Cost rope_cost(int64_t t, int64_t heads, int64_t head_dim, int64_t n_dims, DType act);

// act(gate) * up over [rows, n]: 5 FLOP per element (silu as 4: negate/exp/add/divide, then mul).
Cost glu_cost(int64_t rows, int64_t n, DType act);

// a [rows, n] op b (b [rows, n] or broadcast [n]): 1 FLOP per element.
Cost binary_cost(int64_t rows, int64_t n, int64_t b_rows, DType act);

// One attention call over a paged cache: |n_seqs| sequences, each with |new_tokens| query rows
// and a context of |context| tokens (new ones included). q/out [T, Hq, D]; k/v new [T, Hkv, D]
// written into the cache; the cache read is context * Hkv * D per sequence for K and for V.
// FLOPs: causal, so query i of a sequence sees context - new_tokens + i + 1 keys, and each
// visible key costs 4 * Hq * D (QK^T and PV multiply-adds).
struct AttentionShape {
  int64_t n_seqs = 1;
  int64_t new_tokens = 1;  // per sequence
  int64_t context = 1;     // per sequence, including the new tokens
  int64_t q_heads = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 64;
  int64_t block_size = 16;
  DType act = DType::kF32;
  DType cache = DType::kF32;
};
Cost attention_cost(const AttentionShape& s);

// --- the roofline ---------------------------------------------------------------------------

// The attainable FLOP/s at |intensity| under a bandwidth ceiling (bytes/s) and a compute
// ceiling (FLOP/s); a ceiling of 0 is unknown and does not limit.
double attainable_flops(double intensity, double bandwidth, double peak_flops);
// "memory" when the bandwidth ceiling is the lower one at |intensity|, else "compute".
const char* bound_by(double intensity, double bandwidth, double peak_flops);

// --- statistics -----------------------------------------------------------------------------

// A figure measured several times: median, spread = (max - min) / median, and whether that
// spread exceeds the noise threshold (10%).
struct Stat {
  double median = 0.0;
  double min = 0.0;
  double max = 0.0;
  double spread = 0.0;
  int n = 0;
  bool noisy = false;
};
inline constexpr double kNoisySpread = 0.10;
Stat make_stat(std::vector<double> samples);
// The same figure as a rate: value / each sample (e.g. bytes / seconds); min and max swap.
Stat rate_stat(const Stat& seconds, double amount);

}  // namespace tessera::bench
