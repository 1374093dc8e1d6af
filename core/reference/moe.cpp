// Reference topk_route: router scores -> (expert ids, weights).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/reference/reference.h"

namespace tessera::ref {

Status topk_route(const Graph& g, const Node& n) {
  const Tensor& logits = g.input_tensor(n, in::kRouteLogits);
  const Tensor& ids_out = g.output_tensor(n, 0);
  const Tensor& w_out = g.output_tensor(n, 1);
  const auto& p = n.param<TopkRouteParams>();
  std::vector<double> bias;
  if (g.has_input(n, in::kRouteBias)) bias = load_row(g.input_tensor(n, in::kRouteBias), 0);
  const int64_t E = logits.shape[1];
  const int64_t group_size = E / p.n_groups;
  for (int64_t t = 0; t < logits.shape[0]; ++t) {
    auto score = load_row(logits, t);
    if (p.scoring == RouteScoring::kSoftmax) {
      const double mx = *std::max_element(score.begin(), score.end());
      double sum = 0.0;
      for (double& s : score) { s = std::exp(s - mx); sum += s; }
      for (double& s : score) s /= sum;
    } else {
      for (double& s : score) s = 1.0 / (1.0 + std::exp(-s));
    }
    std::vector<double> sel = score;
    if (!bias.empty())
      for (int64_t e = 0; e < E; ++e) sel[size_t(e)] += bias[size_t(e)];
    // Grouped selection: a group's score is its best expert; experts of dropped groups are masked.
    if (p.n_groups > 1) {
      std::vector<std::pair<double, int64_t>> groups;
      for (int64_t gi = 0; gi < p.n_groups; ++gi) {
        double best = -INFINITY;
        for (int64_t e = gi * group_size; e < (gi + 1) * group_size; ++e) best = std::max(best, sel[size_t(e)]);
        groups.push_back({best, gi});
      }
      std::stable_sort(groups.begin(), groups.end(), [](auto& a, auto& b) { return a.first > b.first; });
      std::vector<bool> keep(size_t(p.n_groups), false);
      for (int i = 0; i < p.topk_groups; ++i) keep[size_t(groups[size_t(i)].second)] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!keep[size_t(e / group_size)]) sel[size_t(e)] = -INFINITY;
    }
    // Top-k by selection score, ties to the lower expert index.
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sel[size_t(a)] > sel[size_t(b)]; });
    std::vector<double> ids(static_cast<size_t>(p.k)), w(size_t(p.k));
    double sum = 0.0;
    for (int j = 0; j < p.k; ++j) {
      ids[size_t(j)] = double(order[size_t(j)]);
      w[size_t(j)] = score[size_t(order[size_t(j)])];
      sum += w[size_t(j)];
    }
    for (double& x : w) x = (p.renormalize && sum > 0.0 ? x / sum : x) * p.weight_scale;
    store_row(ids_out, t, ids.data());
    store_row(w_out, t, w.data());
  }
  return OkStatus();
}

}  // namespace tessera::ref
