// Mixture-of-experts: matmul_id (rows grouped by expert, one GEMM/GEMV per used expert, so only
// used experts' weights are read) and topk_route (router scores -> expert ids and weights).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

namespace tessera::cpu {

Status matmul_id(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kMatmulIdX);
  const Tensor& w = g.input_tensor(n, in::kMatmulIdW);
  const Tensor& ids = g.input_tensor(n, in::kMatmulIdIds);
  const Tensor& out = g.output_tensor(n);
  const bool weighted = g.has_input(n, in::kMatmulIdWeights);
  const int64_t E = w.shape[0], N = w.shape[1], K = w.shape[2], T = ids.shape[0], k = ids.shape[1];
  // CpuDevice::prepare_weight tiles only kMatmul weights; a view of one reaching here is a model bug.
  if (w.layout != WeightLayout::kRows)
    return InvalidArgument("cpu: matmul_id: weight '" + w.name + "' " + w.shape_string() +
                           " is in the CPU's row-tile layout, which only matmul reads (prepare it for kMatmulId)");
  // Group the (token, slot) pairs by expert; reject ids out of range before reading anything.
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));  // flat slot index t*k + j
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ref::load_i32(ids, t * k + j);
      if (e < 0 || e >= E)
        return InvalidArgument("matmul_id: expert id " + std::to_string(e) + " at [" + std::to_string(t) + ", " +
                               std::to_string(j) + "] outside [0, " + std::to_string(E) + ")");
      by_expert[size_t(e)].push_back(t * k + j);
    }
  std::vector<float> route_w;
  if (weighted) {
    const Tensor& wt = g.input_tensor(n, in::kMatmulIdWeights);
    route_w.resize(size_t(T * k));
    for (int64_t t = 0; t < T; ++t) {
      const float* r = load_row_f32(wt, t, &route_w[size_t(t * k)]);
      if (r != &route_w[size_t(t * k)]) std::memcpy(&route_w[size_t(t * k)], r, size_t(k) * 4);
    }
  }
  // Unweighted: y goes to row t*k + j of |acc|. Weighted: wacc[t] = sum_j w[t, j] * y_j in
  // double, rounded to f32 once (as the reference does). Rounding after every term would make
  // identical experts with weights summing to one differ from the dense FFN by an ulp, and the
  // int8 activation quantisation of the next matmuls amplifies an ulp to ~1e-2 over a deep model.
  std::vector<float> acc(weighted ? 0 : size_t(T * k * N));
  std::vector<double> wacc(weighted ? size_t(T * N) : 0, 0.0);
  // NOTE: a non-dense float expert weight cannot occur: Graph::matmul_id takes w as given and
  // the loader always provides dense rows; checked here rather than assumed.
  if (!last_dim_dense(w))
    return Unimplemented("matmul_id: expert weights with a strided last dim " + w.shape_string());
  const bool biased = g.has_input(n, in::kMatmulIdBias);
  std::vector<float> brow(biased ? size_t(N) : 0);
  PackedAct act;
  std::vector<float> y;
  std::vector<int64_t> rows;
  for (int64_t e = 0; e < E; ++e) {
    const auto& slots = by_expert[size_t(e)];
    if (slots.empty()) continue;
    rows.clear();
    for (int64_t s : slots) rows.push_back(x.rank == 2 ? s / k : s);
    const int64_t M = int64_t(rows.size());
    pack_activations(pool, x, rows.data(), M, w.dtype, &act);
    const WeightMat wm{w.dtype, static_cast<const char*>(w.host_data()) + e * w.stride[0], w.stride[1],
                       dtype_traits(w.dtype).block_bytes, N, K};
    y.resize(size_t(M * N));
    gemm(pool, act, wm, y.data(), N);
    if (biased) {  // expert e's bias row on each of its results, before the weighting
      const float* b = load_row_f32(g.input_tensor(n, in::kMatmulIdBias), e, brow.data());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t c = 0; c < N; ++c) y[size_t(i * N + c)] += b[c];
    }
    for (int64_t i = 0; i < M; ++i) {
      const int64_t s = slots[size_t(i)];
      const float* src = &y[size_t(i * N)];
      if (weighted) {
        double* dst = &wacc[size_t((s / k) * N)];
        const double rw = route_w[size_t(s)];
        for (int64_t c = 0; c < N; ++c) dst[c] += rw * src[c];
      } else {
        std::memcpy(&acc[size_t(s * N)], src, size_t(N) * 4);
      }
    }
  }
  if (weighted) {
    acc.resize(size_t(N));
    for (int64_t r = 0; r < out.rows(); ++r) {
      for (int64_t c = 0; c < N; ++c) acc[size_t(c)] = float(wacc[size_t(r * N + c)]);
      store_row_f32(out, r, acc.data());
    }
  } else {
    for (int64_t r = 0; r < out.rows(); ++r) store_row_f32(out, r, &acc[size_t(r * N)]);
  }
  return OkStatus();
}

