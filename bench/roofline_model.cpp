#include "bench/roofline_model.h"

#include <algorithm>

namespace tessera::bench {

double dtype_bytes(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  const int64_t blocks = (n + tr.block_elems - 1) / tr.block_elems;
  return double(blocks) * double(tr.block_bytes);
}

Cost matmul_cost(int64_t m, int64_t n, int64_t k, DType act, DType weight, bool bias) {
  Cost c;
  // The weight is read as whole rows: [N, K] is N rows of K elements.
  c.bytes = dtype_bytes(act, m * k) + double(n) * dtype_bytes(weight, k) + dtype_bytes(act, m * n);
  c.flops = 2.0 * double(m) * double(n) * double(k);
  if (bias) {
    c.bytes += dtype_bytes(act, n);
    c.flops += double(m) * double(n);
  }
  return c;
}

Cost matmul_id_cost(int64_t t, int64_t k_slots, int64_t n_experts, int64_t n, int64_t k, DType act, DType weight) {
  Cost c;
  const int64_t experts_used = std::min(n_experts, t * k_slots);
  c.bytes = dtype_bytes(act, t * k) +                                 // x, shared by the k slots
            double(experts_used) * double(n) * dtype_bytes(weight, k) +  // routed experts
            dtype_bytes(DType::kI32, t * k_slots) + dtype_bytes(DType::kF32, t * k_slots) +  // ids, weights
            dtype_bytes(act, t * n);                                  // the mixed output
  // Each slot is one [1, K] x [K, N] product, then a weighted sum of k_slots rows per token.
  c.flops = 2.0 * double(t) * double(k_slots) * double(n) * double(k) + 2.0 * double(t) * double(k_slots) * double(n);
  return c;
}

Cost embed_cost(int64_t t, int64_t dim, DType weight, DType out) {
  Cost c;
  c.bytes = double(t) * dtype_bytes(weight, dim) + dtype_bytes(DType::kI32, t) + dtype_bytes(out, t * dim);
  c.flops = 0.0;  // a gather (dequantising is not counted as arithmetic)
  return c;
}

Cost rms_norm_cost(int64_t rows, int64_t dim, DType act) {
  Cost c;
  c.bytes = 2.0 * dtype_bytes(act, rows * dim) + dtype_bytes(act, dim);
  c.flops = 4.0 * double(rows) * double(dim);
  return c;
}

Cost rope_cost(int64_t t, int64_t heads, int64_t head_dim, int64_t n_dims, DType act) {
  Cost c;
  c.bytes = 2.0 * dtype_bytes(act, t * heads * head_dim) + dtype_bytes(DType::kI32, t);
  c.flops = 6.0 * double(t) * double(heads) * double(n_dims / 2);
  return c;
}

Cost glu_cost(int64_t rows, int64_t n, DType act) {
  Cost c;
  c.bytes = 3.0 * dtype_bytes(act, rows * n);
  c.flops = 5.0 * double(rows) * double(n);
  return c;
}

Cost binary_cost(int64_t rows, int64_t n, int64_t b_rows, DType act) {
  Cost c;
  c.bytes = 2.0 * dtype_bytes(act, rows * n) + dtype_bytes(act, b_rows * n);
  c.flops = double(rows) * double(n);
  return c;
}

Cost attention_cost(const AttentionShape& s) {
  const int64_t tokens = s.n_seqs * s.new_tokens;
  const int64_t q_elems = tokens * s.q_heads * s.head_dim;
  const int64_t kv_new_elems = tokens * s.kv_heads * s.head_dim;
  const int64_t ctx_elems = s.n_seqs * s.context * s.kv_heads * s.head_dim;
  const int64_t blocks_per_seq = (s.context + s.block_size - 1) / s.block_size;
  Cost c;
  c.bytes = 2.0 * dtype_bytes(s.act, q_elems) +              // q in, out
            2.0 * dtype_bytes(s.act, kv_new_elems) +         // new k, v in
            2.0 * dtype_bytes(s.cache, kv_new_elems) +       // new k, v stored into the cache
            2.0 * dtype_bytes(s.cache, ctx_elems) +          // the visible K and V read back
            dtype_bytes(DType::kI32, tokens + (s.n_seqs + 1) + s.n_seqs + s.n_seqs * blocks_per_seq);
  // Visible keys of the new_tokens queries of one sequence, causal.
  const double past = double(s.context - s.new_tokens);
  const double visible = double(s.new_tokens) * past + double(s.new_tokens) * double(s.new_tokens + 1) / 2.0;
  c.flops = 4.0 * double(s.q_heads) * double(s.head_dim) * visible * double(s.n_seqs);
  return c;
}

double attainable_flops(double intensity, double bandwidth, double peak_flops) {
  const double mem = bandwidth > 0.0 ? intensity * bandwidth : 0.0;
  if (mem <= 0.0) return peak_flops;
  if (peak_flops <= 0.0) return mem;
  return std::min(mem, peak_flops);
}

const char* bound_by(double intensity, double bandwidth, double peak_flops) {
  if (bandwidth <= 0.0) return "compute";
  if (peak_flops <= 0.0) return "memory";
  return intensity * bandwidth < peak_flops ? "memory" : "compute";
}

Stat make_stat(std::vector<double> samples) {
  Stat s;
  s.n = int(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const size_t h = samples.size() / 2;
  s.median = samples.size() % 2 ? samples[h] : 0.5 * (samples[h - 1] + samples[h]);
  s.min = samples.front();
  s.max = samples.back();
  s.spread = s.median > 0.0 ? (s.max - s.min) / s.median : 0.0;
  s.noisy = s.spread > kNoisySpread;
  return s;
}

Stat rate_stat(const Stat& seconds, double amount) {
  Stat r;
  r.n = seconds.n;
  if (seconds.median <= 0.0) return r;
  r.median = amount / seconds.median;
  r.min = seconds.max > 0.0 ? amount / seconds.max : 0.0;
  r.max = seconds.min > 0.0 ? amount / seconds.min : 0.0;
  r.spread = r.median > 0.0 ? (r.max - r.min) / r.median : 0.0;
  r.noisy = r.spread > kNoisySpread;
  return r;
}

}  // namespace tessera::bench
