// matmul_id (sort by expert, one grouped launch, weighted sum) and topk_route.
#pragma once
#include "backends/cuda/kernels/matmul.h"

namespace tessera::gpu {

// matmul_id, step 1 (one block): the (token, slot) pairs p = t * k + j grouped by expert, in
// token order within each expert (deterministic: no atomics): offsets[g] .. offsets[g + 1] of
// order[] are group g's pairs; group E collects pairs whose id is out of range (an error).
struct MoeSortKernel {
  using Args = MoeSortArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t P = a.ids.rows() * a.ids.cols(), E = a.experts;
    auto group = [&](int64_t p) {
      const int32_t e = load_i32(a.ids, p);
      return e >= 0 && e < E ? int64_t(e) : E;
    };
    for (int64_t g = c.tid(); g <= E; g += c.ntid()) {
      int32_t n = 0;
      for (int64_t p = 0; p < P; ++p) n += group(p) == g;
      a.offsets[g + 1] = n;
    }
    c.sync();
    if (c.tid() == 0) {
      a.offsets[0] = 0;
      for (int64_t g = 0; g <= E; ++g) a.offsets[g + 1] += a.offsets[g];
      if (a.offsets[E + 1] > a.offsets[E]) c.set_error(a.err, KernelError::kExpertId);
    }
    c.sync();
    for (int64_t g = c.tid(); g <= E; g += c.ntid()) {
      int32_t at = a.offsets[g];
      for (int64_t p = 0; p < P; ++p)
        if (group(p) == g) a.order[at++] = int32_t(p);
    }
  }
};

// matmul_id, step 2: one grouped launch. Block y is one tile of up to kMatmulRows pairs of one
// expert (tiles numbered across the experts in order; blocks past the last tile exit), each warp
// one output column: the expert's weight row is read once for the tile's rows, as a matmul
// reads it. Results go to out row p (no weights) or to y[p, N] for the weighted sum.
template <DType W>
struct MatmulIdKernel {
  using Args = MatmulIdArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t n = int64_t(c.bx()) * kMatmulWarps + c.tid() / kWarp;
    const int64_t E = a.w.shape[0], N = a.w.shape[1], K = a.w.cols(), k = a.ids.cols();
    if (n >= N) return;
    int64_t tile = c.by(), g = 0;
    for (; g <= E; ++g) {
      const int64_t tiles = (a.offsets[g + 1] - a.offsets[g] + kMatmulRows - 1) / kMatmulRows;
      if (tile < tiles) break;
      tile -= tiles;
    }
    if (g > E) return;  // the whole block: no tile left
    const int64_t p0 = a.offsets[g] + tile * kMatmulRows;
    const int64_t left = a.offsets[g + 1] - p0;
    const int rows = int(left < kMatmulRows ? left : kMatmulRows);
    int64_t pairs[kMatmulRows], xrows[kMatmulRows];
    for (int r = 0; r < kMatmulRows; ++r) {
      pairs[r] = r < rows ? a.order[p0 + r] : 0;
      xrows[r] = a.x.rank == 2 ? pairs[r] / k : pairs[r];
    }
    float acc[kMatmulRows];
    if (g < E) {
      dots<W>(c, a.x, a.xq, xrows, rows, a.w.row(g * N + n), K, acc);
    } else {
      for (float& v : acc) v = 0.0f;  // out-of-range ids (reported by the sort): zeros
    }
    const int lane = c.tid() % kWarp;
    if (lane < rows) {
      float v = 0.0f;
      int64_t p = 0;
      for (int r = 0; r < kMatmulRows; ++r)
        if (r == lane) v = acc[r], p = pairs[r];
      if (a.bias.p && g < E) v += load_f(a.bias.row(g) + n * a.bias.col_stride(), a.bias.dtype);
      if (a.y) a.y[p * N + n] = v;
      else store_f(a.out.row(p) + n * a.out.col_stride(), a.out.dtype, v);
    }
  }
};

