#include "models/arch/llama.h"

#include <cmath>

#include "models/gguf/gguf.h"

namespace tessera {

namespace {
// An optional integer key, with |fallback| when absent (a mistyped key is still an error).
Result<int64_t> int_or(const gguf::File& f, const std::string& key, int64_t fallback) {
  if (!f.find(key)) return fallback;
  return f.get_int(key);
}
Result<double> float_or(const gguf::File& f, const std::string& key, double fallback) {
  if (!f.find(key)) return fallback;
  return f.get_float(key);
}
}  // namespace

Result<ModelConfig> llama_config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "mistral")
    return Unimplemented("architecture '" + c.arch + "' is not supported (llama, mistral, qwen2, qwen3)");
  if (f.find("general.name")) {
    TS_ASSIGN_OR_RETURN(c.name, f.get_string("general.name"));
  }
  const std::string a = c.arch + ".";
  int64_t v;
  TS_ASSIGN_OR_RETURN(v, f.get_int(a + "block_count")); c.n_layers = int(v);
  TS_ASSIGN_OR_RETURN(v, f.get_int(a + "embedding_length")); c.n_embd = int(v);
  TS_ASSIGN_OR_RETURN(v, f.get_int(a + "feed_forward_length")); c.n_ff = int(v);
  TS_ASSIGN_OR_RETURN(v, f.get_int(a + "attention.head_count")); c.n_heads = int(v);
  TS_ASSIGN_OR_RETURN(v, int_or(f, a + "attention.head_count_kv", c.n_heads)); c.n_kv_heads = int(v);
  TS_ASSIGN_OR_RETURN(v, int_or(f, a + "context_length", 2048)); c.n_ctx_train = int(v);
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ctx_train <= 0)
    return InvalidArgument(f.path() + ": hyperparameters must be positive (block_count " + std::to_string(c.n_layers) +
                           ", embedding_length " + std::to_string(c.n_embd) + ", head_count " + std::to_string(c.n_heads) +
                           ", head_count_kv " + std::to_string(c.n_kv_heads) + ")");
  if (c.n_heads % c.n_kv_heads != 0)
    return InvalidArgument(f.path() + ": head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                           std::to_string(c.n_kv_heads));
  TS_ASSIGN_OR_RETURN(v, int_or(f, a + "attention.key_length", c.n_embd / c.n_heads)); c.head_dim = int(v);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return InvalidArgument(f.path() + ": head dimension " + std::to_string(c.head_dim) + " must be positive and even");
  double d;
  TS_ASSIGN_OR_RETURN(d, float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-5)); c.rms_eps = float(d);
  if (!(c.rms_eps > 0.0f)) return InvalidArgument(f.path() + ": layer_norm_rms_epsilon must be positive");

  RopeParams& r = c.rope;
  r.mode = (c.arch == "qwen2" || c.arch == "qwen3") ? RopeMode::kNeox : RopeMode::kNormal;
  TS_ASSIGN_OR_RETURN(v, int_or(f, a + "rope.dimension_count", c.head_dim)); r.n_dims = int(v);
  if (r.n_dims <= 0 || r.n_dims > c.head_dim || r.n_dims % 2)
    return InvalidArgument(f.path() + ": rope.dimension_count " + std::to_string(r.n_dims) + " must be even and <= head dim");
  TS_ASSIGN_OR_RETURN(d, float_or(f, a + "rope.freq_base", 10000.0)); r.freq_base = float(d);
  std::string scaling = "none";
  if (f.find(a + "rope.scaling.type")) {
    TS_ASSIGN_OR_RETURN(scaling, f.get_string(a + "rope.scaling.type"));
  }
  double factor = 1.0;
  TS_ASSIGN_OR_RETURN(factor, float_or(f, a + "rope.scaling.factor", 1.0));
  if (scaling == "linear" && factor > 0) {
    r.freq_scale = float(1.0 / factor);
  } else if (scaling == "yarn" && factor > 0) {
    r.freq_scale = float(1.0 / factor);
    r.ext_factor = 1.0f;
    TS_ASSIGN_OR_RETURN(v, int_or(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
    r.n_ctx_orig = int(v);
    // YaRN's attention temperature: mscale is applied inside rope (see core/op.h RopeParams).
  } else if (scaling != "none" && scaling != "llama3") {
    return Unimplemented(f.path() + ": rope scaling type '" + scaling + "'");
  }
  if (r.n_ctx_orig == 0) r.n_ctx_orig = c.n_ctx_train;
  c.qk_norm = c.arch == "qwen3";
  return c;
}

std::vector<TensorSpec> llama_tensor_specs(const ModelConfig& c, LlamaWeights* w) {
  const int64_t D = c.n_embd, F = c.n_ff, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
  const int64_t V = c.n_vocab;
  std::vector<TensorSpec> s = {
      {"token_embd.weight", {V, D}, true, &w->tok_embd},
      {"output_norm.weight", {D}, true, &w->output_norm},
      {"output.weight", {V, D}, false, &w->output},
      {"rope_freqs.weight", {c.rope.n_dims / 2}, false, &w->rope_freqs},
  };
  w->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayer& L = w->layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool qwen2 = c.arch == "qwen2";
    s.insert(s.end(), {
        {p + "attn_norm.weight", {D}, true, &L.attn_norm},
        {p + "attn_q.weight", {Q, D}, true, &L.wq},
        {p + "attn_k.weight", {KV, D}, true, &L.wk},
        {p + "attn_v.weight", {KV, D}, true, &L.wv},
        {p + "attn_output.weight", {D, Q}, true, &L.wo},
        {p + "attn_q.bias", {Q}, qwen2, &L.bq},
        {p + "attn_k.bias", {KV}, qwen2, &L.bk},
        {p + "attn_v.bias", {KV}, qwen2, &L.bv},
        {p + "attn_q_norm.weight", {c.head_dim}, c.qk_norm, &L.q_norm},
        {p + "attn_k_norm.weight", {c.head_dim}, c.qk_norm, &L.k_norm},
        {p + "ffn_norm.weight", {D}, true, &L.ffn_norm},
        {p + "ffn_gate.weight", {F, D}, true, &L.w_gate},
        {p + "ffn_up.weight", {F, D}, true, &L.w_up},
        {p + "ffn_down.weight", {D, F}, true, &L.w_down},
    });
  }
  return s;
}

