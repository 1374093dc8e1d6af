// The Qwen3.5 family graph builder (text decoder; GGUF architectures "qwen35" and "qwen35moe"), a
// hybrid: in every |full_attention_interval| layers (4), three are Gated DeltaNet layers and the
// fourth gated full attention.
//
// Gated DeltaNet layer (linear attention, recurrent state per sequence):
//   qkv = attn_qkv(h) -> a short causal depthwise conv (ssm_conv1d, K taps, its last K-1 inputs
//   kept per sequence) with SiLU -> q [Hk, Dk], k [Hk, Dk], v [Hv, Dv] (in that order);
//   alpha = ssm_alpha(h), beta = ssm_beta(h) [Hv]; the gated delta rule over the recurrent
//   state [Hv, Dk, Dv] with the log-decay ssm_a * softplus(alpha + ssm_dt) (ssm_a = -exp(A_log),
//   as llama.cpp's converter stores it) and the write strength sigmoid(beta), q and k L2-normed;
//   then a gated RMSNorm (ssm_norm(o) * silu(attn_gate(h))) and ssm_out.
// Full-attention layer: attn_q gives each head's query and an output gate side by side
// ([H, 2 * head_dim]); per-head QK RMSNorm; partial rotary embedding (NeoX pairs over
// rope.dimension_count dims: for text positions Qwen's interleaved multi-section RoPE gives every
// section the same position, which is plain RoPE); attention; out * sigmoid(gate); attn_output.
// Every layer: pre-norm (attn_norm), residual, pre-FFN norm (post_attention_norm), then a SwiGLU
// FFN (qwen35) or a mixture of experts (qwen35moe: softmax over the router's logits, top-k
// renormalised, SwiGLU experts, plus a shared SwiGLU expert scaled by sigmoid(its 1-row gate)).
//
// llama.cpp's converter stores the RMSNorm weights as 1 + w (Qwen's zero-centred norms) except the
// gated norm's, and reorders the value heads into "tiled" order (value head h pairs with key head
// h % Hk) for ggml's broadcast: the delta rule is told so (GatedDeltaNetParams::tiled_heads).
// NOTE: GGUF only for now (no HF checkpoint mapping).
#include <cmath>

#include "models/arch/architecture.h"
#include "models/arch/blocks.h"
#include "models/arch/gguf_keys.h"
#include "models/arch/graph_context.h"
#include "models/gguf/gguf.h"

