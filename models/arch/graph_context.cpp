#include "models/arch/graph_context.h"

#include <string>

#include "models/lora/lora.h"

namespace tessera {

GraphContext::GraphContext(Graph& graph, const ModelConfig& cfg, const StepTensors& step, const KvCache& cache,
                           const StepOptions& options)
    : g(graph), c(cfg), in(step), kv(cache), opts(options) {
  tokens = g.input(in.tokens);
  positions = g.input(in.positions);
  slot_mapping = g.input(in.slot_mapping);
  query_start = g.input(in.query_start);
  seq_lens = g.input(in.seq_lens);
  block_tables = g.input(in.block_tables);
  n_tokens = in.tokens.shape[0];
  if (in.state_slots.buffer) state_slots = g.input(in.state_slots);
  if (opts.lora && in.lora_slots.buffer) lora_slots = g.input(in.lora_slots);
  if (in.window_block_tables.buffer) {
    window_slot_mapping = g.input(in.window_slot_mapping);
    window_block_tables = g.input(in.window_block_tables);
  }
}

ValueId GraphContext::linear(ValueId x, const WeightTensor& W, ValueId bias) {
  ValueId y = g.matmul(x, g.input(W), W.partial_sum && opts.tp_rank != 0 ? kNoValue : bias);
  if (W.out_scale != 1.0f) y = g.scale(y, W.out_scale);
  const LoraSet::Module* m = lora_slots != kNoValue ? opts.lora->find(&W) : nullptr;
  if (!m) return W.partial_sum ? g.all_reduce(y) : y;
  if (g.tensor(x).rank != 2 || g.tensor(x).shape[0] != n_tokens) {
    fail(Unimplemented("LoRA on a projection of " + g.tensor(x).shape_string() +
                       " rows (the adapter's segments are the step's " + std::to_string(n_tokens) + " token rows)"));
    return y;
  }
  return g.lora({x, y, g.input(m->a), g.input(m->b), g.input(m->ranks), g.input(m->scales), query_start, lora_slots});
}

ValueId GraphContext::embed_tokens(const WeightTensor& table, float scale) {
  const ValueId x = g.embed(g.input(table), tokens, in.act);  // [T, D]
  const float s = scale * table.out_scale;                    // an NVFP4 embedding's tensor scale
  return s == 1.0f ? x : g.scale(x, s);
}

ValueId GraphContext::attention(const AttentionWeights& a, ValueId h, int layer, const RopeParams& rope,
                                ValueId freq_factors, const AttentionParams& ap, ValueId out_bias) {
  const int64_t T = n_tokens, Dh = c.head_dim;
  ValueId q = g.reshape(linear(h, a.wq, optional(a.bq)), {T, c.n_heads, Dh});
  ValueId k = g.reshape(linear(h, a.wk, optional(a.bk)), {T, c.n_kv_heads, Dh});
  ValueId v = g.reshape(linear(h, a.wv, optional(a.bv)), {T, c.n_kv_heads, Dh});
  if (c.qk_norm == QkNorm::kPerHead) {
    q = g.rms_norm(q, g.input(a.q_norm), c.rms_eps);
    k = g.rms_norm(k, g.input(a.k_norm), c.rms_eps);
  } else if (c.qk_norm == QkNorm::kFull) {
    q = g.reshape(g.rms_norm(g.reshape(q, {T, int64_t(c.n_heads) * Dh}), g.input(a.q_norm), c.rms_eps), {T, c.n_heads, Dh});
    k = g.reshape(g.rms_norm(g.reshape(k, {T, int64_t(c.n_kv_heads) * Dh}), g.input(a.k_norm), c.rms_eps), {T, c.n_kv_heads, Dh});
  }
  if (rope.n_dims > 0) {
    q = g.rope(q, positions, rope, freq_factors);
    k = g.rope(k, positions, rope, freq_factors);
  }
  ValueId o = paged_attention(q, k, v, layer, ap, optional(a.sinks));
  o = g.reshape(o, {T, int64_t(c.n_heads) * Dh});
  return linear(o, a.wo, out_bias);
}

ValueId GraphContext::recurrent_state(int layer, const char* name) {
  const RecurrentStatePool* states = kv.states();
  const Tensor* t = states ? states->find(layer, name) : nullptr;
  if (!t || state_slots == kNoValue) {
    fail(Internal("layer " + std::to_string(layer) + " is recurrent but the KV cache has no state '" + name +
                  "' for it or the step no state slots (create the cache with Model::create_kv_cache)"));
    return kNoValue;
  }
  return g.input(*t);
}

ValueId GraphContext::paged_attention(ValueId q, ValueId k, ValueId v, int layer, const AttentionParams& ap,
                                      ValueId sinks) {
  const bool windowed = kv.in_window(layer);
  if (windowed && (window_block_tables == kNoValue || ap.sliding_window <= 0 || ap.sliding_window > kv.config().window)) {
    fail(Internal("layer " + std::to_string(layer) + " is in the KV cache's window group (window " +
                  std::to_string(kv.config().window) + ") but attends with window " + std::to_string(ap.sliding_window) +
                  (window_block_tables == kNoValue ? " and the step has no window tables" : "")));
    return kNoValue;
  }
  return g.attention(
      {q, k, v, g.input(kv.k(layer)), g.input(kv.v(layer)), windowed ? window_slot_mapping : slot_mapping, query_start,
       seq_lens, windowed ? window_block_tables : block_tables, sinks},
      ap);
}

ValueId GraphContext::glu_ffn(const GluFfnWeights& f, ValueId h, Glu act) {
  const ValueId gate = linear(h, f.gate), up = linear(h, f.up);
  return linear(act == Glu::kSwiGlu ? g.swiglu(gate, up) : g.geglu(gate, up), f.down);
}

// A shared expert (qwen2moe) is one more "expert" that every token uses, weighted by
// sigmoid(x . shexp_gate): topk_route over a single logit with sigmoid scoring gives exactly that
// weight (and expert id 0), so no extra op is needed.
ValueId GraphContext::moe_ffn(const MoeWeights& m, ValueId h, const GluParams& act) {
  TopkRouteParams rp;
  rp.k = c.n_experts_used;
  rp.scoring = RouteScoring::kSoftmax;
  rp.renormalize = c.expert_weights_norm;
  auto [ids, weights] = g.topk_route(linear(h, m.router, optional(m.router_b)), rp);
  if (opts.expert_stats) {
    g.mark_output(ids);
    route_ids.push_back(ids);
  }
  const ValueId up = g.matmul_id(h, g.input(m.up_exps), ids, kNoValue, optional(m.up_exps_b));
  const ValueId gate = g.matmul_id(h, g.input(m.gate_exps), ids, kNoValue, optional(m.gate_exps_b));
  // Tensor parallelism: each rank holds every expert's slice of rows, so the weighted sum below
  // (routed and shared) is a partial sum, all-reduced once at the end; the bias joins on rank 0.
  const bool partial = m.down_exps.partial_sum;
  const ValueId down_b = partial && opts.tp_rank != 0 ? kNoValue : optional(m.down_exps_b);
  ValueId y = g.matmul_id(g.glu(gate, up, act), g.input(m.down_exps), ids, weights, down_b);
  if (c.n_ff_shexp > 0) {
    TopkRouteParams sp;
    sp.k = 1;
    sp.scoring = RouteScoring::kSigmoid;
    sp.renormalize = false;
    auto [sid, sw] = g.topk_route(linear(h, m.shexp_gate), sp);
    const ValueId sh = g.swiglu(linear(h, m.gate_shexp), linear(h, m.up_shexp));
    const ValueId down = g.input(m.down_shexp);
    const Tensor& dt = g.tensor(down);
    const ValueId down3 = g.view(down, {1, dt.shape[0], dt.shape[1]}, {dt.shape[0] * dt.stride[0], dt.stride[0], dt.stride[1]}, 0);
    const ValueId ysh = g.matmul_id(sh, down3, sid, sw);
    y = g.add(y, m.down_shexp.out_scale == 1.0f ? ysh : g.scale(ysh, m.down_shexp.out_scale));
  }
  return partial ? g.all_reduce(y) : y;
}

ValueId GraphContext::decoder_output(const ArchWeights& w, ValueId x) {
  if (opts.pooled) {
    hidden = g.rms_norm(x, g.input(w.output_norm), c.rms_eps);
    g.mark_output(hidden);
  }
  // Only the rows that sample need the (large) output head.
  x = g.embed(x, g.input(in.logit_rows), DType::kF32);
  x = g.rms_norm(x, g.input(w.output_norm), c.rms_eps);
  ValueId logits = linear(x, w.head(c));
  if (c.final_softcap > 0) logits = g.scale(logits, 1.0f, c.final_softcap);
  g.mark_output(logits);
  return logits;
}

}  // namespace tessera
