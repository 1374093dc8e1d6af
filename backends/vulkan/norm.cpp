// rms_norm, layer_norm and softmax -> norm.comp: one workgroup per row.
#include "backends/vulkan/recorder.h"

namespace tessera::vulkan {

Status record_norm(Recorder& rec, const Graph& g, const Node& n) {
  constexpr uint32_t kWorkgroup = 128;
  const Tensor& x = g.input_tensor(n, 0);
  const Tensor& out = g.output_tensor(n);
  NormParams p;
  p.x = ref_of(x);
  p.w = p.x;
  p.b = p.x;
  p.dst = address_of(out);
  p.rows = uint32_t(x.rows());
  p.cols = uint32_t(x.cols());
  p.out_dtype = uint32_t(out.dtype);
  std::vector<Span> reads = {span_of(x)};
  uint32_t op = 0;
  if (n.op == OpKind::kRmsNorm) {
    p.eps_or_scale = n.param<RmsNormParams>().eps;
    if (g.has_input(n, in::kRmsNormW)) {
      const Tensor& w = g.input_tensor(n, in::kRmsNormW);
      p.w = ref_of(w);
      p.has_w = 1;
      reads.push_back(span_of(w));
    }
  } else if (n.op == OpKind::kLayerNorm) {
    op = 2;
    p.eps_or_scale = n.param<LayerNormParams>().eps;
    if (g.has_input(n, in::kLayerNormW)) {
      const Tensor& w = g.input_tensor(n, in::kLayerNormW);
      p.w = ref_of(w);
      p.has_w = 1;
      reads.push_back(span_of(w));
    }
    if (g.has_input(n, in::kLayerNormB)) {
      const Tensor& b = g.input_tensor(n, in::kLayerNormB);
      p.b = ref_of(b);
      p.has_b = 1;
      reads.push_back(span_of(b));
    }
  } else {
    op = 1;
    p.eps_or_scale = n.param<SoftmaxParams>().scale;
  }
  return rec.dispatch("norm", {kWorkgroup, op}, p, {groups_for(x.rows(), 1), 1, 1}, reads, {span_of(out)});
}

}  // namespace tessera::vulkan