namespace tessera {

namespace {

struct Qwen35Layer {
  WeightTensor attn_norm, post_attn_norm;
  // Gated DeltaNet layers
  WeightTensor wqkv, wgate, conv, dt_bias, decay_rate, w_beta, w_alpha, ssm_norm, ssm_out;
  // Full-attention layers
  AttentionWeights attn;
  GluFfnWeights ffn;  // qwen35
  MoeWeights moe;     // qwen35moe
};
struct Qwen35Weights : ArchWeights {
  std::vector<Qwen35Layer> layers;
};

Result<ModelConfig> qwen35_config(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
  const std::string a = c.arch + ".";
  // Multi-token-prediction layers follow the decoder's (block_count includes them); unused here.
  int nextn = 0;
  TS_ASSIGN_OR_RETURN(nextn, gguf_int32_key(f, a + "nextn_predict_layers", 0));
  if (nextn < 0 || nextn >= c.n_layers)
    return InvalidArgument(f.path() + ": " + a + "nextn_predict_layers " + std::to_string(nextn) + " outside [0, block_count)");
  c.n_layers -= nextn;
  c.rope.mode = RopeMode::kNeox;
  c.qk_norm = QkNorm::kPerHead;
  c.attn_output_gate = true;
  // qwen35moe: every layer's FFN is a mixture of experts with a shared expert; the router's top-k
  // weights are always renormalised.
  TS_RETURN_IF_ERROR(read_moe_config(f, &c, /*required=*/c.arch == "qwen35moe", /*weights_norm=*/true, /*shared_default=*/true));
  if (c.arch == "qwen35" && c.is_moe())
    return InvalidArgument(f.path() + ": architecture qwen35 with " + a + "expert_count set (the MoE variant is qwen35moe)");
  int inner = 0, interval = 4;
  TS_ASSIGN_OR_RETURN(c.ssm_conv_kernel, gguf_int32_key(f, a + "ssm.conv_kernel"));
  TS_ASSIGN_OR_RETURN(inner, gguf_int32_key(f, a + "ssm.inner_size"));
  TS_ASSIGN_OR_RETURN(c.ssm_head_dim, gguf_int32_key(f, a + "ssm.state_size"));
  TS_ASSIGN_OR_RETURN(c.ssm_v_heads, gguf_int32_key(f, a + "ssm.time_step_rank"));
  TS_ASSIGN_OR_RETURN(c.ssm_k_heads, gguf_int32_key(f, a + "ssm.group_count"));
  TS_ASSIGN_OR_RETURN(interval, gguf_int32_key(f, a + "full_attention_interval", 4));
  if (c.ssm_conv_kernel < 2 || c.ssm_head_dim <= 0 || c.ssm_k_heads <= 0 || c.ssm_v_heads % c.ssm_k_heads != 0 ||
      int64_t(c.ssm_v_heads) * c.ssm_head_dim != inner || interval <= 0)
    return InvalidArgument(f.path() + ": inconsistent " + a + "ssm.* keys: conv_kernel " + std::to_string(c.ssm_conv_kernel) +
                           " (>= 2), state_size " + std::to_string(c.ssm_head_dim) + ", group_count " +
                           std::to_string(c.ssm_k_heads) + " dividing time_step_rank " + std::to_string(c.ssm_v_heads) +
                           ", inner_size " + std::to_string(inner) + " = time_step_rank x state_size, full_attention_interval " +
                           std::to_string(interval));
  if (size_t(c.n_layers) > f.tensors().size())
    return InvalidArgument(f.path() + ": block_count " + std::to_string(c.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  c.layer_recurrent.assign(size_t(c.n_layers), 0);
  // Which layers are recurrent: attention.recurrent_layers (one bool per block, MTP blocks
  // included) where the file has it, else every layer but each |interval|-th.
  if (const gguf::Value* v = f.find(a + "attention.recurrent_layers")) {
    if (v->type != gguf::ValueType::kArray || v->array_type != gguf::ValueType::kBool ||
        v->array.size() < size_t(c.n_layers))
      return InvalidArgument(f.path() + ": " + a + "attention.recurrent_layers must be an array of at least " +
                             std::to_string(c.n_layers) + " bools");
    for (int l = 0; l < c.n_layers; ++l) c.layer_recurrent[size_t(l)] = v->array[size_t(l)].b;
  } else {
    for (int l = 0; l < c.n_layers; ++l) c.layer_recurrent[size_t(l)] = (l + 1) % interval != 0;
  }
  return c;
}

class Qwen35 final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override { return {"qwen35", "qwen35moe"}; }
  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override { return qwen35_config(f); }
  std::unique_ptr<ArchWeights> new_weights() const override { return std::make_unique<Qwen35Weights>(); }

  std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* aw) const override {
    auto* w = static_cast<Qwen35Weights*>(aw);
    const int64_t D = c.n_embd, Hd = c.head_dim;
    const int64_t Hv = c.ssm_v_heads, KD = int64_t(c.ssm_k_heads) * c.ssm_head_dim, VD = Hv * c.ssm_head_dim;
    std::vector<TensorSpec> s = decoder_io_specs(c, w);
    w->layers.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      Qwen35Layer& L = w->layers[size_t(l)];
      const std::string p = "blk." + std::to_string(l) + ".";
      s.push_back({p + "attn_norm.weight", {D}, true, &L.attn_norm});
      s.push_back({p + "post_attention_norm.weight", {D}, true, &L.post_attn_norm});
      if (c.is_recurrent(l)) {
        s.insert(s.end(), {
            {p + "attn_qkv.weight", {2 * KD + VD, D}, true, &L.wqkv},
            {p + "attn_gate.weight", {VD, D}, true, &L.wgate},
            // Read by ssm_conv, not a matmul: kept in the file's [channels, taps] rows.
            {p + "ssm_conv1d.weight", {2 * KD + VD, c.ssm_conv_kernel}, true, &L.conv, false, false, false, 0, 0, true},
            {p + "ssm_dt.bias", {Hv}, true, &L.dt_bias},
            {p + "ssm_a", {Hv}, true, &L.decay_rate},
            {p + "ssm_beta.weight", {Hv, D}, true, &L.w_beta},
            {p + "ssm_alpha.weight", {Hv, D}, true, &L.w_alpha},
            {p + "ssm_norm.weight", {c.ssm_head_dim}, true, &L.ssm_norm},
            {p + "ssm_out.weight", {D, VD}, true, &L.ssm_out},
        });
      } else {
        s.insert(s.end(), {
            {p + "attn_q.weight", {2 * int64_t(c.n_heads) * Hd, D}, true, &L.attn.wq},
            {p + "attn_k.weight", {int64_t(c.n_kv_heads) * Hd, D}, true, &L.attn.wk},
            {p + "attn_v.weight", {int64_t(c.n_kv_heads) * Hd, D}, true, &L.attn.wv},
            {p + "attn_output.weight", {D, int64_t(c.n_heads) * Hd}, true, &L.attn.wo},
            {p + "attn_q_norm.weight", {Hd}, true, &L.attn.q_norm},
            {p + "attn_k_norm.weight", {Hd}, true, &L.attn.k_norm},
        });
      }
      if (c.is_moe()) add_moe_specs(&s, p, c, &L.moe);
      else add_glu_specs(&s, p, D, c.n_ff, &L.ffn);
    }
    return s;
  }

