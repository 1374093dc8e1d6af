// The Gemma 4 family graph builder (text decoder; GGUF architecture "gemma4"; docs/gemma4.md).
// Gemma 3's sandwich-norm decoder (embeddings times sqrt(n_embd), RMSNorm before and after each
// block, GeGLU with tanh GELU, tied output head) with, layer by layer from the GGUF:
//   * sliding-window and global layers (attention.sliding_window_pattern, one bool per layer)
//     that differ in head size (key_length_swa vs key_length), KV heads (head_count_kv may be a
//     per-layer array) and RoPE: the window layers rotate rope.dimension_count_swa dims by
//     rope.freq_base_swa, the global ones by rope.freq_base over the whole head with the
//     rope_freqs tensor's divisors (1, or 1e30 for the dims "proportional" RoPE leaves alone);
//   * per-head RMSNorm of q and k (with weights) and of v (without), and attention scale 1;
//   * KV sharing (attention.shared_kv_layers): the last layers compute only q and attend over the
//     K/V of the last earlier layer of their kind;
//   * global layers whose values are their keys (no attn_v: attention_k_eq_v);
//   * per-layer embeddings (embedding_length_per_layer_input > 0): each layer adds
//     post_norm(proj(gelu(inp_gate(x)) * e_l)), e_l mixing a token table with a projection of
//     the input embeddings;
//   * a per-layer output scale (layer_output_scale, read into the config) and the final logit
//     softcap.
// The GGUF stores the norm weights as HF has them (Gemma 4's RMSNorm multiplies by w, not 1 + w).
// The MoE variant (26B-A4B, expert_count > 0) adds routed experts beside every layer's dense FFN:
// post_ffw_norm_1(ffn(x)) + post_ffw_norm_2(experts(pre_ffw_norm_2(x))), routed by a softmax over
// ffn_gate_inp(rms_norm(x) * ffn_gate_inp.scale / sqrt(D)), top-k renormalised, each chosen
// weight times its expert's ffn_down_exps.scale; GeGLU experts from ffn_gate_up_exps [E, 2F, D].
#include <cmath>
#include <optional>

#include "models/arch/architecture.h"
#include "models/arch/blocks.h"
#include "models/arch/gguf_keys.h"
#include "models/arch/graph_context.h"
#include "models/gguf/gguf.h"
#include "quant/dtype.h"

