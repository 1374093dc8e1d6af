// ssm_conv and gated_delta_net -> recurrent.comp (STAGE 0 and 1). The metadata is validated on
// the host with the reference's own check whenever it is readable there; the shader skips a
// sequence whose slot or rows are out of range regardless.
#include <cmath>

#include "backends/vulkan/recorder.h"
#include "core/reference/reference.h"

namespace tessera::vulkan {

namespace {
constexpr uint32_t kWorkgroup = 64;
constexpr int64_t kMaxConvTaps = 8;  // recurrent.comp MAX_K

Status check_metadata(Recorder& rec, const Graph& g, const Node& n, int qs, int slots) {
  for (int i : {qs, slots})
    if (!g.input_tensor(n, i).is_contiguous())
      return Unimplemented(std::string("vulkan: ") + op_name(n.op) + " metadata must be contiguous");
  if (rec.host_checkable(g, n, qs) && rec.host_checkable(g, n, slots)) return ref::check_recurrent_metadata(g, n);
  return OkStatus();
}
}  // namespace

Status record_ssm_conv(Recorder& rec, const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(check_metadata(rec, g, n, in::kConvQueryStart, in::kConvSlots));
  const Tensor& x = g.input_tensor(n, in::kConvX);
  const Tensor& w = g.input_tensor(n, in::kConvW);
  const Tensor& st = g.input_tensor(n, in::kConvState);
  const Tensor& qs = g.input_tensor(n, in::kConvQueryStart);
  const Tensor& slots = g.input_tensor(n, in::kConvSlots);
  const Tensor& out = g.output_tensor(n);
  if (w.shape[1] > kMaxConvTaps)
    return Unimplemented("vulkan: ssm_conv with " + std::to_string(w.shape[1]) + " taps (at most " + std::to_string(kMaxConvTaps) + ")");
  ConvParams p;
  p.x = ref_of(x);
  p.w = ref_of(w);
  p.st = ref_of(st);
  p.query_start = address_of(qs);
  p.slots = address_of(slots);
  p.dst = address_of(out);
  p.S = uint32_t(slots.shape[0]);
  p.C = uint32_t(x.shape[1]);
  p.K = uint32_t(w.shape[1]);
  p.silu = n.param<SsmConvParams>().silu ? 1u : 0u;
  p.out_dtype = uint32_t(out.dtype);
  p.T = uint32_t(x.shape[0]);
  p.n_slots = uint32_t(st.shape[0]);
  return rec.dispatch("ssm_conv", {kWorkgroup}, p, {groups_for(int64_t(p.S) * p.C, kWorkgroup), 1, 1},
                      {span_of(x), span_of(w), span_of(st), span_of(qs), span_of(slots)}, {span_of(out), span_of(st)});
}

Status record_gated_delta_net(Recorder& rec, const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(check_metadata(rec, g, n, in::kGdnQueryStart, in::kGdnSlots));
  const Tensor& q = g.input_tensor(n, in::kGdnQ);
  const Tensor& k = g.input_tensor(n, in::kGdnK);
  const Tensor& v = g.input_tensor(n, in::kGdnV);
  const Tensor& alpha = g.input_tensor(n, in::kGdnAlpha);
  const Tensor& beta = g.input_tensor(n, in::kGdnBeta);
  const Tensor& st = g.input_tensor(n, in::kGdnState);
  const Tensor& qs = g.input_tensor(n, in::kGdnQueryStart);
  const Tensor& slots = g.input_tensor(n, in::kGdnSlots);
  const Tensor& out = g.output_tensor(n);
  const auto& gp = n.param<GatedDeltaNetParams>();
  GdnParams p;
  p.q = ref_of(q);
  p.k = ref_of(k);
  p.v = ref_of(v);
  p.alpha = ref_of(alpha);
  p.beta = ref_of(beta);
  p.st = ref_of(st);
  std::vector<Span> reads = {span_of(q), span_of(k), span_of(v), span_of(alpha), span_of(beta), span_of(st), span_of(qs),
                             span_of(slots)};
  if (g.has_input(n, in::kGdnDecayRate)) {
    p.decay_rate = address_of(g.input_tensor(n, in::kGdnDecayRate));
    p.dt_bias = address_of(g.input_tensor(n, in::kGdnDtBias));
    reads.push_back(span_of(g.input_tensor(n, in::kGdnDecayRate)));
    reads.push_back(span_of(g.input_tensor(n, in::kGdnDtBias)));
  }
  p.query_start = address_of(qs);
  p.slots = address_of(slots);
  p.dst = address_of(out);
  p.S = uint32_t(slots.shape[0]);
  p.Hk = uint32_t(q.shape[1]);
  p.Hv = uint32_t(v.shape[1]);
  p.Dk = uint32_t(q.shape[2]);
  p.Dv = uint32_t(v.shape[2]);
  p.l2_norm = gp.l2_norm ? 1u : 0u;
  p.out_dtype = uint32_t(out.dtype);
  p.T = uint32_t(q.shape[0]);
  p.scale = gp.q_scale > 0.0f ? gp.q_scale : float(1.0 / std::sqrt(double(q.shape[2])));
  p.eps = gp.eps;
  p.n_slots = uint32_t(st.shape[0]);
  p.tiled_heads = gp.tiled_heads ? 1u : 0u;
  return rec.dispatch("gated_delta_net", {kWorkgroup}, p, {groups_for(int64_t(p.S) * p.Hv * p.Dv, kWorkgroup), 1, 1}, reads,
                      {span_of(out), span_of(st)});
}

}  // namespace tessera::vulkan