  std::vector<RecurrentLayerSpec> recurrent_states(const ModelConfig& c) const override {
    std::vector<RecurrentLayerSpec> out;
    const int64_t channels = 2 * int64_t(c.ssm_k_heads) * c.ssm_head_dim + int64_t(c.ssm_v_heads) * c.ssm_head_dim;
    for (int l = 0; l < c.n_layers; ++l)
      if (c.is_recurrent(l))
        out.push_back({l,
                       {{"conv", DType::kF32, {c.ssm_conv_kernel - 1, channels}},
                        {"ssm", DType::kF32, {c.ssm_v_heads, c.ssm_head_dim, c.ssm_head_dim}}}});
    return out;
  }

  CostShape cost_shape(const ModelConfig& c) const override {
    const double D = c.n_embd, Hd = c.head_dim, F = c.n_ff;
    const double KD = double(c.ssm_k_heads) * c.ssm_head_dim, VD = double(c.ssm_v_heads) * c.ssm_head_dim;
    double weights = 0, pairs = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      if (c.is_recurrent(l)) {
        // projections, and the delta rule's ~4 passes over the [Dk, Dv] state per head and token
        weights += D * (2 * KD + 2 * VD + 2 * c.ssm_v_heads) + VD * D + 2 * VD * c.ssm_head_dim;
      } else {
        weights += D * (2 * c.n_heads * Hd + 2 * c.n_kv_heads * Hd) + c.n_heads * Hd * D;
        pairs += 8 * c.n_heads * Hd;
      }
      // the FFN: dense, or the router, k experts and the shared one per token
      weights += c.is_moe() ? D * c.n_experts + 3 * D * (double(c.n_experts_used) * c.n_ff_exp + c.n_ff_shexp) : 3 * D * F;
    }
    return {2 * weights, 2 * D * c.n_vocab, pairs};
  }

  ValueId build_graph(GraphContext& ctx, const ArchWeights& aw) const override {
    const auto& w = static_cast<const Qwen35Weights&>(aw);
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    ValueId x = ctx.embed_tokens(w.tok_embd);  // [T, D]
    for (int l = 0; l < c.n_layers; ++l) {
      const Qwen35Layer& L = w.layers[size_t(l)];
      const ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
      x = g.add(x, c.is_recurrent(l) ? delta_net(ctx, L, h, l) : gated_attention(ctx, L, h, l));
      const ValueId hf = g.rms_norm(x, g.input(L.post_attn_norm), c.rms_eps);
      x = g.add(x, c.is_moe() ? ctx.moe_ffn(L.moe, hf) : ctx.glu_ffn(L.ffn, hf));
    }
    return ctx.decoder_output(w, x);
  }