namespace tessera {

namespace {

struct Gemma4Layer {
  WeightTensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm;
  AttentionWeights attn;
  GluFfnWeights ffn;
  // MoE: the router's input scale, fused gate/up experts, each expert's output scale, the norms.
  WeightTensor router, router_scale, gate_up_exps, down_exps, expert_scale, pre_ffn_norm_2, post_ffn_norm_1,
      post_ffn_norm_2;
  WeightTensor ple_gate, ple_proj, ple_post_norm;  // per-layer embeddings
};
struct Gemma4Weights : ArchWeights {
  std::vector<Gemma4Layer> layers;
  WeightTensor rope_freqs;  // the global layers' divisors
  WeightTensor ple_table, ple_model_proj, ple_proj_norm;
};

// A key that is one integer for every layer or an array of one per layer.
Result<std::vector<int>> per_layer_ints(const gguf::File& f, const std::string& key, int n_layers,
                                        std::optional<int64_t> fallback) {
  const gguf::Value* v = f.find(key);
  if (v && v->type == gguf::ValueType::kArray) {
    std::vector<int64_t> a;
    TS_ASSIGN_OR_RETURN(a, f.get_int_array(key));
    if (a.size() != size_t(n_layers))
      return InvalidArgument(f.path() + ": " + key + " has " + std::to_string(a.size()) + " entries for " +
                             std::to_string(n_layers) + " layers");
    std::vector<int> out;
    for (int64_t x : a) {
      if (x <= 0 || x > (int64_t(1) << 30))
        return InvalidArgument(f.path() + ": " + key + " entry " + std::to_string(x) + " out of range");
      out.push_back(int(x));
    }
    return out;
  }
  int x = 0;
  TS_ASSIGN_OR_RETURN(x, gguf_int32_key(f, key, fallback));
  if (x <= 0) return InvalidArgument(f.path() + ": " + key + " must be positive, got " + std::to_string(x));
  return std::vector<int>(size_t(n_layers), x);
}

// The scalar blk.N.layer_output_scale.weight (HF's layer_scalar), 1 where the file has none.
Result<float> layer_scalar(const gguf::File& f, int layer) {
  const std::string name = "blk." + std::to_string(layer) + ".layer_output_scale.weight";
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return 1.0f;
  if (t->elements() != 1 || (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16))
    return InvalidArgument(f.path() + ": tensor '" + name + "' must be one f32/f16/bf16 value");
  float v = 0;
  dtype_traits(t->dtype).dequantize_row(f.tensor_data(*t), &v, 1);
  if (!std::isfinite(v)) return InvalidArgument(f.path() + ": tensor '" + name + "' is not finite");
  return v;
}

// The head widths of the global and sliding layers (|key_full|, |key_swa|: keys as wide as
// values), their rotary dims and bases, the norm epsilon and the final logit softcap.
Status read_heads_and_rope(const gguf::File& f, const std::string& a, ModelConfig* c, int* key_full, int* key_swa) {
  int v_full = 0, v_swa = 0, rot_full = 0, rot_swa = 0;
  int& head_full = *key_full;
  int& head_swa = *key_swa;
  TS_ASSIGN_OR_RETURN(head_full, gguf_int32_key(f, a + "attention.key_length"));
  TS_ASSIGN_OR_RETURN(v_full, gguf_int32_key(f, a + "attention.value_length", head_full));
  TS_ASSIGN_OR_RETURN(head_swa, gguf_int32_key(f, a + "attention.key_length_swa", head_full));
  TS_ASSIGN_OR_RETURN(v_swa, gguf_int32_key(f, a + "attention.value_length_swa", head_swa));
  if (head_full <= 0 || head_swa <= 0 || head_full % 2 || head_swa % 2 || v_full != head_full || v_swa != head_swa)
    return InvalidArgument(f.path() + ": " + a + "attention.key_length " + std::to_string(head_full) +
                           " / value_length " + std::to_string(v_full) + " and key_length_swa " +
                           std::to_string(head_swa) + " / value_length_swa " + std::to_string(v_swa) +
                           " must be positive, even and keys as wide as values");
  TS_ASSIGN_OR_RETURN(rot_full, gguf_int32_key(f, a + "rope.dimension_count", head_full));
  TS_ASSIGN_OR_RETURN(rot_swa, gguf_int32_key(f, a + "rope.dimension_count_swa", head_swa));
  if (rot_full <= 0 || rot_full > head_full || rot_full % 2 || rot_swa <= 0 || rot_swa > head_swa || rot_swa % 2)
    return InvalidArgument(f.path() + ": " + a + "rope.dimension_count " + std::to_string(rot_full) +
                           " and rope.dimension_count_swa " + std::to_string(rot_swa) +
                           " must be even and within their heads (" + std::to_string(head_full) + ", " +
                           std::to_string(head_swa) + ")");
  double d = 0;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-6));
  c->rms_eps = float(d);
  if (!(c->rms_eps > 0.0f))
    return InvalidArgument(f.path() + ": " + a + "attention.layer_norm_rms_epsilon must be positive");
  c->rope.mode = RopeMode::kNeox;  // HF's rotate_half; the converter leaves q/k rows as they are
  c->rope.n_dims = rot_full;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.freq_base", 1000000.0));
  c->rope.freq_base = float(d);
  c->rope.n_ctx_orig = c->n_ctx_train;
  c->rope_sliding = c->rope;
  c->rope_sliding.n_dims = rot_swa;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.freq_base_swa", 10000.0));
  c->rope_sliding.freq_base = float(d);
  if (!(c->rope.freq_base > 0) || !(c->rope_sliding.freq_base > 0))
    return InvalidArgument(f.path() + ": " + a + "rope.freq_base and rope.freq_base_swa must be positive");
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "final_logit_softcapping", 0.0));
  if (!(d >= 0) || !std::isfinite(d))
    return InvalidArgument(f.path() + ": " + a + "final_logit_softcapping must be >= 0");
  c->final_softcap = float(d);
  c->qk_norm = QkNorm::kPerHead;
  c->embd_scale = std::sqrt(float(c->n_embd));
  c->attn_scale = 1.0f;  // Gemma 4's q and k are RMS-normed per head and not scaled again
  return OkStatus();
}