namespace {
// Route one token: |score| holds the logits on entry. Writes k ids and weights.
void route_row(const TopkRouteParams& p, const std::vector<double>& bias, std::vector<double>& score,
               std::vector<double>& sel, std::vector<int64_t>& order, float* ids, float* wts) {
  const int64_t E = int64_t(score.size());
  if (p.scoring == RouteScoring::kSoftmax) {
    const double mx = *std::max_element(score.begin(), score.end());
    double sum = 0.0;
    for (double& s : score) sum += (s = std::exp(s - mx));
    for (double& s : score) s /= sum;
  } else {
    for (double& s : score) s = 1.0 / (1.0 + std::exp(-s));
  }
  sel = score;
  if (!bias.empty())
    for (int64_t e = 0; e < E; ++e) sel[size_t(e)] += bias[size_t(e)];
  auto better = [&](int64_t a, int64_t b) { return sel[size_t(a)] > sel[size_t(b)] || (sel[size_t(a)] == sel[size_t(b)] && a < b); };
  if (p.n_groups > 1) {
    // A group scores by its best expert; experts outside the best topk_groups groups are masked.
    const int64_t gs = E / p.n_groups;
    std::vector<int64_t> best(static_cast<size_t>(p.n_groups));
    for (int64_t gi = 0; gi < p.n_groups; ++gi) {
      best[size_t(gi)] = gi * gs;
      for (int64_t e = gi * gs; e < (gi + 1) * gs; ++e)
        if (better(e, best[size_t(gi)])) best[size_t(gi)] = e;
    }
    std::vector<int64_t> groups(static_cast<size_t>(p.n_groups));
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int64_t a, int64_t b) { return sel[size_t(best[size_t(a)])] > sel[size_t(best[size_t(b)])]; });
    std::vector<bool> keep(size_t(p.n_groups), false);
    for (int i = 0; i < p.topk_groups; ++i) keep[size_t(groups[size_t(i)])] = true;
    for (int64_t e = 0; e < E; ++e)
      if (!keep[size_t(e / gs)]) sel[size_t(e)] = -INFINITY;
  }
  order.resize(size_t(E));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + p.k, order.end(), better);
  double sum = 0.0;
  for (int j = 0; j < p.k; ++j) sum += score[size_t(order[size_t(j)])];
  for (int j = 0; j < p.k; ++j) {
    const double wv = score[size_t(order[size_t(j)])];
    ids[j] = float(order[size_t(j)]);
    wts[j] = float((p.renormalize && sum > 0.0 ? wv / sum : wv) * p.weight_scale);
  }
}
}  // namespace

Status topk_route(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& logits = g.input_tensor(n, in::kRouteLogits);
  const Tensor& ids_out = g.output_tensor(n, 0);
  const Tensor& w_out = g.output_tensor(n, 1);
  const auto& p = n.param<TopkRouteParams>();
  std::vector<double> bias;
  if (g.has_input(n, in::kRouteBias)) bias = ref::load_row(g.input_tensor(n, in::kRouteBias), 0);
  const int64_t T = logits.shape[0], E = logits.shape[1];
  // Router work is T x E with E ~ 8..256: small, so one thread, in double like the reference
  // (a near tie decided differently would change which expert runs).
  std::vector<double> score(static_cast<size_t>(E)), sel;
  std::vector<int64_t> order;
  std::vector<float> row(static_cast<size_t>(E)), ids(static_cast<size_t>(p.k)), wts(static_cast<size_t>(p.k));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = load_row_f32(logits, t, row.data());
    for (int64_t e = 0; e < E; ++e) score[size_t(e)] = l[e];
    route_row(p, bias, score, sel, order, ids.data(), wts.data());
    char* ip = static_cast<char*>(ids_out.host_data()) + ids_out.row_offset(t);
    for (int j = 0; j < p.k; ++j) {
      const int32_t v = int32_t(ids[size_t(j)]);
      std::memcpy(ip + j * ids_out.stride[1], &v, 4);
    }
    store_row_f32(w_out, t, wts.data());
  }
  return OkStatus();
}

}  // namespace tessera::cpu