namespace {
ValueId opt(Graph& g, const Tensor& t) { return t.buffer ? g.input(t) : kNoValue; }
}  // namespace

ValueId build_llama_graph(Graph& g, const ModelConfig& c, const LlamaWeights& w, const StepTensors& in,
                          const KvCache& kv) {
  const int64_t T = in.tokens.shape[0];
  const int64_t Dh = c.head_dim;
  const ValueId tokens = g.input(in.tokens);
  const ValueId pos = g.input(in.positions);
  const ValueId slots = g.input(in.slot_mapping), qstart = g.input(in.query_start);
  const ValueId lens = g.input(in.seq_lens), tables = g.input(in.block_tables);
  const ValueId freq = opt(g, w.rope_freqs);
  AttentionParams ap;
  ap.scale = float(1.0 / std::sqrt(double(Dh)));

  ValueId x = g.embed(g.input(w.tok_embd), tokens, DType::kF32);  // [T, D]
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = w.layers[size_t(l)];
    // Attention block.
    ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
    ValueId q = g.reshape(g.matmul(h, g.input(L.wq), opt(g, L.bq)), {T, c.n_heads, Dh});
    ValueId k = g.reshape(g.matmul(h, g.input(L.wk), opt(g, L.bk)), {T, c.n_kv_heads, Dh});
    ValueId v = g.reshape(g.matmul(h, g.input(L.wv), opt(g, L.bv)), {T, c.n_kv_heads, Dh});
    if (c.qk_norm) {
      q = g.rms_norm(q, g.input(L.q_norm), c.rms_eps);
      k = g.rms_norm(k, g.input(L.k_norm), c.rms_eps);
    }
    q = g.rope(q, pos, c.rope, freq);
    k = g.rope(k, pos, c.rope, freq);
    ValueId a = g.attention({q, k, v, g.input(kv.k(l)), g.input(kv.v(l)), slots, qstart, lens, tables}, ap);
    a = g.reshape(a, {T, int64_t(c.n_heads) * Dh});
    x = g.add(x, g.matmul(a, g.input(L.wo)));
    // Feed-forward block.
    h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
    const ValueId ff = g.swiglu(g.matmul(h, g.input(L.w_gate)), g.matmul(h, g.input(L.w_up)));
    x = g.add(x, g.matmul(ff, g.input(L.w_down)));
  }
  // Only the rows that sample need the (large) output head.
  x = g.embed(x, g.input(in.logit_rows), DType::kF32);
  x = g.rms_norm(x, g.input(w.output_norm), c.rms_eps);
  const ValueId logits = g.matmul(x, g.input(c.tied_output ? w.tok_embd : w.output));
  g.mark_output(logits);
  return logits;
}

}  // namespace tessera
