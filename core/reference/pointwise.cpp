// Reference rms_norm, layer_norm, gelu, glu, add/mul, scale, softmax, cast/copy.
#include <algorithm>
#include <cmath>

#include "core/reference/reference.h"

namespace tessera::ref {

Status rms_norm(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kRmsNormX);
  const Tensor& out = g.output_tensor(n);
  const double eps = n.param<RmsNormParams>().eps;
  std::vector<double> w;
  if (g.has_input(n, in::kRmsNormW)) w = load_row(g.input_tensor(n, in::kRmsNormW), 0);
  for (int64_t r = 0; r < x.rows(); ++r) {
    auto v = load_row(x, r);
    double ss = 0.0;
    for (double e : v) ss += e * e;
    const double inv = 1.0 / std::sqrt(ss / double(v.size()) + eps);
    for (size_t i = 0; i < v.size(); ++i) v[i] = v[i] * inv * (w.empty() ? 1.0 : w[i]);
    store_row(out, r, v.data());
  }
  return OkStatus();
}

Status layer_norm(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kLayerNormX);
  const Tensor& out = g.output_tensor(n);
  const double eps = n.param<LayerNormParams>().eps;
  std::vector<double> w, b;
  if (g.has_input(n, in::kLayerNormW)) w = load_row(g.input_tensor(n, in::kLayerNormW), 0);
  if (g.has_input(n, in::kLayerNormB)) b = load_row(g.input_tensor(n, in::kLayerNormB), 0);
  for (int64_t r = 0; r < x.rows(); ++r) {
    auto v = load_row(x, r);
    double mean = 0.0;
    for (double e : v) mean += e;
    mean /= double(v.size());
    double var = 0.0;
    for (double e : v) var += (e - mean) * (e - mean);
    const double inv = 1.0 / std::sqrt(var / double(v.size()) + eps);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = (v[i] - mean) * inv * (w.empty() ? 1.0 : w[i]) + (b.empty() ? 0.0 : b[i]);
    store_row(out, r, v.data());
  }
  return OkStatus();
}

Status gelu(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  const Tensor& out = g.output_tensor(n);
  for (int64_t r = 0; r < x.rows(); ++r) {
    auto v = load_row(x, r);
    for (double& e : v) e = 0.5 * e * (1.0 + std::erf(e * 0.7071067811865476));
    store_row(out, r, v.data());
  }
  return OkStatus();
}

Status glu(const Graph& g, const Node& n) {
  const Tensor& gate = g.input_tensor(n, 0);
  const Tensor& up = g.input_tensor(n, 1);
  const Tensor& out = g.output_tensor(n);
  const auto& p = n.param<GluParams>();
  const GluKind kind = p.kind;
  const double limit = p.limit, alpha = p.alpha;
  for (int64_t r = 0; r < gate.rows(); ++r) {
    auto a = load_row(gate, r);
    const auto b = load_row(up, r);
    for (size_t i = 0; i < a.size(); ++i) {
      if (kind == GluKind::kSwigluOai) {
        const double x = std::min(a[i], limit), u = std::clamp(b[i], -limit, limit);
        a[i] = x / (1.0 + std::exp(-alpha * x)) * (u + 1.0);
        continue;
      }
      const double x = a[i];
      const double act = kind == GluKind::kSilu      ? x / (1.0 + std::exp(-x))
                         : kind == GluKind::kSigmoid ? 1.0 / (1.0 + std::exp(-x))
                                                     : 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      a[i] = act * b[i];
    }
    store_row(out, r, a.data());
  }
  return OkStatus();
}

Status binary(const Graph& g, const Node& n) {
  const Tensor& a = g.input_tensor(n, 0);
  const Tensor& b = g.input_tensor(n, 1);
  const Tensor& out = g.output_tensor(n);
  const bool is_add = n.op == OpKind::kAdd;
  for (int64_t r = 0; r < a.rows(); ++r) {
    auto x = load_row(a, r);
    const auto y = load_row(b, r % b.rows());
    for (size_t i = 0; i < x.size(); ++i) x[i] = is_add ? x[i] + y[i] : x[i] * y[i];
    store_row(out, r, x.data());
  }
  return OkStatus();
}

Status scale(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  const Tensor& out = g.output_tensor(n);
  const double s = n.param<ScaleParams>().scale, cap = n.param<ScaleParams>().softcap;
  for (int64_t r = 0; r < x.rows(); ++r) {
    auto v = load_row(x, r);
    for (double& e : v) e = cap > 0 ? cap * std::tanh(e * s / cap) : e * s;
    store_row(out, r, v.data());
  }
  return OkStatus();
}

Status softmax(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  const Tensor& out = g.output_tensor(n);
  const double s = n.param<SoftmaxParams>().scale;
  for (int64_t r = 0; r < x.rows(); ++r) {
    auto v = load_row(x, r);
    double mx = -INFINITY;
    for (double& e : v) { e *= s; mx = std::max(mx, e); }
    double sum = 0.0;
    for (double& e : v) { e = std::exp(e - mx); sum += e; }
    for (double& e : v) e /= sum;
    store_row(out, r, v.data());
  }
  return OkStatus();
}

Status convert(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  const Tensor& out = g.output_tensor(n);
  for (int64_t r = 0; r < x.rows(); ++r) {
    const auto v = load_row(x, r);
    store_row(out, r, v.data());
  }
  return OkStatus();
}

}  // namespace tessera::ref