// matmul_id, step 3 (weighted): out[t] = sum_j weights[t, j] * y[t * k + j], j in order.
struct MoeWeightedSumKernel {
  using Args = MoeWeightedSumArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx(), N = a.out.cols(), k = a.weights.cols();
    const uint8_t* rw = a.weights.row(t);
    uint8_t* ro = a.out.row(t);
    for (int64_t n = c.tid(); n < N; n += c.ntid()) {
      float total = 0.0f;
      for (int64_t j = 0; j < k; ++j)
        total += load_f(rw + j * a.weights.col_stride(), a.weights.dtype) * a.y[(t * k + j) * N + n];
      store_f(ro + n * a.out.col_stride(), a.out.dtype, total);
    }
  }
};

// topk_route: one thread per token (E <= kMaxRouteExperts), ties to the lower expert index.
struct TopkRouteKernel {
  using Args = TopkRouteArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = int64_t(c.bx()) * c.ntid() + c.tid();
    if (t >= a.logits.rows()) return;
    const int E = int(a.logits.cols());
    float score[kMaxRouteExperts], sel[kMaxRouteExperts];
    const uint8_t* rl = a.logits.row(t);
    const int64_t sl = a.logits.col_stride();
    float mx = -INFINITY;
    for (int e = 0; e < E; ++e) {
      score[e] = load_f(rl + e * sl, a.logits.dtype);
      mx = fmaxf(mx, score[e]);
    }
    const TopkRouteParams& p = a.p;
    if (p.scoring == RouteScoring::kSoftmax) {
      float s = 0.0f;
      for (int e = 0; e < E; ++e) {
        score[e] = expf(score[e] - mx);
        s += score[e];
      }
      for (int e = 0; e < E; ++e) score[e] /= s;
    } else {
      for (int e = 0; e < E; ++e) score[e] = 1.0f / (1.0f + expf(-score[e]));
    }
    for (int e = 0; e < E; ++e)
      sel[e] = score[e] + (a.bias.p ? load_f(a.bias.p + e * a.bias.col_stride(), a.bias.dtype) : 0.0f);
    if (p.n_groups > 1) {
      const int gs = E / p.n_groups;
      float best[64];
      bool keep[64];
      for (int g = 0; g < p.n_groups; ++g) {
        best[g] = -INFINITY;
        keep[g] = false;
        for (int e = g * gs; e < (g + 1) * gs; ++e) best[g] = fmaxf(best[g], sel[e]);
      }
      for (int i = 0; i < p.topk_groups; ++i) {
        int bi = -1;
        for (int g = 0; g < p.n_groups; ++g)
          if (!keep[g] && (bi < 0 || best[g] > best[bi])) bi = g;
        keep[bi] = true;
      }
      for (int e = 0; e < E; ++e)
        if (!keep[e / gs]) sel[e] = -INFINITY;
    }
    uint32_t taken[kMaxRouteExperts / 32];
    for (int i = 0; i < kMaxRouteExperts / 32; ++i) taken[i] = 0;
    float w[64];
    int ids[64];
    float sum = 0.0f;
    for (int j = 0; j < p.k; ++j) {
      int bi = -1;
      for (int e = 0; e < E; ++e)
        if (!((taken[e / 32] >> (e % 32)) & 1u) && (bi < 0 || sel[e] > sel[bi])) bi = e;
      taken[bi / 32] |= 1u << (bi % 32);
      ids[j] = bi;
      w[j] = score[bi];
      sum += w[j];
    }
    uint8_t* ri = a.ids.row(t);
    uint8_t* rw = a.weights.row(t);
    for (int j = 0; j < p.k; ++j) {
      const float v = (p.renormalize && sum > 0.0f ? w[j] / sum : w[j]) * p.weight_scale;
      const uint32_t u = uint32_t(ids[j]);
      uint8_t* p = ri + j * a.ids.col_stride();
      for (int b = 0; b < 4; ++b) p[b] = uint8_t(u >> (8 * b));
      store_f(rw + j * a.weights.col_stride(), a.weights.dtype, v);
    }
  }
};

}  // namespace tessera::gpu
