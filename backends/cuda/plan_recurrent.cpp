// Planning the recurrent layers' ops, ssm_conv and gated_delta_net: one thread per (sequence,
// channel) or (sequence, value head, value dim), each sequence's state row named by its slot
// (plan_node.h).
#include <cmath>

#include "backends/cuda/plan_node.h"

namespace tessera::gpu {

Status plan_ssm_conv(NodePlan& p) {
  SsmConvArgs a{};
  a.x = p.in(in::kConvX);
  a.w = p.in(in::kConvW);
  a.state = p.in(in::kConvState);
  a.query_start = p.in(in::kConvQueryStart);
  a.slots = p.in(in::kConvSlots);
  a.out = p.output();
  a.n_seqs = a.slots.cols();
  a.silu = p.n.param<SsmConvParams>().silu ? 1 : 0;
  a.err = p.err;
  if (a.w.cols() > kMaxConvTaps) return p.fail("more than " + std::to_string(kMaxConvTaps) + " conv taps");
  Launch l = p.launch();
  l.kind = KernelKind::kSsmConv;
  l.block = 128;
  const int64_t blocks = (a.n_seqs * a.x.cols() + 127) / 128;
  if (blocks > kMaxGridX) return p.fail("too many channels for one launch");
  l.grid_x = uint32_t(blocks);
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

Status plan_gated_delta_net(NodePlan& p) {
  const auto& prm = p.n.param<GatedDeltaNetParams>();
  GatedDeltaNetArgs a{};
  a.q = p.in(in::kGdnQ);
  a.k = p.in(in::kGdnK);
  a.v = p.in(in::kGdnV);
  a.alpha = p.in(in::kGdnAlpha);
  a.beta = p.in(in::kGdnBeta);
  a.decay_rate = p.in(in::kGdnDecayRate);
  a.dt_bias = p.in(in::kGdnDtBias);
  a.state = p.in(in::kGdnState);
  a.query_start = p.in(in::kGdnQueryStart);
  a.slots = p.in(in::kGdnSlots);
  a.out = p.output();
  a.n_seqs = a.slots.cols();
  a.scale = prm.q_scale > 0.0f ? prm.q_scale : float(1.0 / std::sqrt(double(a.q.shape[2])));
  a.eps = prm.eps;
  a.l2_norm = prm.l2_norm ? 1 : 0;
  a.tiled_heads = prm.tiled_heads ? 1 : 0;
  a.err = p.err;
  Launch l = p.launch();
  l.kind = KernelKind::kGatedDeltaNet;
  l.block = 128;
  const int64_t blocks = (a.n_seqs * a.v.shape[1] * a.v.shape[2] + 127) / 128;
  if (blocks > kMaxGridX) return p.fail("too many heads for one launch");
  l.grid_x = uint32_t(blocks);
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

}  // namespace tessera::gpu
