// Reference rotary position embedding (normal and NeoX pairs; linear, YaRN and freq-factor scaling).
#include <algorithm>
#include <cmath>

#include "core/reference/reference.h"

namespace tessera::ref {

namespace {
// The dimension (of n_dims) whose wavelength fits |n_rot| rotations in the original context.
double yarn_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2.0 * M_PI)) / (2.0 * std::log(base));
}
}  // namespace

void rope_cos_sin(const RopeParams& p, int64_t pos, int i0, float freq_factor, double* cos_out, double* sin_out) {
  const double theta_extrap = double(pos) * std::pow(double(p.freq_base), -double(i0) / p.n_dims) / freq_factor;
  const double theta_interp = p.freq_scale * theta_extrap;
  double theta = theta_interp;
  double mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    const double lo = std::max(0.0, std::floor(yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base)));
    const double hi = std::min(double(p.n_dims - 1), std::ceil(yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base)));
    const double y = (i0 / 2 - lo) / std::max(0.001, hi - lo);
    const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
    theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
    mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
  }
  *cos_out = std::cos(theta) * mscale;
  *sin_out = std::sin(theta) * mscale;
}

Status rope(const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kRopeX);
  const Tensor& pos = g.input_tensor(n, in::kRopePos);
  const Tensor& out = g.output_tensor(n);
  const auto& p = n.param<RopeParams>();
  std::vector<double> ff;
  if (g.has_input(n, in::kRopeFreqFactors)) ff = load_row(g.input_tensor(n, in::kRopeFreqFactors), 0);
  const int64_t T = x.shape[0], H = x.shape[1];
  const int half = p.n_dims / 2;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t position = load_i32(pos, t);
    for (int64_t h = 0; h < H; ++h) {
      auto v = load_row(x, t * H + h);
      for (int i0 = 0; i0 < p.n_dims; i0 += 2) {
        double c, s;
        rope_cos_sin(p, position, i0, ff.empty() ? 1.0f : float(ff[size_t(i0 / 2)]), &c, &s);
        const size_t a = p.mode == RopeMode::kNormal ? size_t(i0) : size_t(i0 / 2);
        const size_t b = p.mode == RopeMode::kNormal ? size_t(i0 + 1) : size_t(i0 / 2 + half);
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
      store_row(out, t * H + h, v.data());
    }
  }
  return OkStatus();
}

}  // namespace tessera::ref
