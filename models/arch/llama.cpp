#include "models/arch/llama.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>

#include "models/gguf/gguf.h"

namespace tessera {

namespace {
// An optional integer key, with |fallback| when absent (a mistyped key is still an error).
Result<int64_t> int_or(const gguf::File& f, const std::string& key, int64_t fallback) {
  if (!f.find(key)) return fallback;
  return f.get_int(key);
}
// An integer key that must fit an int (every size in ModelConfig is one): GGUF stores them as
// u32/u64, and 2^32 + 1 must be an error, not wrap into a small, plausible 1. |fallback| as
// int_or; nullopt makes the key required.
Result<int> int32_key(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
  int64_t v = 0;
  if (fallback) {
    TS_ASSIGN_OR_RETURN(v, int_or(f, key, *fallback));
  } else {
    TS_ASSIGN_OR_RETURN(v, f.get_int(key));
  }
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    return InvalidArgument(f.path() + ": key '" + key + "' value " + std::to_string(v) + " does not fit in 32 bits");
  return int(v);
}
Result<double> float_or(const gguf::File& f, const std::string& key, double fallback) {
  if (!f.find(key)) return fallback;
  return f.get_float(key);
}
// Mixture-of-experts keys: {arch}.expert_count, .expert_used_count, .expert_feed_forward_length,
// .expert_shared_feed_forward_length, .expert_weights_norm.
Status read_moe_config(const gguf::File& f, ModelConfig* c) {
  const std::string a = c->arch + ".";
  TS_ASSIGN_OR_RETURN(c->n_experts, int32_key(f, a + "expert_count", 0));
  if (c->n_experts == 0) {
    if (c->arch == "qwen2moe" || c->arch == "qwen3moe" || c->arch == "olmoe")
      return NotFound(f.path() + ": key '" + a + "expert_count' is missing (required for " + c->arch + ")");
    return OkStatus();
  }
  TS_ASSIGN_OR_RETURN(c->n_experts_used, int32_key(f, a + "expert_used_count"));
  if (c->n_experts < 0 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
    return InvalidArgument(f.path() + ": expert_used_count " + std::to_string(c->n_experts_used) + " must be in [1, expert_count " +
                           std::to_string(c->n_experts) + "]");
  TS_ASSIGN_OR_RETURN(c->n_ff_exp, int32_key(f, a + "expert_feed_forward_length", c->n_ff));
  TS_ASSIGN_OR_RETURN(c->n_ff_shexp, int32_key(f, a + "expert_shared_feed_forward_length", c->arch == "qwen2moe" ? c->n_ff : 0));
  // Mixtral and Qwen3-MoE renormalise the top-k weights; Qwen2-MoE and OLMoE do not.
  c->expert_weights_norm = !(c->arch == "qwen2moe" || c->arch == "olmoe");
  if (f.find(a + "expert_weights_norm")) {
    TS_ASSIGN_OR_RETURN(c->expert_weights_norm, f.get_bool(a + "expert_weights_norm"));
  }
  if (c->n_ff_exp <= 0 || c->n_ff_shexp < 0) return InvalidArgument(f.path() + ": expert FFN widths must be positive");
  return OkStatus();
}

}  // namespace

Result<ModelConfig> llama_config_from_gguf(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  static const char* const kArchs[] = {"llama", "mistral", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "olmoe"};
  if (std::find(std::begin(kArchs), std::end(kArchs), c.arch) == std::end(kArchs))
    return Unimplemented("architecture '" + c.arch + "' is not supported (llama, mistral, qwen2, qwen3, qwen2moe, qwen3moe, olmoe)");
  if (f.find("general.name")) {
    TS_ASSIGN_OR_RETURN(c.name, f.get_string("general.name"));
  }
  const std::string a = c.arch + ".";
  TS_ASSIGN_OR_RETURN(c.n_layers, int32_key(f, a + "block_count"));
  TS_ASSIGN_OR_RETURN(c.n_embd, int32_key(f, a + "embedding_length"));
  TS_ASSIGN_OR_RETURN(c.n_ff, int32_key(f, a + "feed_forward_length"));
  TS_ASSIGN_OR_RETURN(c.n_heads, int32_key(f, a + "attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, int32_key(f, a + "attention.head_count_kv", c.n_heads));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, int32_key(f, a + "context_length", 2048));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ctx_train <= 0)
    return InvalidArgument(f.path() + ": hyperparameters must be positive (block_count " + std::to_string(c.n_layers) +
                           ", embedding_length " + std::to_string(c.n_embd) + ", head_count " + std::to_string(c.n_heads) +
                           ", head_count_kv " + std::to_string(c.n_kv_heads) + ")");
  if (c.n_heads % c.n_kv_heads != 0)
    return InvalidArgument(f.path() + ": head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                           std::to_string(c.n_kv_heads));
  TS_ASSIGN_OR_RETURN(c.head_dim, int32_key(f, a + "attention.key_length", c.n_embd / c.n_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return InvalidArgument(f.path() + ": head dimension " + std::to_string(c.head_dim) + " must be positive and even");
  double d;
  TS_ASSIGN_OR_RETURN(d, float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-5)); c.rms_eps = float(d);
  if (!(c.rms_eps > 0.0f)) return InvalidArgument(f.path() + ": layer_norm_rms_epsilon must be positive");

  RopeParams& r = c.rope;
  r.mode = (c.arch == "llama" || c.arch == "mistral") ? RopeMode::kNormal : RopeMode::kNeox;
  TS_ASSIGN_OR_RETURN(r.n_dims, int32_key(f, a + "rope.dimension_count", c.head_dim));
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
    TS_ASSIGN_OR_RETURN(r.n_ctx_orig, int32_key(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
    // YaRN's attention temperature: mscale is applied inside rope (see core/op.h RopeParams).
  } else if (scaling != "none" && scaling != "llama3") {
    return Unimplemented(f.path() + ": rope scaling type '" + scaling + "'");
  }
  if (r.n_ctx_orig == 0) r.n_ctx_orig = c.n_ctx_train;
  c.qk_norm = (c.arch == "qwen3" || c.arch == "qwen3moe") ? QkNorm::kPerHead : c.arch == "olmoe" ? QkNorm::kFull : QkNorm::kNone;
  c.qkv_bias = c.arch == "qwen2" || c.arch == "qwen2moe";
  TS_RETURN_IF_ERROR(read_moe_config(f, &c));
  return c;
}

std::vector<TensorSpec> llama_tensor_specs(const ModelConfig& c, LlamaWeights* w) {
  const int64_t D = c.n_embd, F = c.n_ff, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
  const int64_t V = c.n_vocab, E = c.n_experts, Fe = c.n_ff_exp, Fs = c.n_ff_shexp;
  std::vector<TensorSpec> s = {
      {"token_embd.weight", {V, D}, true, &w->tok_embd},
      {"output_norm.weight", {D}, true, &w->output_norm},
      {"output.weight", {V, D}, false, &w->output},
      {"rope_freqs.weight", {c.rope.n_dims / 2}, false, &w->rope_freqs},
  };
  const bool per_head = c.qk_norm == QkNorm::kPerHead, full = c.qk_norm == QkNorm::kFull;
  w->layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LlamaLayer& L = w->layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    s.insert(s.end(), {
        {p + "attn_norm.weight", {D}, true, &L.attn_norm},
        {p + "attn_q.weight", {Q, D}, true, &L.wq},
        {p + "attn_k.weight", {KV, D}, true, &L.wk},
        {p + "attn_v.weight", {KV, D}, true, &L.wv},
        {p + "attn_output.weight", {D, Q}, true, &L.wo},
        {p + "attn_q.bias", {Q}, c.qkv_bias, &L.bq},
        {p + "attn_k.bias", {KV}, c.qkv_bias, &L.bk},
        {p + "attn_v.bias", {KV}, c.qkv_bias, &L.bv},
        {p + "attn_q_norm.weight", {full ? Q : c.head_dim}, per_head || full, &L.q_norm},
        {p + "attn_k_norm.weight", {full ? KV : c.head_dim}, per_head || full, &L.k_norm},
        {p + "ffn_norm.weight", {D}, true, &L.ffn_norm},
    });
    if (!c.is_moe()) {
      s.insert(s.end(), {
          {p + "ffn_gate.weight", {F, D}, true, &L.w_gate},
          {p + "ffn_up.weight", {F, D}, true, &L.w_up},
          {p + "ffn_down.weight", {D, F}, true, &L.w_down},
      });
      continue;
    }
    s.insert(s.end(), {
        {p + "ffn_gate_inp.weight", {E, D}, true, &L.router},
        {p + "ffn_gate_exps.weight", {E, Fe, D}, true, &L.gate_exps, true},
        {p + "ffn_up_exps.weight", {E, Fe, D}, true, &L.up_exps, true},
        {p + "ffn_down_exps.weight", {E, D, Fe}, true, &L.down_exps, true},
    });
    if (Fs > 0)
      s.insert(s.end(), {
          {p + "ffn_gate_inp_shexp.weight", {1, D}, true, &L.shexp_gate, false, true},
          {p + "ffn_gate_shexp.weight", {Fs, D}, true, &L.gate_shexp},
          {p + "ffn_up_shexp.weight", {Fs, D}, true, &L.up_shexp},
          {p + "ffn_down_shexp.weight", {D, Fs}, true, &L.down_shexp},
      });
  }
  return s;
}

std::string per_expert_name(const std::string& merged, int e) {
  const std::string suffix = "_exps.weight";
  if (merged.size() < suffix.size() || merged.compare(merged.size() - suffix.size(), suffix.size(), suffix) != 0)
    return merged + "." + std::to_string(e);
  return merged.substr(0, merged.size() - suffix.size()) + "." + std::to_string(e) + ".weight";
}

namespace {
ValueId opt(Graph& g, const Tensor& t) { return t.buffer ? g.input(t) : kNoValue; }

// x W^T (+ bias), times the weight's tensor scale when it has one (NVFP4; the loader divided
// the bias by that scale, so the bias comes out right).
ValueId linear(Graph& g, ValueId x, const WeightTensor& W, ValueId bias = kNoValue) {
  const ValueId y = g.matmul(x, g.input(W), bias);
  return W.out_scale == 1.0f ? y : g.scale(y, W.out_scale);
}

ValueId dense_ffn(Graph& g, const LlamaLayer& L, ValueId h) {
  const ValueId ff = g.swiglu(linear(g, h, L.w_gate), linear(g, h, L.w_up));
  return linear(g, ff, L.w_down);
}

// Routed experts: top-k of the router's softmax, gate/up per chosen expert, SwiGLU, down with the
// weighted sum. A shared expert (qwen2moe) is one more "expert" that every token uses, weighted by
// sigmoid(x . shexp_gate): topk_route over a single logit with sigmoid scoring gives exactly that
// weight (and expert id 0), so no extra op is needed.
// |route_ids|, when given, receives the layer's expert ids ([T, k] i32), kept as a graph output.
ValueId moe_ffn(Graph& g, const ModelConfig& c, const LlamaLayer& L, ValueId h,
                std::vector<ValueId>* route_ids) {
  TopkRouteParams rp;
  rp.k = c.n_experts_used;
  rp.scoring = RouteScoring::kSoftmax;
  rp.renormalize = c.expert_weights_norm;
  auto [ids, weights] = g.topk_route(linear(g, h, L.router), rp);
  if (route_ids) {
    g.mark_output(ids);
    route_ids->push_back(ids);
  }
  const ValueId up = g.matmul_id(h, g.input(L.up_exps), ids);
  const ValueId act = g.swiglu(g.matmul_id(h, g.input(L.gate_exps), ids), up);
  ValueId y = g.matmul_id(act, g.input(L.down_exps), ids, weights);
  if (c.n_ff_shexp > 0) {
    TopkRouteParams sp;
    sp.k = 1;
    sp.scoring = RouteScoring::kSigmoid;
    sp.renormalize = false;
    auto [sid, sw] = g.topk_route(linear(g, h, L.shexp_gate), sp);
    const ValueId sh = g.swiglu(linear(g, h, L.gate_shexp), linear(g, h, L.up_shexp));
    const ValueId down = g.input(L.down_shexp);
    const Tensor& dt = g.tensor(down);
    const ValueId down3 = g.view(down, {1, dt.shape[0], dt.shape[1]}, {dt.shape[0] * dt.stride[0], dt.stride[0], dt.stride[1]}, 0);
    const ValueId ysh = g.matmul_id(sh, down3, sid, sw);
    y = g.add(y, L.down_shexp.out_scale == 1.0f ? ysh : g.scale(ysh, L.down_shexp.out_scale));
  }
  return y;
}
}  // namespace

ValueId build_llama_graph(Graph& g, const ModelConfig& c, const LlamaWeights& w, const StepTensors& in,
                          const KvCache& kv, std::vector<ValueId>* route_ids) {
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
  if (w.tok_embd.out_scale != 1.0f) x = g.scale(x, w.tok_embd.out_scale);  // an NVFP4 embedding's tensor scale
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = w.layers[size_t(l)];
    // Attention block.
    ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
    ValueId q = g.reshape(linear(g, h, L.wq, opt(g, L.bq)), {T, c.n_heads, Dh});
    ValueId k = g.reshape(linear(g, h, L.wk, opt(g, L.bk)), {T, c.n_kv_heads, Dh});
    ValueId v = g.reshape(linear(g, h, L.wv, opt(g, L.bv)), {T, c.n_kv_heads, Dh});
    if (c.qk_norm == QkNorm::kPerHead) {
      q = g.rms_norm(q, g.input(L.q_norm), c.rms_eps);
      k = g.rms_norm(k, g.input(L.k_norm), c.rms_eps);
    } else if (c.qk_norm == QkNorm::kFull) {
      q = g.reshape(g.rms_norm(g.reshape(q, {T, int64_t(c.n_heads) * Dh}), g.input(L.q_norm), c.rms_eps), {T, c.n_heads, Dh});
      k = g.reshape(g.rms_norm(g.reshape(k, {T, int64_t(c.n_kv_heads) * Dh}), g.input(L.k_norm), c.rms_eps), {T, c.n_kv_heads, Dh});
    }
    q = g.rope(q, pos, c.rope, freq);
    k = g.rope(k, pos, c.rope, freq);
    ValueId a = g.attention({q, k, v, g.input(kv.k(l)), g.input(kv.v(l)), slots, qstart, lens, tables}, ap);
    a = g.reshape(a, {T, int64_t(c.n_heads) * Dh});
    x = g.add(x, linear(g, a, L.wo));
    // Feed-forward block.
    h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
    x = g.add(x, c.is_moe() ? moe_ffn(g, c, L, h, route_ids) : dense_ffn(g, L, h));
  }
  // Only the rows that sample need the (large) output head.
  x = g.embed(x, g.input(in.logit_rows), DType::kF32);
  x = g.rms_norm(x, g.input(w.output_norm), c.rms_eps);
  const ValueId logits = linear(g, x, c.tied_output ? w.tok_embd : w.output);
  g.mark_output(logits);
  return logits;
}

}  // namespace tessera
