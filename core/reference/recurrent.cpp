// Reference ssm_conv and gated_delta_net: the recurrent layers of hybrid models, token by token in
// double, each sequence from and back into its state row.
#include <cmath>
#include <string>

#include "core/reference/reference.h"

namespace tessera::ref {

namespace {
// query_start [S+1] covers the T rows in order; each state slot is inside [0, n_slots) and no two
// sequences of the step share one (they would race on it).
Status check_seqs(const char* op, const Tensor& qs, const Tensor& slots, int64_t T, int64_t n_slots) {
  auto err = [op](const std::string& m) { return InvalidArgument(std::string(op) + ": " + m); };
  const int64_t S = slots.shape[0];
  if (load_i32(qs, 0) != 0) return err("query_start[0] must be 0");
  if (load_i32(qs, S) != T) return err("query_start[S] = " + std::to_string(load_i32(qs, S)) + " != T = " + std::to_string(T));
  std::vector<bool> seen(size_t(n_slots), false);
  for (int64_t s = 0; s < S; ++s) {
    if (load_i32(qs, s + 1) < load_i32(qs, s)) return err("query_start decreases at sequence " + std::to_string(s));
    const int32_t slot = load_i32(slots, s);
    if (slot < 0 || slot >= n_slots)
      return err("state_slots[" + std::to_string(s) + "] = " + std::to_string(slot) + " outside [0, " + std::to_string(n_slots) + ")");
    if (seen[size_t(slot)]) return err("state slot " + std::to_string(slot) + " is named by two sequences");
    seen[size_t(slot)] = true;
  }
  return OkStatus();
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
}  // namespace

Status check_recurrent_metadata(const Graph& g, const Node& n) {
  if (n.op == OpKind::kSsmConv)
    return check_seqs("ssm_conv", g.input_tensor(n, in::kConvQueryStart), g.input_tensor(n, in::kConvSlots),
                      g.input_tensor(n, in::kConvX).shape[0], g.input_tensor(n, in::kConvState).shape[0]);
  return check_seqs("gated_delta_net", g.input_tensor(n, in::kGdnQueryStart), g.input_tensor(n, in::kGdnSlots),
                    g.input_tensor(n, in::kGdnQ).shape[0], g.input_tensor(n, in::kGdnState).shape[0]);
}

Status ssm_conv(const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(check_recurrent_metadata(g, n));
  const Tensor& x = g.input_tensor(n, in::kConvX);
  const Tensor& w = g.input_tensor(n, in::kConvW);
  const Tensor& st = g.input_tensor(n, in::kConvState);
  const Tensor& qs = g.input_tensor(n, in::kConvQueryStart);
  const Tensor& slots = g.input_tensor(n, in::kConvSlots);
  const Tensor& out = g.output_tensor(n);
  const int64_t C = x.shape[1], K = w.shape[1], S = slots.shape[0];
  std::vector<std::vector<double>> taps;  // [C][K]
  for (int64_t c = 0; c < C; ++c) taps.push_back(load_row(w, c));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t a = load_i32(qs, s), b = load_i32(qs, s + 1), slot = load_i32(slots, s);
    // The sequence's input history: its K-1 state rows, then this step's rows.
    std::vector<std::vector<double>> hist;
    for (int64_t j = 0; j < K - 1; ++j) hist.push_back(load_row(st, slot * (K - 1) + j));
    for (int64_t r = a; r < b; ++r) hist.push_back(load_row(x, r));
    for (int64_t r = a; r < b; ++r) {
      const size_t newest = size_t(K - 1 + (r - a));
      std::vector<double> y(size_t(C), 0.0);
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < K; ++j) acc += taps[size_t(c)][size_t(j)] * hist[newest - size_t(K - 1 - j)][size_t(c)];
        y[size_t(c)] = n.param<SsmConvParams>().silu ? acc * sigmoid(acc) : acc;
      }
      store_row(out, r, y.data());
    }
    for (int64_t j = 0; j < K - 1; ++j) store_row(st, slot * (K - 1) + j, hist[hist.size() - size_t(K - 1) + size_t(j)].data());
  }
  return OkStatus();
}