// KV sharing: layer l >= n_layers - shared reads the K/V of the last layer of its kind before them.
Status read_kv_sharing(const gguf::File& f, const std::string& a, ModelConfig* c) {
  int shared = 0;
  TS_ASSIGN_OR_RETURN(shared, gguf_int32_key(f, a + "attention.shared_kv_layers", 0));
  if (shared < 0 || shared >= c->n_layers)
    return InvalidArgument(f.path() + ": " + a + "attention.shared_kv_layers " + std::to_string(shared) +
                           " outside [0, block_count)");
  c->layer_kv_source.resize(size_t(c->n_layers));
  const int first_shared = c->n_layers - shared;
  for (int l = 0; l < c->n_layers; ++l) {
    int src = l;
    if (l >= first_shared) {
      src = -1;
      for (int j = first_shared - 1; j >= 0 && src < 0; --j)
        if (c->layer_sliding[size_t(j)] == c->layer_sliding[size_t(l)]) src = j;
      if (src < 0)
        return InvalidArgument(f.path() + ": layer " + std::to_string(l) + " shares K/V (" + a +
                               "attention.shared_kv_layers " + std::to_string(shared) +
                               ") but no earlier layer of its kind computes them");
      if (c->layer_kv_heads[size_t(src)] != c->layer_kv_heads[size_t(l)])
        return InvalidArgument(f.path() + ": layer " + std::to_string(l) + " shares the K/V of layer " +
                               std::to_string(src) + " but their head_count_kv differ");
    }
    c->layer_kv_source[size_t(l)] = src;
  }
  return OkStatus();
}

