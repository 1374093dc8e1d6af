// topk_route -> topk.comp: one workgroup per token.
#include "backends/vulkan/recorder.h"

namespace tessera::vulkan {

Status record_topk_route(Recorder& rec, const Graph& g, const Node& n) {
  constexpr uint32_t kWorkgroup = 64;
  const Tensor& logits = g.input_tensor(n, in::kRouteLogits);
  const Tensor& ids = g.output_tensor(n, 0);
  const Tensor& weights = g.output_tensor(n, 1);
  const auto& rp = n.param<TopkRouteParams>();
  const int64_t E = logits.shape[1];
  if (E > 1024) return Unimplemented("vulkan: topk_route over " + std::to_string(E) + " experts (at most 1024)");
  if (rp.n_groups > 32) return Unimplemented("vulkan: topk_route with " + std::to_string(rp.n_groups) + " groups (at most 32)");
  TopkParams p;
  p.logits = ref_of(logits);
  p.ids_out = address_of(ids);
  p.w_out = address_of(weights);
  p.T = uint32_t(logits.shape[0]);
  p.E = uint32_t(E);
  p.k = uint32_t(rp.k);
  p.sigmoid = rp.scoring == RouteScoring::kSigmoid;
  p.renormalize = rp.renormalize;
  p.n_groups = uint32_t(rp.n_groups);
  p.topk_groups = uint32_t(rp.topk_groups);
  p.weight_scale = rp.weight_scale;
  std::vector<Span> reads = {span_of(logits)};
  if (g.has_input(n, in::kRouteBias)) {
    const Tensor& b = g.input_tensor(n, in::kRouteBias);
    if (!b.is_contiguous()) return Unimplemented("vulkan: topk_route bias must be contiguous");
    p.bias = address_of(b);
    p.has_bias = 1;
    reads.push_back(span_of(b));
  }
  return rec.dispatch("topk", {kWorkgroup}, p, {groups_for(p.T, 1), 1, 1}, reads, {span_of(ids), span_of(weights)});
}

}  // namespace tessera::vulkan
