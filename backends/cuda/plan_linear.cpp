// Planning matmul (with its int8 activations and the tensor-core tiles for prefill), matmul_id
// (sorting the (token, expert) pairs by expert, then the grouped matmul and the weighted sum),
// topk_route and lora (plan_node.h).
#include "backends/cuda/plan_node.h"

namespace tessera::gpu {

Status plan_matmul(NodePlan& p) {
  MatmulArgs a{p.in(in::kMatmulX), p.in(in::kMatmulW), p.in(in::kMatmulBias), p.output()};
  Launch l = p.launch();
  l.kind = KernelKind::kMatmul;
  l.weight = a.w.dtype;
  l.block = kMatmulWarps * 32;
  const int64_t gx = (a.w.shape[0] + kMatmulWarps - 1) / kMatmulWarps;
  const int64_t gy = (a.x.rows() + kMatmulRows - 1) / kMatmulRows;
  if (gy > kMaxGridY || gx > kMaxGridX) return p.fail("matmul too large for one launch");
  l.grid_x = uint32_t(gx);
  l.grid_y = uint32_t(gy);
  const int64_t K = a.x.cols(), M = a.x.rows();
  if (matmul_uses_q8(a.w.dtype, K) && M > 0) {
    if (M > kMaxGridX) return p.fail("too many rows for one launch");
    auto* xq = reinterpret_cast<Q8Run*>(p.scratch.reserve(size_t(M) * size_t(K / 16) * sizeof(Q8Run)));
    p.out.push_back(quantize_q8_launch(p.ni, a.x, xq));
    a.xq = xq;
    if (M >= kMmaMinRows) {  // prefill: tiles on the tensor cores
      l.kind = KernelKind::kMatmulMma;
      l.block = kMmaWarps * 32;
      l.grid_x = uint32_t((a.w.shape[0] + kMmaTile - 1) / kMmaTile);
      l.grid_y = uint32_t((M + kMmaTile - 1) / kMmaTile);
    }
  }
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

Status plan_matmul_id(NodePlan& p) {
  const View o = p.output();
  MatmulIdArgs a{
      p.in(in::kMatmulIdX),   p.in(in::kMatmulIdW), p.in(in::kMatmulIdIds), p.in(in::kMatmulIdWeights), o, p.err,
      p.in(in::kMatmulIdBias)};
  const int64_t E = a.w.shape[0], N = a.w.shape[1], K = a.w.cols(), T = a.ids.shape[0], k = a.ids.cols();
  const int64_t P = T * k, X = a.x.rows();
  const bool q8 = matmul_uses_q8(a.w.dtype, K) && X > 0;
  Launch l = p.launch();
  if (P == 0) {  // no pairs: with routing weights each token's sum over no slots is zero
    l.kind = KernelKind::kMoeWeightedSum;
    l.grid_x = a.weights.p ? uint32_t(T) : 0;
    l.args = MoeWeightedSumArgs{a.weights, o, nullptr};
    p.out.push_back(l);
    return OkStatus();
  }
  // Scratch: order [P] and offsets [E + 2] (int32), then the quantised x, then y [P, N].
  auto align16 = [](size_t b) { return (b + 15) / 16 * 16; };
  const size_t order_at = 0, offsets_at = align16(size_t(P) * 4);
  const size_t xq_at = align16(offsets_at + size_t(E + 2) * 4);
  const size_t y_at = align16(xq_at + (q8 ? size_t(X) * size_t(K / 16) * sizeof(Q8Run) : 0));
  const size_t total = y_at + (a.weights.p ? size_t(P) * size_t(N) * 4 : 0);
  uint8_t* base = p.scratch.reserve(total);
  auto at = [&](size_t off) { return base ? base + off : nullptr; };
  auto* order = reinterpret_cast<int32_t*>(at(order_at));
  auto* offsets = reinterpret_cast<int32_t*>(at(offsets_at));
  a.order = order;
  a.offsets = offsets;
  Launch ls = p.launch();
  ls.kind = KernelKind::kMoeSort;
  ls.block = 256;
  ls.args = MoeSortArgs{a.ids, E, order, offsets, p.err};
  p.out.push_back(ls);
  if (q8) {
    if (X > kMaxGridX) return p.fail("too many rows for one launch");
    auto* xq = reinterpret_cast<Q8Run*>(at(xq_at));
    p.out.push_back(quantize_q8_launch(p.ni, a.x, xq));
    a.xq = xq;
  }
  if (a.weights.p) a.y = reinterpret_cast<float*>(at(y_at));
  l.kind = KernelKind::kMatmulId;
  l.weight = a.w.dtype;
  l.block = kMatmulWarps * 32;
  const int64_t gx = (N + kMatmulWarps - 1) / kMatmulWarps;
  const int64_t gy = (P + kMatmulRows - 1) / kMatmulRows + E + 1;  // tiles of every group, at most
  if (gy > kMaxGridY || gx > kMaxGridX) return p.fail("matmul_id too large for one launch");
  l.grid_x = uint32_t(gx);
  l.grid_y = uint32_t(gy);
  l.args = a;
  p.out.push_back(l);
  if (a.weights.p) {
    Launch lw = p.launch();
    lw.kind = KernelKind::kMoeWeightedSum;
    lw.grid_x = uint32_t(T);
    lw.args = MoeWeightedSumArgs{a.weights, o, a.y};
    p.out.push_back(lw);
  }
  return OkStatus();
}

Status plan_topk_route(NodePlan& p) {
  const auto& prm = p.n.param<TopkRouteParams>();
  TopkRouteArgs a{};
  a.logits = p.in(in::kRouteLogits);
  a.bias = p.in(in::kRouteBias);
  a.ids = p.output(0);
  a.weights = p.output(1);
  if (a.logits.cols() > kMaxRouteExperts) return p.fail("more than " + std::to_string(kMaxRouteExperts) + " experts");
  if (prm.k > 64 || prm.n_groups > 64) return p.fail("k or n_groups above 64");
  a.p = prm;
  Launch l = p.launch();
  l.kind = KernelKind::kTopkRoute;
  l.block = 64;
  l.grid_x = uint32_t((a.logits.rows() + 63) / 64);
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

Status plan_lora(NodePlan& p) {
  LoraArgs a{};
  a.x = p.in(in::kLoraX);
  a.base = p.in(in::kLoraBase);
  a.a = p.in(in::kLoraA);
  a.b = p.in(in::kLoraB);
  a.ranks = p.in(in::kLoraRanks);
  a.scales = p.in(in::kLoraScales);
  a.seg_start = p.in(in::kLoraSegStart);
  a.seg_slot = p.in(in::kLoraSegSlot);
  a.out = p.output();
  a.err = p.err;
  Launch l = p.launch();
  l.kind = KernelKind::kLora;
  l.block = 128;
  TS_RETURN_IF_ERROR(p.rows_grid(a.x.shape[0], l));
  l.args = a;
  p.out.push_back(l);
  return OkStatus();
}

}  // namespace tessera::gpu
