#include "models/arch/gemma3.h"

#include <cmath>

#include "models/arch/blocks.h"
#include "models/gguf/gguf.h"

namespace tessera {

Result<ModelConfig> gemma3_config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "gemma3") return Internal("gemma3_config_from_gguf: architecture '" + c.arch + "'");
  TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
  const std::string a = c.arch + ".";
  int value_length = 0;
  TS_ASSIGN_OR_RETURN(value_length, gguf_int32_key(f, a + "attention.value_length", c.head_dim));
  if (value_length != c.head_dim)
    return Unimplemented(f.path() + ": attention.value_length " + std::to_string(value_length) + " differs from key_length " +
                         std::to_string(c.head_dim));
  c.rope.mode = RopeMode::kNeox;  // HF's rotate_half; llama.cpp's converter leaves q/k rows as they are
  c.qk_norm = QkNorm::kPerHead;
  c.embd_scale = std::sqrt(float(c.n_embd));
  // query_pre_attn_scalar: head_dim for every released size but 27B (62 layers), whose is
  // n_embd / n_heads; GGUF has no key for it, and llama.cpp tells 27B by its layer count too.
  c.attn_scale = c.n_layers == 62 ? 1.0f / std::sqrt(float(c.n_embd) / float(c.n_heads)) : 1.0f / std::sqrt(float(c.head_dim));
  double d = 0;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "attn_logit_softcapping", 0.0));
  c.attn_softcap = float(d);
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "final_logit_softcapping", 0.0));
  if (d > 0)
    return Unimplemented(f.path() + ": " + a + "final_logit_softcapping " + std::to_string(d) +
                         " is not supported (no op computes softcap * tanh(logits / softcap))");
  if (c.attn_softcap < 0) return InvalidArgument(f.path() + ": " + a + "attn_logit_softcapping must not be negative");

  TS_ASSIGN_OR_RETURN(c.sliding_window, gguf_int32_key(f, a + "attention.sliding_window", 0));
  if (c.sliding_window < 0)
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window " + std::to_string(c.sliding_window) + " is negative");
  int pattern = 6;
  TS_ASSIGN_OR_RETURN(pattern, gguf_int32_key(f, a + "attention.sliding_window_pattern", 6));
  if (pattern < 0) return InvalidArgument(f.path() + ": " + a + "attention.sliding_window_pattern must not be negative");
  // Each layer has tensors of its own: checked before a per-layer table is sized by a count that
  // could be any 32-bit value.
  if (size_t(c.n_layers) > f.tensors().size())
    return InvalidArgument(f.path() + ": block_count " + std::to_string(c.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  c.layer_sliding.assign(size_t(c.n_layers), 0);
  // As llama.cpp's set_swa_pattern: a pattern of n makes every n-th layer global (0: none).
  for (int l = 0; l < c.n_layers; ++l) c.layer_sliding[size_t(l)] = c.sliding_window > 0 && (pattern == 0 || l % pattern < pattern - 1);
  // The sliding layers rotate by their own base and without the global layers' scaling.
  c.rope_sliding = c.rope;
  c.rope_sliding.freq_scale = 1.0f;
  c.rope_sliding.ext_factor = 0.0f;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.freq_base_swa", 10000.0));
  c.rope_sliding.freq_base = float(d);
  if (!(c.rope_sliding.freq_base > 0)) return InvalidArgument(f.path() + ": " + a + "rope.freq_base_swa must be positive");
  return c;
}

std::vector<TensorSpec> gemma3_tensor_specs(const ModelConfig& c, LlamaWeights* w) {
  const int64_t D = c.n_embd, F = c.n_ff, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
  const int64_t V = c.n_vocab, Dh = c.head_dim;
  std::vector<TensorSpec> s = {
      {"token_embd.weight", {V, D}, true, &w->tok_embd},
      {"output_norm.weight", {D}, true, &w->output_norm},
      {"output.weight", {V, D}, false, &w->output},
  };
  w->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayer& L = w->layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    s.insert(s.end(), {
        {p + "attn_norm.weight", {D}, true, &L.attn_norm},
        {p + "attn_q.weight", {Q, D}, true, &L.wq},
        {p + "attn_k.weight", {KV, D}, true, &L.wk},
        {p + "attn_v.weight", {KV, D}, true, &L.wv},
        {p + "attn_q_norm.weight", {Dh}, true, &L.q_norm},
        {p + "attn_k_norm.weight", {Dh}, true, &L.k_norm},
        {p + "attn_output.weight", {D, Q}, true, &L.wo},
        {p + "post_attention_norm.weight", {D}, true, &L.post_attn_norm},
        {p + "ffn_norm.weight", {D}, true, &L.ffn_norm},
        {p + "ffn_gate.weight", {F, D}, true, &L.w_gate},
        {p + "ffn_up.weight", {F, D}, true, &L.w_up},
        {p + "ffn_down.weight", {D, F}, true, &L.w_down},
        {p + "post_ffw_norm.weight", {D}, true, &L.post_ffn_norm},
    });
  }
  return s;
}

ValueId build_gemma3_graph(Graph& g, const ModelConfig& c, const LlamaWeights& w, const StepTensors& in,
                           const KvCache& kv, ValueId* hidden) {
  const ValueId tokens = g.input(in.tokens);
  const StepValues sv = step_values(g, in);
  AttentionParams global;
  global.scale = c.attn_scale;
  global.softcap = c.attn_softcap;
  AttentionParams sliding = global;
  sliding.sliding_window = c.sliding_window;

  ValueId x = g.embed(g.input(w.tok_embd), tokens, in.act);  // [T, D]
  x = g.scale(x, c.embd_scale * w.tok_embd.out_scale);
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = w.layers[size_t(l)];
    const bool slides = c.is_sliding(l);
    ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
    h = attention_block(g, c, L, h, l, slides ? c.rope_sliding : c.rope, kNoValue, slides ? sliding : global, sv, kv);
    x = g.add(x, g.rms_norm(h, g.input(L.post_attn_norm), c.rms_eps));
    h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
    h = linear(g, g.geglu(linear(g, h, L.w_gate), linear(g, h, L.w_up)), L.w_down);
    x = g.add(x, g.rms_norm(h, g.input(L.post_ffn_norm), c.rms_eps));
  }
  return decoder_output(g, c, w, in, x, hidden);
}

}  // namespace tessera
