#include "models/arch/phi3.h"

#include <cmath>

#include "models/arch/blocks.h"
#include "models/gguf/gguf.h"

namespace tessera {

Result<ModelConfig> phi3_config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "phi3") return Internal("phi3_config_from_gguf: architecture '" + c.arch + "'");
  TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
  const std::string a = c.arch + ".";
  c.rope.mode = RopeMode::kNeox;  // HF's rotate_half; llama.cpp's converter keeps the q/k rows as they are
  TS_ASSIGN_OR_RETURN(c.rope.n_ctx_orig, gguf_int32_key(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
  if (c.rope.n_ctx_orig <= 0)
    return InvalidArgument(f.path() + ": " + a + "rope.scaling.original_context_length must be positive");
  double d = 1.0;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.scaling.attn_factor", 1.0));
  if (!(d > 0)) return InvalidArgument(f.path() + ": " + a + "rope.scaling.attn_factor " + std::to_string(d) + " must be positive");
  c.rope.attn_factor = float(d);
  TS_ASSIGN_OR_RETURN(c.sliding_window, gguf_int32_key(f, a + "attention.sliding_window", 0));
  if (c.sliding_window < 0)
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window " + std::to_string(c.sliding_window) + " is negative");
  // The window is on every layer: layer_sliding stays empty (ModelConfig::is_sliding).
  return c;
}

std::vector<TensorSpec> phi3_tensor_specs(const ModelConfig& c, LlamaWeights* w) {
  const int64_t D = c.n_embd, F = c.n_ff, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
  const int64_t V = c.n_vocab;
  const char* factors = c.n_ctx_train > c.rope.n_ctx_orig ? "rope_factors_long.weight" : "rope_factors_short.weight";
  std::vector<TensorSpec> s = {
      {"token_embd.weight", {V, D}, true, &w->tok_embd},
      {"output_norm.weight", {D}, true, &w->output_norm},
      {"output.weight", {V, D}, false, &w->output},
      {factors, {c.rope.n_dims / 2}, false, &w->rope_freqs},
  };
  w->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayer& L = w->layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    TensorSpec q{p + "attn_qkv.weight", {Q, D}, true, &L.wq}, k = q, v = q;
    q.fused_rows = k.fused_rows = v.fused_rows = Q + 2 * KV;
    k.shape = v.shape = {KV, D};
    k.slot = &L.wk, k.row_begin = Q;
    v.slot = &L.wv, v.row_begin = Q + KV;
    TensorSpec gate{p + "ffn_up.weight", {F, D}, true, &L.w_gate}, up = gate;
    gate.fused_rows = up.fused_rows = 2 * F;
    up.slot = &L.w_up, up.row_begin = F;
    s.insert(s.end(), {
        {p + "attn_norm.weight", {D}, true, &L.attn_norm}, q, k, v,
        {p + "attn_output.weight", {D, Q}, true, &L.wo},
        {p + "ffn_norm.weight", {D}, true, &L.ffn_norm}, gate, up,
        {p + "ffn_down.weight", {D, F}, true, &L.w_down},
    });
  }
  return s;
}

ValueId build_phi3_graph(Graph& g, const ModelConfig& c, const LlamaWeights& w, const StepTensors& in, const KvCache& kv,
                         ValueId* hidden) {
  const ValueId tokens = g.input(in.tokens);
  const StepValues sv = step_values(g, in);
  const ValueId freq = optional_input(g, w.rope_freqs);
  AttentionParams ap;
  ap.scale = float(1.0 / std::sqrt(double(c.head_dim)));
  ap.sliding_window = c.sliding_window;  // every layer

  ValueId x = g.embed(g.input(w.tok_embd), tokens, in.act);  // [T, D]
  if (w.tok_embd.out_scale != 1.0f) x = g.scale(x, w.tok_embd.out_scale);
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = w.layers[size_t(l)];
    ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
    x = g.add(x, attention_block(g, c, L, h, l, c.rope, freq, ap, sv, kv));
    h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
    x = g.add(x, linear(g, g.swiglu(linear(g, h, L.w_gate), linear(g, h, L.w_up)), L.w_down));
  }
  return decoder_output(g, c, w, in, x, hidden);
}

}  // namespace tessera