 private:
  static ValueId delta_net(GraphContext& ctx, const Qwen35Layer& L, ValueId h, int layer) {
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const int64_t T = ctx.n_tokens, Hk = c.ssm_k_heads, Hv = c.ssm_v_heads, Dh = c.ssm_head_dim;
    const ValueId conv_state = ctx.recurrent_state(layer, "conv"), ssm_state = ctx.recurrent_state(layer, "ssm");
    if (conv_state == kNoValue || ssm_state == kNoValue) return kNoValue;
    SsmConvParams cp;
    cp.silu = true;
    const ValueId mixed =
        g.ssm_conv({ctx.linear(h, L.wqkv), g.input(L.conv), conv_state, ctx.query_start, ctx.state_slots}, cp);  // [T, C]
    const Tensor& mt = g.tensor(mixed);
    const int64_t es = mt.stride[1], row = mt.stride[0];
    Graph::GatedDeltaNetInputs in{};
    in.q = g.view(mixed, {T, Hk, Dh}, {row, Dh * es, es}, 0);
    in.k = g.view(mixed, {T, Hk, Dh}, {row, Dh * es, es}, Hk * Dh * es);
    in.v = g.view(mixed, {T, Hv, Dh}, {row, Dh * es, es}, 2 * Hk * Dh * es);
    in.alpha = ctx.linear(h, L.w_alpha);
    in.beta = ctx.linear(h, L.w_beta);
    in.decay_rate = g.input(L.decay_rate);
    in.dt_bias = g.input(L.dt_bias);
    in.state = ssm_state;
    in.query_start = ctx.query_start;
    in.state_slots = ctx.state_slots;
    GatedDeltaNetParams gp;
    gp.eps = c.rms_eps;
    gp.tiled_heads = true;  // llama.cpp's GGUF order of the value heads
    const ValueId o = g.gated_delta_net(in, gp);  // [T, Hv, Dh]
    const ValueId z = g.reshape(ctx.linear(h, L.wgate), {T, Hv, Dh});
    const ValueId gated = g.swiglu(z, g.rms_norm(o, g.input(L.ssm_norm), c.rms_eps));  // norm(o) * silu(z)
    return ctx.linear(g.reshape(gated, {T, Hv * Dh}), L.ssm_out);
  }

  static ValueId gated_attention(GraphContext& ctx, const Qwen35Layer& L, ValueId h, int layer) {
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const int64_t T = ctx.n_tokens, H = c.n_heads, Hkv = c.n_kv_heads, Dh = c.head_dim;
    const ValueId qg = ctx.linear(h, L.attn.wq);  // [T, H * 2 * Dh]: per head, the query then its gate
    const Tensor& qt = g.tensor(qg);
    const int64_t es = qt.stride[1], row = qt.stride[0];
    ValueId q = g.view(qg, {T, H, Dh}, {row, 2 * Dh * es, es}, 0);
    const ValueId gate = g.view(qg, {T, H, Dh}, {row, 2 * Dh * es, es}, Dh * es);
    ValueId k = g.reshape(ctx.linear(h, L.attn.wk), {T, Hkv, Dh});
    const ValueId v = g.reshape(ctx.linear(h, L.attn.wv), {T, Hkv, Dh});
    q = g.rms_norm(q, g.input(L.attn.q_norm), c.rms_eps);
    k = g.rms_norm(k, g.input(L.attn.k_norm), c.rms_eps);
    q = g.rope(q, ctx.positions, c.rope);
    k = g.rope(k, ctx.positions, c.rope);
    AttentionParams ap;
    const ValueId o = ctx.paged_attention(q, k, v, layer, ap);  // [T, H, Dh]
    const ValueId gated = g.glu(gate, o, GluKind::kSigmoid);    // o * sigmoid(gate)
    return ctx.linear(g.reshape(gated, {T, H * Dh}), L.attn.wo);
  }
};

}  // namespace

const Architecture& qwen35_architecture() {
  static const Qwen35 arch;
  return arch;
}

}  // namespace tessera
