#include "models/arch/blocks.h"

#include <limits>

#include "models/gguf/gguf.h"

namespace tessera {

Result<int64_t> gguf_int_or(const gguf::File& f, const std::string& key, int64_t fallback) {
  if (!f.find(key)) return fallback;
  return f.get_int(key);
}

Result<int> gguf_int32_key(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback) {
  int64_t v = 0;
  if (fallback) {
    TS_ASSIGN_OR_RETURN(v, gguf_int_or(f, key, *fallback));
  } else {
    TS_ASSIGN_OR_RETURN(v, f.get_int(key));
  }
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    return InvalidArgument(f.path() + ": key '" + key + "' value " + std::to_string(v) + " does not fit in 32 bits");
  return int(v);
}

Result<double> gguf_float_or(const gguf::File& f, const std::string& key, double fallback) {
  if (!f.find(key)) return fallback;
  return f.get_float(key);
}

Status read_decoder_config(const gguf::File& f, ModelConfig* cp) {
  ModelConfig& c = *cp;
  if (f.find("general.name")) {
    TS_ASSIGN_OR_RETURN(c.name, f.get_string("general.name"));
  }
  const std::string a = c.arch + ".";
  TS_ASSIGN_OR_RETURN(c.n_layers, gguf_int32_key(f, a + "block_count"));
  TS_ASSIGN_OR_RETURN(c.n_embd, gguf_int32_key(f, a + "embedding_length"));
  TS_ASSIGN_OR_RETURN(c.n_ff, gguf_int32_key(f, a + "feed_forward_length"));
  TS_ASSIGN_OR_RETURN(c.n_heads, gguf_int32_key(f, a + "attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, gguf_int32_key(f, a + "attention.head_count_kv", c.n_heads));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, gguf_int32_key(f, a + "context_length", 2048));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ctx_train <= 0)
    return InvalidArgument(f.path() + ": hyperparameters must be positive (block_count " + std::to_string(c.n_layers) +
                           ", embedding_length " + std::to_string(c.n_embd) + ", head_count " + std::to_string(c.n_heads) +
                           ", head_count_kv " + std::to_string(c.n_kv_heads) + ")");
  if (c.n_heads % c.n_kv_heads != 0)
    return InvalidArgument(f.path() + ": head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                           std::to_string(c.n_kv_heads));
  TS_ASSIGN_OR_RETURN(c.head_dim, gguf_int32_key(f, a + "attention.key_length", c.n_embd / c.n_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return InvalidArgument(f.path() + ": head dimension " + std::to_string(c.head_dim) + " must be positive and even");
  double d;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-5)); c.rms_eps = float(d);
  if (!(c.rms_eps > 0.0f)) return InvalidArgument(f.path() + ": layer_norm_rms_epsilon must be positive");

  RopeParams& r = c.rope;
  TS_ASSIGN_OR_RETURN(r.n_dims, gguf_int32_key(f, a + "rope.dimension_count", c.head_dim));
  if (r.n_dims <= 0 || r.n_dims > c.head_dim || r.n_dims % 2)
    return InvalidArgument(f.path() + ": rope.dimension_count " + std::to_string(r.n_dims) + " must be even and <= head dim");
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.freq_base", 10000.0)); r.freq_base = float(d);
  std::string scaling = "none";
  if (f.find(a + "rope.scaling.type")) {
    TS_ASSIGN_OR_RETURN(scaling, f.get_string(a + "rope.scaling.type"));
  }
  double factor = 1.0;
  TS_ASSIGN_OR_RETURN(factor, gguf_float_or(f, a + "rope.scaling.factor", 1.0));
  if (scaling == "linear" && factor > 0) {
    r.freq_scale = float(1.0 / factor);
  } else if (scaling == "yarn" && factor > 0) {
    r.freq_scale = float(1.0 / factor);
    r.ext_factor = 1.0f;
    TS_ASSIGN_OR_RETURN(r.n_ctx_orig, gguf_int32_key(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
    // YaRN's attention temperature: mscale is applied inside rope (see core/op.h RopeParams).
  } else if (scaling != "none" && scaling != "llama3") {
    return Unimplemented(f.path() + ": rope scaling type '" + scaling + "'");
  }
  if (r.n_ctx_orig == 0) r.n_ctx_orig = c.n_ctx_train;
  return OkStatus();
}

ValueId optional_input(Graph& g, const Tensor& t) { return t.buffer ? g.input(t) : kNoValue; }

ValueId linear(Graph& g, ValueId x, const WeightTensor& W, ValueId bias) {
  const ValueId y = g.matmul(x, g.input(W), bias);
  return W.out_scale == 1.0f ? y : g.scale(y, W.out_scale);
}

StepValues step_values(Graph& g, const StepTensors& in) {
  return {g.input(in.positions), g.input(in.slot_mapping), g.input(in.query_start), g.input(in.seq_lens),
          g.input(in.block_tables), in.tokens.shape[0]};
}

ValueId attention_block(Graph& g, const ModelConfig& c, const LlamaLayer& L, ValueId h, int l, const RopeParams& rope,
                        ValueId freq_factors, const AttentionParams& ap, const StepValues& in, const KvCache& kv) {
  const int64_t T = in.n_tokens, Dh = c.head_dim;
  ValueId q = g.reshape(linear(g, h, L.wq, optional_input(g, L.bq)), {T, c.n_heads, Dh});
  ValueId k = g.reshape(linear(g, h, L.wk, optional_input(g, L.bk)), {T, c.n_kv_heads, Dh});
  ValueId v = g.reshape(linear(g, h, L.wv, optional_input(g, L.bv)), {T, c.n_kv_heads, Dh});
  if (c.qk_norm == QkNorm::kPerHead) {
    q = g.rms_norm(q, g.input(L.q_norm), c.rms_eps);
    k = g.rms_norm(k, g.input(L.k_norm), c.rms_eps);
  } else if (c.qk_norm == QkNorm::kFull) {
    q = g.reshape(g.rms_norm(g.reshape(q, {T, int64_t(c.n_heads) * Dh}), g.input(L.q_norm), c.rms_eps), {T, c.n_heads, Dh});
    k = g.reshape(g.rms_norm(g.reshape(k, {T, int64_t(c.n_kv_heads) * Dh}), g.input(L.k_norm), c.rms_eps), {T, c.n_kv_heads, Dh});
  }
  q = g.rope(q, in.positions, rope, freq_factors);
  k = g.rope(k, in.positions, rope, freq_factors);
  ValueId a = g.attention({q, k, v, g.input(kv.k(l)), g.input(kv.v(l)), in.slot_mapping, in.query_start, in.seq_lens,
                           in.block_tables},
                          ap);
  a = g.reshape(a, {T, int64_t(c.n_heads) * Dh});
  return linear(g, a, L.wo);
}

ValueId decoder_output(Graph& g, const ModelConfig& c, const LlamaWeights& w, const StepTensors& in, ValueId x,
                       ValueId* hidden) {
  if (hidden) {
    *hidden = g.rms_norm(x, g.input(w.output_norm), c.rms_eps);
    g.mark_output(*hidden);
  }
  // Only the rows that sample need the (large) output head.
  x = g.embed(x, g.input(in.logit_rows), DType::kF32);
  x = g.rms_norm(x, g.input(w.output_norm), c.rms_eps);
  const ValueId logits = linear(g, x, w.head(c));
  g.mark_output(logits);
  return logits;
}

}  // namespace tessera