Result<ModelConfig> gemma4_config(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "gemma4") return Internal("gemma4_config_from_gguf: architecture '" + c.arch + "'");
  const std::string a = c.arch + ".";
  if (f.find("general.name")) { TS_ASSIGN_OR_RETURN(c.name, f.get_string("general.name")); }
  TS_ASSIGN_OR_RETURN(c.n_layers, gguf_int32_key(f, a + "block_count"));
  TS_ASSIGN_OR_RETURN(c.n_embd, gguf_int32_key(f, a + "embedding_length"));
  TS_ASSIGN_OR_RETURN(c.n_heads, gguf_int32_key(f, a + "attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, gguf_int32_key(f, a + "context_length", 131072));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_heads <= 0 || c.n_ctx_train <= 0)
    return InvalidArgument(f.path() +
                           ": block_count, embedding_length, attention.head_count and context_length must be positive");
  // Each layer has tensors of its own: checked before per-layer tables are sized by a count that
  // could be any 32-bit value.
  if (size_t(c.n_layers) > f.tensors().size())
    return InvalidArgument(f.path() + ": block_count " + std::to_string(c.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  TS_ASSIGN_OR_RETURN(c.layer_n_ff, per_layer_ints(f, a + "feed_forward_length", c.n_layers, std::nullopt));
  c.n_ff = c.layer_n_ff[0];
  // The MoE variant: routed experts beside the dense FFN (no shared expert; top-k renormalised).
  TS_RETURN_IF_ERROR(read_moe_config(f, &c, /*required=*/false, /*weights_norm=*/true, /*shared_default=*/false));
  if (c.is_moe() && (c.n_ff_shexp != 0 || !c.expert_weights_norm))
    return InvalidArgument(f.path() + ": " + a +
                           "expert_shared_feed_forward_length / expert_weights_norm: Gemma 4's experts have no "
                           "shared expert and renormalise their top-k weights");
  TS_ASSIGN_OR_RETURN(c.layer_kv_heads, per_layer_ints(f, a + "attention.head_count_kv", c.n_layers, c.n_heads));
  c.n_kv_heads = c.layer_kv_heads[0];

  int head_full = 0, head_swa = 0;
  TS_RETURN_IF_ERROR(read_heads_and_rope(f, a, &c, &head_full, &head_swa));

  // Which layers slide: one bool per layer (the global layers use the whole context).
  TS_ASSIGN_OR_RETURN(c.sliding_window, gguf_int32_key(f, a + "attention.sliding_window"));
  if (c.sliding_window <= 0)
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window must be positive, got " +
                           std::to_string(c.sliding_window));
  const gguf::Value* pat = f.find(a + "attention.sliding_window_pattern");
  if (!pat || pat->type != gguf::ValueType::kArray || pat->array_type != gguf::ValueType::kBool ||
      pat->array.size() != size_t(c.n_layers))
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window_pattern must be an array of " +
                           std::to_string(c.n_layers) + " bools (one per layer)");
  c.layer_sliding.assign(size_t(c.n_layers), 0);
  c.layer_head_dim.assign(size_t(c.n_layers), head_full);
  for (int l = 0; l < c.n_layers; ++l) {
    c.layer_sliding[size_t(l)] = pat->array[size_t(l)].b;
    if (c.layer_sliding[size_t(l)]) c.layer_head_dim[size_t(l)] = head_swa;
    if (c.n_heads % c.layer_kv_heads[size_t(l)] != 0)
      return InvalidArgument(f.path() + ": layer " + std::to_string(l) + ": head_count " + std::to_string(c.n_heads) +
                             " is not a multiple of head_count_kv " + std::to_string(c.layer_kv_heads[size_t(l)]));
  }
  c.head_dim = c.layer_head_dim[0];

  TS_RETURN_IF_ERROR(read_kv_sharing(f, a, &c));

  TS_ASSIGN_OR_RETURN(c.n_embd_per_layer, gguf_int32_key(f, a + "embedding_length_per_layer_input", 0));
  if (c.n_embd_per_layer < 0)
    return InvalidArgument(f.path() + ": " + a + "embedding_length_per_layer_input must not be negative");
  if (int64_t(c.n_embd_per_layer) * c.n_layers > (int64_t(1) << 30))
    return InvalidArgument(f.path() + ": " + a + "embedding_length_per_layer_input x block_count too large");
  c.layer_out_scale.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) { TS_ASSIGN_OR_RETURN(c.layer_out_scale[size_t(l)], layer_scalar(f, l)); }
  return c;
}

