// Reference embed, matmul, matmul_id.
#include <string>

#include "core/reference/reference.h"

namespace tessera::ref {

Status embed(const Graph& g, const Node& n) {
  const Tensor& w = g.input_tensor(n, in::kEmbedWeight);
  const Tensor& ids = g.input_tensor(n, in::kEmbedIds);
  const Tensor& out = g.output_tensor(n);
  for (int64_t t = 0; t < ids.shape[0]; ++t) {
    const int32_t id = load_i32(ids, t);
    if (id < 0 || id >= w.shape[0])
      return InvalidArgument("embed: id " + std::to_string(id) + " at row " + std::to_string(t) +
                             " outside [0, " + std::to_string(w.shape[0]) + ")");
    const auto row = load_row(w, id);
    store_row(out, t, row.data());
  }
  return OkStatus();
}

namespace {
// Dequantised rows of a 2-D (or one expert of a 3-D) weight, as doubles.
std::vector<std::vector<double>> load_matrix(const Tensor& w, int64_t first_row, int64_t n_rows) {
  std::vector<std::vector<double>> m(static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) m[size_t(r)] = load_row(w, first_row + r);
  return m;
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double acc = 0.0;
  for (size_t i = 0; i < a.size(); ++i) acc += a[i] * b[i];
  return acc;
}
}  // namespace

Status matmul(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kMatmulX);
  const Tensor& w = g.input_tensor(n, in::kMatmulW);
  const Tensor& out = g.output_tensor(n);
  const int64_t N = w.shape[0];
  const auto W = load_matrix(w, 0, N);
  std::vector<double> bias(size_t(N), 0.0);
  if (g.has_input(n, in::kMatmulBias)) bias = load_row(g.input_tensor(n, in::kMatmulBias), 0);
  std::vector<double> y(static_cast<size_t>(N));
  for (int64_t m = 0; m < x.rows(); ++m) {
    const auto xr = load_row(x, m);
    for (int64_t j = 0; j < N; ++j) y[size_t(j)] = dot(xr, W[size_t(j)]) + bias[size_t(j)];
    store_row(out, m, y.data());
  }
  return OkStatus();
}

Status matmul_id(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kMatmulIdX);
  const Tensor& w = g.input_tensor(n, in::kMatmulIdW);
  const Tensor& ids = g.input_tensor(n, in::kMatmulIdIds);
  const Tensor& out = g.output_tensor(n);
  const bool weighted = g.has_input(n, in::kMatmulIdWeights);
  const bool biased = g.has_input(n, in::kMatmulIdBias);
  const int64_t E = w.shape[0], N = w.shape[1], T = ids.shape[0], k = ids.shape[1];
  // Flat row r of w's [E*N, K] rows: expert e row j is e*N + j.
  std::vector<std::vector<std::vector<double>>> experts(static_cast<size_t>(E));
  std::vector<double> acc(static_cast<size_t>(N));
  for (int64_t t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = load_i32(ids, t * k + j);
      if (e < 0 || e >= E)
        return InvalidArgument("matmul_id: expert id " + std::to_string(e) + " at [" + std::to_string(t) + ", " +
                               std::to_string(j) + "] outside [0, " + std::to_string(E) + ")");
      if (experts[size_t(e)].empty()) experts[size_t(e)] = load_matrix(w, e * N, N);
      const auto xr = load_row(x, x.rank == 2 ? t : t * k + j);
      std::vector<double> y(static_cast<size_t>(N));
      for (int64_t r = 0; r < N; ++r) y[size_t(r)] = dot(xr, experts[size_t(e)][size_t(r)]);
      if (biased) {
        const auto b = load_row(g.input_tensor(n, in::kMatmulIdBias), e);
        for (int64_t r = 0; r < N; ++r) y[size_t(r)] += b[size_t(r)];
      }
      if (weighted) {
        const double wt = load_row(g.input_tensor(n, in::kMatmulIdWeights), t)[size_t(j)];
        for (int64_t r = 0; r < N; ++r) acc[size_t(r)] += wt * y[size_t(r)];
      } else {
        store_row(out, t * k + j, y.data());
      }
    }
    if (weighted) store_row(out, t, acc.data());
  }
  return OkStatus();
}

}  // namespace tessera::ref
