#version 460
// topk_route: router logits -> (expert ids, weights). One workgroup per token: threads score the
// experts in parallel, then invocation 0 selects (grouped top-k, ties to the lower expert index,
// exactly as core/reference/moe.cpp) - E is at most a few hundred, the selection is tiny.
#include "types.glsl"

layout(local_size_x_id = 0) in;
#define MAX_E 1024u

struct TopkParams {
  TensorRef logits;
  uint64_t bias, ids_out, w_out;
  uint T, E, k, sigmoid;
  uint renormalize, n_groups, topk_groups, has_bias;
  float weight_scale;
  uint pad;
};
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer ParamsRef { TopkParams p; };

shared float s_score[MAX_E];
shared float s_sel[MAX_E];

void main() {
  const TopkParams P = ParamsRef(pc.params_addr).p;
  const float NEG_INF = -1.0 / 0.0;
  for (uint t = gl_WorkGroupID.x; t < P.T; t += gl_NumWorkGroups.x) {
    for (uint e = gl_LocalInvocationID.x; e < P.E; e += gl_WorkGroupSize.x) s_score[e] = load_elem(P.logits, t, e);
    barrier();
    if (gl_LocalInvocationID.x == 0) {
      if (P.sigmoid == 0u) {
        float mx = NEG_INF, sum = 0.0;
        for (uint e = 0; e < P.E; ++e) mx = max(mx, s_score[e]);
        for (uint e = 0; e < P.E; ++e) { s_score[e] = exp(s_score[e] - mx); sum += s_score[e]; }
        for (uint e = 0; e < P.E; ++e) s_score[e] /= sum;
      } else {
        for (uint e = 0; e < P.E; ++e) s_score[e] = 1.0 / (1.0 + exp(-s_score[e]));
      }
      for (uint e = 0; e < P.E; ++e) s_sel[e] = s_score[e] + (P.has_bias != 0u ? F32Ref(P.bias + uint64_t(e) * 4u).v : 0.0);
      if (P.n_groups > 1u) {  // keep the topk_groups groups with the best expert, mask the rest
        const uint gsize = P.E / P.n_groups;
        uint kept = 0u;  // bit g set: group g kept (n_groups <= 32, checked on the host)
        for (uint i = 0; i < P.topk_groups; ++i) {
          float best = NEG_INF;
          uint best_g = 0u;
          bool found = false;
          for (uint g = 0; g < P.n_groups; ++g) {
            if ((kept & (1u << g)) != 0u) continue;
            float gmax = NEG_INF;
            for (uint e = g * gsize; e < (g + 1u) * gsize; ++e) gmax = max(gmax, s_sel[e]);
            if (!found || gmax > best) { best = gmax; best_g = g; found = true; }
          }
          kept |= 1u << best_g;
        }
        for (uint e = 0; e < P.E; ++e)
          if ((kept & (1u << (e / gsize))) == 0u) s_sel[e] = NEG_INF;
      }
      float sum = 0.0;
      for (uint j = 0; j < P.k; ++j) {  // repeated arg-max; taken experts are marked with NaN
        uint best_e = 0u;
        bool found = false;
        for (uint e = 0; e < P.E; ++e) {
          if (isnan(s_sel[e])) continue;
          if (!found || s_sel[e] > s_sel[best_e]) { best_e = e; found = true; }
        }
        s_sel[best_e] = 0.0 / 0.0;
        I32Ref(P.ids_out + uint64_t(t * P.k + j) * 4u).v = int(best_e);
        F32Ref(P.w_out + uint64_t(t * P.k + j) * 4u).v = s_score[best_e];
        sum += s_score[best_e];
      }
      for (uint j = 0; j < P.k; ++j) {
        const uint64_t a = P.w_out + uint64_t(t * P.k + j) * 4u;
        float w = F32Ref(a).v;
        if (P.renormalize != 0u && sum > 0.0) w /= sum;
        F32Ref(a).v = w * P.weight_scale;
      }
    }
    barrier();
  }
}
