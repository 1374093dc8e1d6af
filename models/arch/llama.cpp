#include "models/arch/llama.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "models/arch/blocks.h"
#include "models/gguf/gguf.h"

namespace tessera {

namespace {
// Mixture-of-experts keys: {arch}.expert_count, .expert_used_count, .expert_feed_forward_length,
// .expert_shared_feed_forward_length, .expert_weights_norm.
Status read_moe_config(const gguf::File& f, ModelConfig* c) {
  const std::string a = c->arch + ".";
  TS_ASSIGN_OR_RETURN(c->n_experts, gguf_int32_key(f, a + "expert_count", 0));
  if (c->n_experts == 0) {
    if (c->arch == "qwen2moe" || c->arch == "qwen3moe" || c->arch == "olmoe")
      return NotFound(f.path() + ": key '" + a + "expert_count' is missing (required for " + c->arch + ")");
    return OkStatus();
  }
  TS_ASSIGN_OR_RETURN(c->n_experts_used, gguf_int32_key(f, a + "expert_used_count"));
  if (c->n_experts < 0 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
    return InvalidArgument(f.path() + ": expert_used_count " + std::to_string(c->n_experts_used) + " must be in [1, expert_count " +
                           std::to_string(c->n_experts) + "]");
  TS_ASSIGN_OR_RETURN(c->n_ff_exp, gguf_int32_key(f, a + "expert_feed_forward_length", c->n_ff));
  TS_ASSIGN_OR_RETURN(c->n_ff_shexp, gguf_int32_key(f, a + "expert_shared_feed_forward_length", c->arch == "qwen2moe" ? c->n_ff : 0));
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
    return Unimplemented("architecture '" + c.arch + "' is not supported (llama, mistral, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, gemma3, phi3, bert)");
  TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
  c.rope.mode = (c.arch == "llama" || c.arch == "mistral") ? RopeMode::kNormal : RopeMode::kNeox;
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
          {p + "ffn_down_shexp.weight", {D, Fs}, true, &L.down_shexp, false, false, true},
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
                          const KvCache& kv, std::vector<ValueId>* route_ids, ValueId* hidden) {
  const ValueId tokens = g.input(in.tokens);
  const StepValues sv = step_values(g, in);
  const ValueId freq = optional_input(g, w.rope_freqs);
  AttentionParams ap;
  ap.scale = float(1.0 / std::sqrt(double(c.head_dim)));

  ValueId x = g.embed(g.input(w.tok_embd), tokens, in.act);  // [T, D]
  if (w.tok_embd.out_scale != 1.0f) x = g.scale(x, w.tok_embd.out_scale);  // an NVFP4 embedding's tensor scale
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayer& L = w.layers[size_t(l)];
    ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
    x = g.add(x, attention_block(g, c, L, h, l, c.rope, freq, ap, sv, kv));
    h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
    x = g.add(x, c.is_moe() ? moe_ffn(g, c, L, h, route_ids) : dense_ffn(g, L, h));
  }
  return decoder_output(g, c, w, in, x, hidden);
}

}  // namespace tessera
