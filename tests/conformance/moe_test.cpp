// Conformance cases for topk_route (softmax/sigmoid scoring, renormalisation, grouped top-k,
// selection bias; k = 1, 2, 8) and for an MoE block routed by it.
#include "tests/conformance/conformance_test.h"

namespace tessera::conformance {

std::vector<Case> moe_cases() {
  std::vector<Case> cases;
  uint64_t seed = 4000;
  using V = std::vector<ValueId>;
  struct R { const char* name; int64_t T, E; TopkRouteParams p; bool bias; };
  auto params = [](int k, RouteScoring s, bool renorm, int groups, int keep) {
    TopkRouteParams p;
    p.k = k; p.scoring = s; p.renormalize = renorm; p.n_groups = groups; p.topk_groups = keep;
    return p;
  };
  const std::vector<R> routes = {
      {"mixtral k2 softmax renorm", 7, 8, params(2, RouteScoring::kSoftmax, true, 1, 1), false},
      {"qwen2moe k4 softmax", 5, 60, params(4, RouteScoring::kSoftmax, false, 1, 1), false},
      {"k1", 3, 4, params(1, RouteScoring::kSoftmax, true, 1, 1), false},
      {"k8 of 64 sigmoid grouped bias", 4, 64, params(8, RouteScoring::kSigmoid, true, 8, 4), true},
      {"k8 of 8", 2, 8, params(8, RouteScoring::kSoftmax, true, 1, 1), false},
  };
  for (DType a : activation_dtypes()) {
    for (const R& r : routes)
      cases.push_back({std::string("topk_route/a=") + dtype_name(a) + "/" + r.name, OpKind::kTopkRoute, a, a, ++seed,
                       [=](CaseContext& c) {
                         const ValueId logits = c.input(a, {r.T, r.E}, -4.0f, 4.0f);
                         const ValueId bias = r.bias ? c.input(DType::kF32, {r.E}, -0.1f, 0.1f) : kNoValue;
                         auto [ids, w] = c.graph().topk_route(logits, r.p, bias);
                         return V{ids, w};
                       }});
  }
  // An MoE FFN block: route, gate/up per expert, swiglu, down with the weighted sum.
  for (DType w : all_weight_dtypes())
    cases.push_back({std::string("moe block/w=") + dtype_name(w), OpKind::kMatmulId, DType::kF32, w, ++seed,
                     [=](CaseContext& c) {
                       // D and F whole blocks of every format (256 for the K-quants).
                       const int64_t T = 6, D = fit_k(w, 64), F = fit_k(w, 96), E = 4;
                       Graph& g = c.graph();
                       const ValueId x = c.input(DType::kF32, {T, D});
                       const ValueId router = c.input(DType::kF32, {E, D});
                       auto [ids, wts] = g.topk_route(g.matmul(x, router), params(2, RouteScoring::kSoftmax, true, 1, 1));
                       const ValueId gate = g.matmul_id(x, c.input(w, {E, F, D}), ids);
                       const ValueId up = g.matmul_id(x, c.input(w, {E, F, D}), ids);
                       return V{g.matmul_id(g.swiglu(gate, up), c.input(w, {E, D, F}), ids, wts)};
                     },
                     // Two rounds of int8 activation quantisation, the second on swiglu outputs whose
                     // heavy tails widen the block steps: measured up to 1.2e-4 on the CPU (every
                     // int8-activation format), so 2.5x the single-matmul tolerance.
                     2.5 * tolerance_for(DType::kF32, w)});
  // gpt-oss's MoE block: a router with a bias, softmax over the top 4 logits, gate/up/down with
  // per-expert biases and the clamped SwiGLU between them (its clamps reached: gate/up up to ~+-12).
  for (DType w : all_weight_dtypes())
    cases.push_back({std::string("gpt-oss moe block/w=") + dtype_name(w), OpKind::kMatmulId, DType::kF32, w, ++seed,
                     [=](CaseContext& c) {
                       const int64_t T = 5, D = fit_k(w, 64), F = fit_k(w, 64), E = 8;
                       Graph& g = c.graph();
                       const ValueId x = c.input(DType::kF32, {T, D});
                       const ValueId logits = g.matmul(x, c.input(DType::kF32, {E, D}), c.input(DType::kF32, {E}));
                       auto [ids, wts] = g.topk_route(logits, params(4, RouteScoring::kSoftmax, true, 1, 1));
                       const ValueId gate = g.matmul_id(x, c.input(w, {E, F, D}, -2.0f, 2.0f), ids, kNoValue,
                                                        c.input(DType::kF32, {E, F}, -4.0f, 4.0f));
                       const ValueId up = g.matmul_id(x, c.input(w, {E, F, D}, -2.0f, 2.0f), ids, kNoValue,
                                                      c.input(DType::kF32, {E, F}, -4.0f, 4.0f));
                       const ValueId h = g.glu(gate, up, GluParams{GluKind::kSwigluOai, 1.702f, 7.0f});
                       return V{g.matmul_id(h, c.input(w, {E, D, F}), ids, wts, c.input(DType::kF32, {E, D}))};
                     },
                     2.5 * tolerance_for(DType::kF32, w)});
  // Gemma 4's per-expert scales: gathered by embed through a reshaped view of the routed ids (ids
  // computed in the graph, which a backend must not read before they exist).
  cases.push_back(
      {"embed/ids viewed from topk_route", OpKind::kEmbed, DType::kF32, DType::kF32, ++seed, [=](CaseContext& c) {
         const int64_t T = 5, E = 8, k = 2;
         Graph& g = c.graph();
         TopkRouteParams p;
         p.k = int(k);
         auto [ids, w] = g.topk_route(c.input(DType::kF32, {T, E}, -4.0f, 4.0f), p);
         const ValueId scale = g.embed(g.reshape(c.input(DType::kF32, {E}), {E, 1}), g.reshape(ids, {T * k}));
         return V{g.mul(w, g.reshape(scale, {T, k}))};
       }});
  return cases;
}

TESSERA_CONFORMANCE_SUITE(Moe, moe_cases);

}  // namespace tessera::conformance