class Gemma4 final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override { return {"gemma4"}; }
  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override { return gemma4_config(f); }
  std::unique_ptr<ArchWeights> new_weights() const override { return std::make_unique<Gemma4Weights>(); }

  std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* aw) const override {
    auto* w = static_cast<Gemma4Weights*>(aw);
    const int64_t D = c.n_embd, P = c.n_embd_per_layer, L = c.n_layers;
    std::vector<TensorSpec> s = decoder_io_specs(c, w);
    // One table of divisors for every global layer (absent: plain RoPE over rope.dimension_count).
    s.push_back({"rope_freqs.weight", {c.rope.n_dims / 2}, false, &w->rope_freqs});
    if (P > 0)
      s.insert(
          s.end(),
          {
              {"per_layer_token_embd.weight", {c.n_vocab, L * P}, true, &w->ple_table, false, false, false, 0, 0, true},
              {"per_layer_model_proj.weight", {L * P, D}, true, &w->ple_model_proj},
              {"per_layer_proj_norm.weight", {P}, true, &w->ple_proj_norm},
          });
    w->layers.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      Gemma4Layer& Ly = w->layers[size_t(l)];
      const std::string p = "blk." + std::to_string(l) + ".";
      const int64_t Dh = c.head_dim_of(l), Q = int64_t(c.n_heads) * Dh, KV = int64_t(c.kv_heads_of(l)) * Dh;
      // A KV-sharing layer computes no K/V: a file may still carry the projections (unused).
      const bool own_kv = c.kv_source(l) == l;
      s.insert(s.end(), {
                            {p + "attn_norm.weight", {D}, true, &Ly.attn_norm},
                            {p + "attn_q.weight", {Q, D}, true, &Ly.attn.wq},
                            {p + "attn_q_norm.weight", {Dh}, true, &Ly.attn.q_norm},
                            {p + "attn_k.weight", {KV, D}, own_kv, &Ly.attn.wk},
                            {p + "attn_k_norm.weight", {Dh}, own_kv, &Ly.attn.k_norm},
                            // Global layers may take their values from the key projection (no attn_v).
                            {p + "attn_v.weight", {KV, D}, own_kv && c.is_sliding(l), &Ly.attn.wv},
                            {p + "attn_output.weight", {D, Q}, true, &Ly.attn.wo},
                            {p + "post_attention_norm.weight", {D}, true, &Ly.post_attn_norm},
                            {p + "ffn_norm.weight", {D}, true, &Ly.ffn_norm},
                            {p + "post_ffw_norm.weight", {D}, true, &Ly.post_ffn_norm},
                        });
      add_glu_specs(&s, p, D, c.n_ff_of(l), &Ly.ffn);
      if (c.is_moe()) {
        const int64_t E = c.n_experts, Fe = c.n_ff_exp;
        s.insert(s.end(), {
                              {p + "ffn_gate_inp.weight", {E, D}, true, &Ly.router},
                              {p + "ffn_gate_inp.scale", {D}, true, &Ly.router_scale},
                              {p + "ffn_gate_up_exps.weight", {E, 2 * Fe, D}, true, &Ly.gate_up_exps, true},
                              {p + "ffn_down_exps.weight", {E, D, Fe}, true, &Ly.down_exps, true},
                              // Gathered per routed row by the embed op (as an [E, 1] table).
                              {p + "ffn_down_exps.scale", {E}, true, &Ly.expert_scale, false, false, false, 0, 0, true},
                              {p + "pre_ffw_norm_2.weight", {D}, true, &Ly.pre_ffn_norm_2},
                              {p + "post_ffw_norm_1.weight", {D}, true, &Ly.post_ffn_norm_1},
                              {p + "post_ffw_norm_2.weight", {D}, true, &Ly.post_ffn_norm_2},
                          });
      }
      if (P > 0)
        s.insert(s.end(), {
                              {p + "inp_gate.weight", {P, D}, true, &Ly.ple_gate},
                              {p + "proj.weight", {D, P}, true, &Ly.ple_proj},
                              {p + "post_norm.weight", {D}, true, &Ly.ple_post_norm},
                          });
    }
    return s;
  }

  CostShape cost_shape(const ModelConfig& c) const override {
    const double D = c.n_embd, P = c.n_embd_per_layer;
    double weights = 0, pairs = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      const double q = double(c.n_heads) * c.head_dim_of(l), kv = double(c.kv_heads_of(l)) * c.head_dim_of(l);
      weights += 2 * D * q + (c.kv_source(l) == l ? 2 * D * kv : 0) + 3 * D * c.n_ff_of(l) + 2 * D * P;
      if (c.is_moe()) weights += D * c.n_experts + 3 * D * double(c.n_experts_used) * c.n_ff_exp;
      pairs += 8 * q;
    }
    weights += D * P * c.n_layers;  // the per-layer embeddings' input projection
    return {2 * weights, 2 * D * c.n_vocab, pairs};
  }

  ValueId build_graph(GraphContext& ctx, const ArchWeights& aw) const override {
    const auto& w = static_cast<const Gemma4Weights&>(aw);
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const int64_t T = ctx.n_tokens, P = c.n_embd_per_layer;
    ValueId x = ctx.embed_tokens(w.tok_embd, c.embd_scale);              // [T, D]
    const ValueId ple = P > 0 ? per_layer_inputs(ctx, w, x) : kNoValue;  // [T, L * P]
    const ValueId freq = ctx.optional(w.rope_freqs);
    std::vector<std::pair<ValueId, ValueId>> kv(size_t(c.n_layers), {kNoValue, kNoValue});  // each layer's own K, V
    for (int l = 0; l < c.n_layers; ++l) {
      const Gemma4Layer& Ly = w.layers[size_t(l)];
      ValueId h = g.rms_norm(x, g.input(Ly.attn_norm), c.rms_eps);
      h = attention(ctx, Ly, h, l, freq, &kv);
      x = g.add(x, g.rms_norm(h, g.input(Ly.post_attn_norm), c.rms_eps));
      h = g.rms_norm(x, g.input(Ly.ffn_norm), c.rms_eps);
      h = ctx.glu_ffn(Ly.ffn, h, GraphContext::Glu::kGeGlu);
      if (c.is_moe())
        h = g.add(g.rms_norm(h, g.input(Ly.post_ffn_norm_1), c.rms_eps),
                  g.rms_norm(experts(ctx, Ly, x), g.input(Ly.post_ffn_norm_2), c.rms_eps));
      x = g.add(x, g.rms_norm(h, g.input(Ly.post_ffn_norm), c.rms_eps));
      if (ple != kNoValue) {
        const Tensor& pt = g.tensor(ple);
        const ValueId e = g.copy(g.view(ple, {T, P}, {pt.stride[0], pt.stride[1]}, l * P * pt.stride[1]));  // [T, P]
        ValueId y = g.geglu(ctx.linear(x, Ly.ple_gate), e);  // gelu(inp_gate x) * e_l
        y = g.rms_norm(ctx.linear(y, Ly.ple_proj), g.input(Ly.ple_post_norm), c.rms_eps);
        x = g.add(x, y);
      }
      const float s = c.layer_out_scale.empty() ? 1.0f : c.layer_out_scale[size_t(l)];
      if (s != 1.0f) x = g.scale(x, s);
    }
    return ctx.decoder_output(w, x);
  }

 private:
  // Each layer's per-layer input [T, L * P] (layer l's in columns [l * P, (l + 1) * P)):
  // (norm(proj(x0) / sqrt(D)) + table[token] * sqrt(P)) / sqrt(2), the norm over each layer's P.
  static ValueId per_layer_inputs(GraphContext& ctx, const Gemma4Weights& w, ValueId x0) {
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const int64_t T = ctx.n_tokens, P = c.n_embd_per_layer, L = c.n_layers;
    const ValueId tok = ctx.embed_tokens(w.ple_table, std::sqrt(float(P)));  // [T, L * P]
    ValueId proj = g.scale(ctx.linear(x0, w.ple_model_proj), 1.0f / std::sqrt(float(c.n_embd)));
    proj = g.reshape(g.rms_norm(g.reshape(proj, {T, L, P}), g.input(w.ple_proj_norm), c.rms_eps), {T, L * P});
    return g.scale(g.add(proj, tok), 1.0f / std::sqrt(2.0f));
  }

  // The routed experts of a MoE layer from the residual stream |x| [T, D] (router and experts
  // both read it, each through its own norm): [T, D].
  static ValueId experts(GraphContext& ctx, const Gemma4Layer& Ly, ValueId x) {
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const int64_t T = ctx.n_tokens, E = c.n_experts, k = c.n_experts_used, Fe = c.n_ff_exp;
    const ValueId r = g.rms_norm(x, g.input(Ly.router_scale), c.rms_eps);
    const ValueId logits = g.scale(ctx.linear(r, Ly.router), 1.0f / std::sqrt(float(c.n_embd)));  // [T, E]
    TopkRouteParams rp;
    rp.k = c.n_experts_used;
    rp.scoring = RouteScoring::kSoftmax;
    rp.renormalize = true;
    auto [ids, weights] = g.topk_route(logits, rp);  // [T, k] each
    if (ctx.opts.expert_stats) {
      g.mark_output(ids);
      ctx.route_ids.push_back(ids);
    }
    // Each chosen weight times its expert's scale: the scales gathered by the routed ids.
    const ValueId per_expert =
        g.embed(g.reshape(g.input(Ly.expert_scale), {E, 1}), g.reshape(ids, {T * k}), DType::kF32);
    weights = g.mul(weights, g.reshape(per_expert, {T, k}));
    const ValueId h = g.rms_norm(x, g.input(Ly.pre_ffn_norm_2), c.rms_eps);
    const ValueId gu = g.matmul_id(h, g.input(Ly.gate_up_exps), ids);  // [T, k, 2 Fe]: gate rows, then up rows
    const Tensor& t = g.tensor(gu);
    const ValueId gate = g.copy(g.view(gu, {T, k, Fe}, {t.stride[0], t.stride[1], t.stride[2]}, 0));
    const ValueId up = g.copy(g.view(gu, {T, k, Fe}, {t.stride[0], t.stride[1], t.stride[2]}, Fe * t.stride[2]));
    return g.matmul_id(g.geglu(gate, up), g.input(Ly.down_exps), ids, weights);  // [T, D]
  }

  // Layer |layer|'s attention from its normed input to the output projection. A KV-sharing layer
  // attends over its source layer's K/V: it hands the attention op the source's new K/V again,
  // which stores them into the same slots once more (the op always stores; the values are equal).
  static ValueId attention(GraphContext& ctx, const Gemma4Layer& Ly, ValueId h, int layer, ValueId freq,
                           std::vector<std::pair<ValueId, ValueId>>* kv) {
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const int64_t T = ctx.n_tokens, H = c.n_heads, Hkv = c.kv_heads_of(layer), Dh = c.head_dim_of(layer);
    const bool slides = c.is_sliding(layer);
    const RopeParams& rope = slides ? c.rope_sliding : c.rope;
    const ValueId ff = slides ? kNoValue : freq;
    ValueId q = g.reshape(ctx.linear(h, Ly.attn.wq), {T, H, Dh});
    q = g.rope(g.rms_norm(q, g.input(Ly.attn.q_norm), c.rms_eps), ctx.positions, rope, ff);
    const int src = c.kv_source(layer);
    if (src == layer) {
      const ValueId kp = ctx.linear(h, Ly.attn.wk);  // [T, Hkv * Dh]
      const ValueId vp = Ly.attn.wv.buffer ? ctx.linear(h, Ly.attn.wv) : kp;
      ValueId k = g.rms_norm(g.reshape(kp, {T, Hkv, Dh}), g.input(Ly.attn.k_norm), c.rms_eps);
      k = g.rope(k, ctx.positions, rope, ff);
      const ValueId v = g.rms_norm(g.reshape(vp, {T, Hkv, Dh}), kNoValue, c.rms_eps);
      (*kv)[size_t(layer)] = {k, v};
    }
    const auto [k, v] = (*kv)[size_t(src)];
    AttentionParams ap;
    ap.scale = c.attn_scale;
    ap.sliding_window = slides ? c.sliding_window : 0;
    const ValueId o = ctx.paged_attention(q, k, v, layer, ap);  // [T, H, Dh]
    return ctx.linear(g.reshape(o, {T, H * Dh}), Ly.attn.wo);
  }
};

}  // namespace

const Architecture& gemma4_architecture() {
  static const Gemma4 arch;
  return arch;
}

}  // namespace tessera