Status gated_delta_net(const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(check_recurrent_metadata(g, n));
  const Tensor& q = g.input_tensor(n, in::kGdnQ);
  const Tensor& k = g.input_tensor(n, in::kGdnK);
  const Tensor& v = g.input_tensor(n, in::kGdnV);
  const Tensor& alpha = g.input_tensor(n, in::kGdnAlpha);
  const Tensor& beta = g.input_tensor(n, in::kGdnBeta);
  const Tensor& st = g.input_tensor(n, in::kGdnState);
  const Tensor& qs = g.input_tensor(n, in::kGdnQueryStart);
  const Tensor& slots = g.input_tensor(n, in::kGdnSlots);
  const Tensor& out = g.output_tensor(n);
  const auto& p = n.param<GatedDeltaNetParams>();
  const int64_t Hk = q.shape[1], Dk = q.shape[2], Hv = v.shape[1], Dv = v.shape[2], S = slots.shape[0];
  const bool gated = g.has_input(n, in::kGdnDecayRate);
  std::vector<double> A, dt;
  if (gated) {
    A = load_row(g.input_tensor(n, in::kGdnDecayRate), 0);
    dt = load_row(g.input_tensor(n, in::kGdnDtBias), 0);
  }
  const double scale = p.q_scale > 0.0f ? double(p.q_scale) : 1.0 / std::sqrt(double(Dk));
  auto normalise = [&](std::vector<double>& x, double mul) {
    double ss = 0.0;
    for (double e : x) ss += e * e;
    const double inv = p.l2_norm ? 1.0 / std::sqrt(ss + double(p.eps)) : 1.0;
    for (double& e : x) e *= inv * mul;
  };
  for (int64_t s = 0; s < S; ++s) {
    const int64_t a = load_i32(qs, s), b = load_i32(qs, s + 1), slot = load_i32(slots, s);
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t hk = p.tiled_heads ? h % Hk : h / (Hv / Hk);
      std::vector<std::vector<double>> S_;  // [Dk][Dv]
      for (int64_t i = 0; i < Dk; ++i) S_.push_back(load_row(st, (slot * Hv + h) * Dk + i));
      for (int64_t r = a; r < b; ++r) {
        std::vector<double> qv = load_row(q, r * Hk + hk), kv = load_row(k, r * Hk + hk);
        const std::vector<double> vv = load_row(v, r * Hv + h);
        normalise(qv, scale);
        normalise(kv, 1.0);
        const double x = load_row(alpha, r)[size_t(h)];
        const double gl = gated ? A[size_t(h)] * softplus(x + dt[size_t(h)]) : x;
        const double decay = std::exp(gl), bt = sigmoid(load_row(beta, r)[size_t(h)]);
        std::vector<double> u(size_t(Dv), 0.0), o(size_t(Dv), 0.0);
        for (auto& row : S_)
          for (double& e : row) e *= decay;
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) u[size_t(j)] += S_[size_t(i)][size_t(j)] * kv[size_t(i)];
        for (int64_t j = 0; j < Dv; ++j) u[size_t(j)] = (vv[size_t(j)] - u[size_t(j)]) * bt;
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) S_[size_t(i)][size_t(j)] += kv[size_t(i)] * u[size_t(j)];
        for (int64_t i = 0; i < Dk; ++i)
          for (int64_t j = 0; j < Dv; ++j) o[size_t(j)] += S_[size_t(i)][size_t(j)] * qv[size_t(i)];
        store_row(out, r * Hv + h, o.data());
      }
      for (int64_t i = 0; i < Dk; ++i) store_row(st, (slot * Hv + h) * Dk + i, S_[size_t(i)].data());
    }
  }
  return OkStatus();
}

}  // namespace tessera::ref
