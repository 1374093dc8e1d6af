// rope -> rope.comp. The host computes what depends only on the params in double precision (the
// frequency table, YaRN's correction dims and magnitude) exactly as core/reference/rope.cpp.
#include <algorithm>
#include <cmath>

#include "backends/vulkan/recorder.h"

namespace tessera::vulkan {

namespace {
double yarn_corr_dim(int n_dims, int n_ctx_orig, double n_rot, double base) {
  return n_dims * std::log(n_ctx_orig / (n_rot * 2.0 * M_PI)) / (2.0 * std::log(base));
}
}  // namespace

Status record_rope(Recorder& rec, const Graph& g, const Node& n) {
  constexpr uint32_t kWorkgroup = 128;
  const Tensor& x = g.input_tensor(n, in::kRopeX);
  const Tensor& pos = g.input_tensor(n, in::kRopePos);
  const Tensor& out = g.output_tensor(n);
  const auto& rp = n.param<tessera::RopeParams>();
  // Without shaderFloat64 the float variant runs (angles lose ~1e-3 rad at position 32k).
  const bool fp64 = rec.caps().fp64;
  std::vector<double> inv_freq(size_t(rp.n_dims / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(double(rp.freq_base), -double(2 * i) / rp.n_dims);
  const std::vector<float> inv_freq_f(inv_freq.begin(), inv_freq.end());
  TS_ASSIGN_OR_RETURN(const uint64_t table, fp64 ? rec.put(inv_freq.data(), inv_freq.size() * sizeof(double))
                                                  : rec.put(inv_freq_f.data(), inv_freq_f.size() * sizeof(float)));
  RopeParams p;
  p.x = ref_of(x);
  p.pos = address_of(pos);
  p.inv_freq = table;
  p.dst = address_of(out);
  p.rows = uint32_t(x.shape[0] * x.shape[1]);
  p.H = uint32_t(x.shape[1]);
  p.D = uint32_t(x.shape[2]);
  p.n_dims = uint32_t(rp.n_dims);
  p.neox = rp.mode == RopeMode::kNeox;
  p.out_dtype = uint32_t(out.dtype);
  p.freq_scale = rp.freq_scale;
  p.ext_factor = rp.ext_factor;
  double mscale = rp.attn_factor;
  if (rp.ext_factor != 0.0f) {
    p.corr_lo = float(std::max(0.0, std::floor(yarn_corr_dim(rp.n_dims, rp.n_ctx_orig, rp.beta_fast, rp.freq_base))));
    p.corr_hi = float(std::min(double(rp.n_dims - 1),
                               std::ceil(yarn_corr_dim(rp.n_dims, rp.n_ctx_orig, rp.beta_slow, rp.freq_base))));
    mscale *= 1.0 + 0.1 * std::log(1.0 / rp.freq_scale);
  }
  p.mscale = float(mscale);
  std::vector<Span> reads = {span_of(x), span_of(pos)};
  if (g.has_input(n, in::kRopeFreqFactors)) {
    const Tensor& ff = g.input_tensor(n, in::kRopeFreqFactors);
    if (!ff.is_contiguous()) return Unimplemented("vulkan: rope freq_factors must be contiguous, got " + ff.shape_string());
    p.freq_factors = address_of(ff);
    reads.push_back(span_of(ff));
  }
  if (!pos.is_contiguous()) return Unimplemented("vulkan: rope positions must be contiguous");
  return rec.dispatch(fp64 ? "rope" : "rope_fp32", {kWorkgroup}, p, {groups_for(x.numel(), kWorkgroup), 1, 1}, reads, {span_of(out)});
}

}  // namespace tessera::vulkan
