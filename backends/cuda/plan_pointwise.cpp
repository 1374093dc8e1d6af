// Planning elementwise ops, norms, softmax, rope and embed (plan_node.h).
#include "backends/cuda/plan_node.h"

namespace tessera::gpu {

Status plan_pointwise(NodePlan& p) {
  const Node& n = p.n;
  PointwiseArgs a{};
  a.a = p.in(0);
  a.out = p.output();
  a.scale = 1.0f;
  switch (n.op) {
    case OpKind::kAdd:
      a.op = Pointwise::kAdd;
      a.b = p.in(1);
      break;
    case OpKind::kMul:
      a.op = Pointwise::kMul;
      a.b = p.in(1);
      break;
    case OpKind::kScale:
      a.op = Pointwise::kScale;
      a.scale = n.param<ScaleParams>().scale;
      a.softcap = n.param<ScaleParams>().softcap;
      break;
    case OpKind::kGlu:
      switch (n.param<GluParams>().kind) {
        case GluKind::kSilu:
          a.op = Pointwise::kSiluGlu;
          break;
        case GluKind::kGelu:
          a.op = Pointwise::kGeluGlu;
          break;
        case GluKind::kSigmoid:
          a.op = Pointwise::kSigmoidGlu;
          break;
        case GluKind::kSwigluOai:
          a.op = Pointwise::kSwigluOai;
          a.scale = n.param<GluParams>().alpha;
          a.limit = n.param<GluParams>().limit;
          break;
      }
      a.b = p.in(1);
      break;
    case OpKind::kGelu:
      a.op = Pointwise::kGelu;
      break;
    default:
      a.op = Pointwise::kConvert;
      break;  // cast, copy
  }
  Launch l = p.launch();
  l.kind = KernelKind::kPointwise;
  TS_RETURN_IF_ERROR(p.rows_grid(a.out.rows(), l));
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

Status plan_norm(NodePlan& p) {
  NormArgs a{};
  a.layer = p.n.op == OpKind::kLayerNorm;
  a.x = p.in(0);
  a.w = p.in(1);
  if (a.layer) {
    a.b = p.in(in::kLayerNormB);
    a.eps = p.n.param<LayerNormParams>().eps;
  } else {
    a.eps = p.n.param<RmsNormParams>().eps;
  }
  a.out = p.output();
  Launch l = p.launch();
  l.kind = KernelKind::kNorm;
  TS_RETURN_IF_ERROR(p.rows_grid(a.out.rows(), l));
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

Status plan_softmax(NodePlan& p) {
  const View o = p.output();
  Launch l = p.launch();
  l.kind = KernelKind::kSoftmax;
  l.args = SoftmaxArgs{p.in(0), o, p.n.param<SoftmaxParams>().scale};
  TS_RETURN_IF_ERROR(p.rows_grid(o.rows(), l));
  p.out.push_back(l);
  return OkStatus();
}

Status plan_rope(NodePlan& p) {
  RopeArgs a{};
  a.x = p.in(in::kRopeX);
  a.pos = p.in(in::kRopePos);
  a.freq = p.in(in::kRopeFreqFactors);
  a.out = p.output();
  if (a.x.rank != 3) return p.fail("rope takes [T, H, D]");
  a.p = p.n.param<RopeParams>();
  Launch l = p.launch();
  l.kind = KernelKind::kRope;
  l.block = 64;
  TS_RETURN_IF_ERROR(p.rows_grid(a.x.rows(), l));
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

Status plan_embed(NodePlan& p) {
  EmbedArgs a{p.in(in::kEmbedWeight), p.in(in::kEmbedIds), p.output(), p.err};
  Launch l = p.launch();
  l.kind = KernelKind::kEmbed;
  l.weight = a.w.dtype;
  TS_RETURN_IF_ERROR(p.rows_grid(a.ids.shape[0], l));
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

}  // namespace tessera::gpu
