#include "models/arch/bert.h"

#include <algorithm>
#include <cmath>

#include "models/arch/blocks.h"
#include "models/gguf/gguf.h"

namespace tessera {

Result<ModelConfig> bert_config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "bert") return Internal("bert_config_from_gguf: architecture '" + c.arch + "'");
  if (f.find("general.name")) {
    TS_ASSIGN_OR_RETURN(c.name, f.get_string("general.name"));
  }
  const std::string a = "bert.";
  TS_ASSIGN_OR_RETURN(c.n_layers, gguf_int32_key(f, a + "block_count"));
  TS_ASSIGN_OR_RETURN(c.n_embd, gguf_int32_key(f, a + "embedding_length"));
  TS_ASSIGN_OR_RETURN(c.n_ff, gguf_int32_key(f, a + "feed_forward_length"));
  TS_ASSIGN_OR_RETURN(c.n_heads, gguf_int32_key(f, a + "attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, gguf_int32_key(f, a + "context_length", 512));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_ctx_train <= 0 || c.n_embd % c.n_heads != 0)
    return InvalidArgument(f.path() + ": bert sizes must be positive and embedding_length a multiple of head_count (block_count " +
                           std::to_string(c.n_layers) + ", embedding_length " + std::to_string(c.n_embd) + ", head_count " +
                           std::to_string(c.n_heads) + ")");
  if (size_t(c.n_layers) > f.tensors().size())
    return InvalidArgument(f.path() + ": block_count " + std::to_string(c.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.n_embd / c.n_heads;
  double eps = 1e-12;
  TS_ASSIGN_OR_RETURN(eps, gguf_float_or(f, a + "attention.layer_norm_epsilon", 1e-12));
  if (!(eps > 0)) return InvalidArgument(f.path() + ": " + a + "attention.layer_norm_epsilon must be positive");
  c.norm_eps = float(eps);
  if (f.find(a + "attention.causal")) {
    bool causal = false;
    TS_ASSIGN_OR_RETURN(causal, f.get_bool(a + "attention.causal"));
    if (causal) return Unimplemented(f.path() + ": " + a + "attention.causal = true (a causal BERT) is not supported");
  }
  c.causal = false;
  // llama.cpp's enum llama_pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank.
  int64_t pooling = 1;
  TS_ASSIGN_OR_RETURN(pooling, gguf_int_or(f, a + "pooling_type", 1));
  switch (pooling) {
    case 0:
    case 1: c.pooling = Pooling::kMean; break;  // none: mean, as sentence-transformers would
    case 2: c.pooling = Pooling::kCls; break;
    case 3: c.pooling = Pooling::kLast; break;
    default:
      return Unimplemented(f.path() + ": " + a + "pooling_type " + std::to_string(pooling) +
                           " is not supported (0 none, 1 mean, 2 cls, 3 last)");
  }
  c.rope.n_dims = 0;  // absolute positions: no RoPE
  return c;
}

std::vector<TensorSpec> bert_tensor_specs(const ModelConfig& c, LlamaWeights* w) {
  const int64_t D = c.n_embd, F = c.n_ff, V = c.n_vocab;
  std::vector<TensorSpec> s = {
      {"token_embd.weight", {V, D}, true, &w->tok_embd},
      {"position_embd.weight", {c.n_ctx_train, D}, true, &w->pos_embd},
      {"token_types.weight", {std::max(1, c.n_token_types), D}, false, &w->type_embd},
      {"token_embd_norm.weight", {D}, true, &w->embd_norm},
      {"token_embd_norm.bias", {D}, true, &w->embd_norm_b},
  };
  w->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayer& L = w->layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    s.insert(s.end(), {
        {p + "attn_q.weight", {D, D}, true, &L.wq},
        {p + "attn_q.bias", {D}, true, &L.bq},
        {p + "attn_k.weight", {D, D}, true, &L.wk},
        {p + "attn_k.bias", {D}, true, &L.bk},
        {p + "attn_v.weight", {D, D}, true, &L.wv},
        {p + "attn_v.bias", {D}, true, &L.bv},
        {p + "attn_output.weight", {D, D}, true, &L.wo},
        {p + "attn_output.bias", {D}, true, &L.bo},
        {p + "attn_output_norm.weight", {D}, true, &L.post_attn_norm},
        {p + "attn_output_norm.bias", {D}, true, &L.post_attn_norm_b},
        {p + "ffn_up.weight", {F, D}, true, &L.w_up},
        {p + "ffn_up.bias", {F}, true, &L.b_up},
        {p + "ffn_down.weight", {D, F}, true, &L.w_down},
        {p + "ffn_down.bias", {D}, true, &L.b_down},
        {p + "layer_output_norm.weight", {D}, true, &L.post_ffn_norm},
        {p + "layer_output_norm.bias", {D}, true, &L.post_ffn_norm_b},
    });
  }
  return s;
}

ValueId build_bert_graph(Graph& g, const ModelConfig& c, const LlamaWeights& w, const StepTensors& in, const KvCache& kv) {
  const ValueId tokens = g.input(in.tokens);
  const StepValues sv = step_values(g, in);
  const int64_t T = sv.n_tokens, D = c.n_embd, Dh = c.head_dim;
  AttentionParams ap;
  ap.scale = float(1.0 / std::sqrt(double(Dh)));
  ap.causal = false;

  // Word + position + token type (every token is of type 0: single-segment inputs).
  ValueId x = g.embed(g.input(w.tok_embd), tokens, in.act);  // [T, D]
  x = g.add(x, g.embed(g.input(w.pos_embd), sv.positions, in.act));
  if (w.type_embd.buffer) {
    const ValueId types = g.input(w.type_embd);
    const int64_t es = dtype_traits(g.tensor(types).dtype).block_bytes;
    x = g.add(x, g.view(types, {D}, {es}, 0));
  }
  x = g.layer_norm(x, g.input(w.embd_norm), g.input(w.embd_norm_b), c.norm_eps);
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = w.layers[size_t(l)];
    const ValueId q = g.reshape(linear(g, x, L.wq, g.input(L.bq)), {T, c.n_heads, Dh});
    const ValueId k = g.reshape(linear(g, x, L.wk, g.input(L.bk)), {T, c.n_kv_heads, Dh});
    const ValueId v = g.reshape(linear(g, x, L.wv, g.input(L.bv)), {T, c.n_kv_heads, Dh});
    ValueId a = g.attention({q, k, v, g.input(kv.k(l)), g.input(kv.v(l)), sv.slot_mapping, sv.query_start, sv.seq_lens,
                             sv.block_tables},
                            ap);
    a = linear(g, g.reshape(a, {T, int64_t(c.n_heads) * Dh}), L.wo, g.input(L.bo));
    x = g.layer_norm(g.add(x, a), g.input(L.post_attn_norm), g.input(L.post_attn_norm_b), c.norm_eps);
    ValueId h = g.gelu(linear(g, x, L.w_up, g.input(L.b_up)));
    h = linear(g, h, L.w_down, g.input(L.b_down));
    x = g.layer_norm(g.add(x, h), g.input(L.post_ffn_norm), g.input(L.post_ffn_norm_b), c.norm_eps);
  }
  if (in.act != DType::kF32) x = g.cast(x, DType::kF32);  // the host pools f32 rows
  g.mark_output(x);
  return x;
}

}  // namespace tessera
