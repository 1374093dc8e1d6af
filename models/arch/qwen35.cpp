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
//
// Hugging Face checkpoints (qwen3_5 / qwen3_5_moe, their text_config; or the text-only
// qwen3_5_text / qwen3_5_moe_text) load as they are stored, into the same weights: the
// zero-centred norms get their 1 + w at load, A_log becomes -exp(A_log), conv1d [C, 1, K] is
// squeezed, fused experts (gate_up_proj [E, 2F, D]) are split as row views, and the value heads
// keep the checkpoint's grouped order (value head h pairs with key head h / (Hv / Hk)), which the
// delta rule is told instead. The vision tower (model.visual.*) and the MTP head (mtp.*) are not
// read.
#include <cmath>

#include "models/arch/architecture.h"
#include "models/arch/blocks.h"
#include "models/arch/gguf_keys.h"
#include "models/arch/graph_context.h"
#include "models/gguf/gguf.h"
#include "models/safetensors/hf_config.h"
#include "models/safetensors/hf_names.h"
#include "models/safetensors/safetensors.h"

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
  c.ssm_tiled_heads = true;
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

// The Gated DeltaNet keys of config.json (the text model's), with transformers' defaults
// (Qwen3_5TextConfig); which layers are linear (layer_types, else every layer but each
// full_attention_interval-th); qwen35moe's expert keys. Errors name the file and key.
Status qwen35_hf_config(const safetensors::JsonObject& o, ModelConfig* c) {
  TS_RETURN_IF_ERROR(safetensors::read_decoder_hf(o, c));
  const safetensors::json* rp = o.find("rope_parameters");
  if (!o.find("partial_rotary_factor") && !(rp && rp->is_object() && rp->contains("partial_rotary_factor"))) {
    c->rope.n_dims = c->head_dim / 4;  // the family's default factor, 0.25
    if (c->rope.n_dims <= 0 || c->rope.n_dims % 2)
      return InvalidArgument(o.file() + ": head_dim " + std::to_string(c->head_dim) +
                             " with the default partial_rotary_factor 0.25 gives an odd rotary size");
  }
  c->qk_norm = QkNorm::kPerHead;
  c->attn_output_gate = true;
  c->ssm_tiled_heads = false;  // the checkpoint's grouped order
  bool gate = true;
  TS_ASSIGN_OR_RETURN(gate, o.get_bool("attn_output_gate", true));
  if (!gate)
    return Unimplemented(o.file() + ": attn_output_gate false is not supported (Qwen3.5 gates every attention output)");
  int key_dim = 0, value_dim = 0;
  TS_ASSIGN_OR_RETURN(c->ssm_conv_kernel, o.get_int32("linear_conv_kernel_dim", 4));
  TS_ASSIGN_OR_RETURN(key_dim, o.get_int32("linear_key_head_dim", 128));
  TS_ASSIGN_OR_RETURN(value_dim, o.get_int32("linear_value_head_dim", 128));
  TS_ASSIGN_OR_RETURN(c->ssm_k_heads, o.get_int32("linear_num_key_heads", 16));
  TS_ASSIGN_OR_RETURN(c->ssm_v_heads, o.get_int32("linear_num_value_heads", 32));
  if (key_dim != value_dim)
    return Unimplemented(o.file() + ": linear_key_head_dim " + std::to_string(key_dim) +
                         " differs from linear_value_head_dim " + std::to_string(value_dim));
  c->ssm_head_dim = key_dim;
  if (c->ssm_conv_kernel < 2 || c->ssm_head_dim <= 0 || c->ssm_k_heads <= 0 || c->ssm_v_heads <= 0 ||
      c->ssm_v_heads % c->ssm_k_heads != 0)
    return InvalidArgument(o.file() + ": inconsistent linear_* keys: linear_conv_kernel_dim " +
                           std::to_string(c->ssm_conv_kernel) + " (>= 2), linear_key_head_dim " +
                           std::to_string(key_dim) + " (> 0), linear_num_key_heads " + std::to_string(c->ssm_k_heads) +
                           " dividing linear_num_value_heads " + std::to_string(c->ssm_v_heads));
  if (const safetensors::json* m = o.find("mlp_only_layers"); m && !(m->is_array() && m->empty()))
    return Unimplemented(o.file() + ": mlp_only_layers " + m->dump() +
                         " is not supported (every layer's MLP is the same kind)");
  c->layer_recurrent.clear();
  if (const safetensors::json* lt = o.find("layer_types")) {
    if (!lt->is_array() || lt->size() != size_t(c->n_layers))
      return InvalidArgument(o.file() + ": layer_types must be a list of num_hidden_layers (" +
                             std::to_string(c->n_layers) + ") names");
    for (const safetensors::json& t : *lt) {
      if (t == "linear_attention" || t == "full_attention") {
        c->layer_recurrent.push_back(t == "linear_attention");
      } else {
        return InvalidArgument(o.file() + ": layer_types holds " + t.dump() + " (linear_attention or full_attention)");
      }
    }
  } else {
    int interval = 4;
    TS_ASSIGN_OR_RETURN(interval, o.get_int32("full_attention_interval", 4));
    if (interval <= 0) return InvalidArgument(o.file() + ": full_attention_interval must be positive");
    if (c->n_layers > (1 << 20))
      return InvalidArgument(o.file() + ": num_hidden_layers " + std::to_string(c->n_layers) + " is implausible");
    for (int l = 0; l < c->n_layers; ++l) c->layer_recurrent.push_back((l + 1) % interval != 0);
  }
  if (c->arch == "qwen35moe") {
    // Every layer's MLP: routed experts (top-k always renormalised) and a gated shared expert.
    TS_ASSIGN_OR_RETURN(c->n_experts, o.get_int32("num_experts"));
    TS_ASSIGN_OR_RETURN(c->n_experts_used, o.get_int32("num_experts_per_tok"));
    TS_ASSIGN_OR_RETURN(c->n_ff_exp, o.get_int32("moe_intermediate_size"));
    TS_ASSIGN_OR_RETURN(c->n_ff_shexp, o.get_int32("shared_expert_intermediate_size"));
    if (c->n_experts < 1 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
      return InvalidArgument(o.file() + ": num_experts_per_tok " + std::to_string(c->n_experts_used) +
                             " must be in [1, num_experts " + std::to_string(c->n_experts) + "]");
    if (c->n_ff_exp <= 0 || c->n_ff_shexp <= 0)
      return InvalidArgument(o.file() + ": moe_intermediate_size and shared_expert_intermediate_size must be positive");
    c->expert_weights_norm = true;
  } else if (o.find("num_experts")) {
    return InvalidArgument(o.file() + ": num_experts in a dense qwen3_5 config (the MoE model_type is qwen3_5_moe)");
  }
  return OkStatus();
}

// Where the text model's modules are: model.language_model.* in the multimodal checkpoint,
// model.* in a text-only one.
std::string hf_base(const safetensors::Checkpoint& ckpt) {
  return ckpt.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
}

// Our per-layer names -> the checkpoint's, beyond the llama table (architecture.cpp).
constexpr safetensors::HfNameRow kQwen35Names[] = {
    {"attn_qkv", "linear_attn.in_proj_qkv"}, {"attn_gate", "linear_attn.in_proj_z"},
    {"ssm_beta", "linear_attn.in_proj_b"},   {"ssm_alpha", "linear_attn.in_proj_a"},
    {"ssm_norm", "linear_attn.norm"},        {"ssm_out", "linear_attn.out_proj"},
};

// Per-layer tensors whose values or stored shape differ from ours (safetensors::HfTensor): the
// zero-centred norms (applied as 1 + w), A_log (GGUF's ssm_a is -exp(A_log)), conv1d [C, 1, K].
struct Qwen35HfRule {
  const char* ours;  // after "blk.N."
  const char* hf;    // after "<base>layers.N."
  safetensors::HfTensor::Values values;
  bool squeeze;
};
constexpr Qwen35HfRule kQwen35HfRules[] = {
    {"attn_norm.weight", "input_layernorm.weight", safetensors::HfTensor::Values::kPlusOne, false},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", safetensors::HfTensor::Values::kPlusOne, false},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", safetensors::HfTensor::Values::kPlusOne, false},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", safetensors::HfTensor::Values::kPlusOne, false},
    {"ssm_a", "linear_attn.A_log", safetensors::HfTensor::Values::kNegExp, false},
    {"ssm_dt.bias", "linear_attn.dt_bias", safetensors::HfTensor::Values::kAsIs, false},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", safetensors::HfTensor::Values::kAsIs, true},
};

class Qwen35 final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override { return {"qwen35", "qwen35moe"}; }
  std::vector<std::pair<std::string, std::string>> hf_model_types() const override {
    return {{"qwen3_5", "qwen35"},
            {"qwen3_5_text", "qwen35"},
            {"qwen3_5_moe", "qwen35moe"},
            {"qwen3_5_moe_text", "qwen35moe"}};
  }
  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override { return qwen35_config(f); }
  Status config_from_hf(const HfConfigInput& in, ModelConfig* c) const override { return qwen35_hf_config(in.json, c); }

  std::string hf_tensor_prefix(const ModelConfig& c, const std::string& name,
                               const safetensors::Checkpoint& ckpt) const override {
    const std::string base = hf_base(ckpt);
    int l = 0;
    std::string stem, suffix;
    if (safetensors::split_layer_name(name, &l, &stem, &suffix))
      for (const auto& row : kQwen35Names)
        if (stem == row.ours) return base + "layers." + std::to_string(l) + "." + row.hf;
    std::string p = Architecture::hf_tensor_prefix(c, name, ckpt);
    if (p.rfind("model.", 0) == 0) p = base + p.substr(6);
    return p;
  }
  std::string hf_expert_prefix(const ModelConfig& c, int layer, const std::string& proj, int e,
                               const safetensors::Checkpoint& ckpt) const override {
    return hf_base(ckpt) + Architecture::hf_expert_prefix(c, layer, proj, e, ckpt).substr(6);
  }
  bool hf_tensor(const ModelConfig& c, const TensorSpec& s, const safetensors::Checkpoint& ckpt,
                 safetensors::HfTensor* out) const override {
    using V = safetensors::HfTensor::Values;
    const std::string base = hf_base(ckpt);
    if (s.name == "output_norm.weight") {
      *out = {base + "norm.weight", V::kPlusOne};
      return true;
    }
    int l = 0;
    std::string rest;
    if (!safetensors::split_layer_rest(s.name, &l, &rest)) return false;
    const std::string p = base + "layers." + std::to_string(l) + ".";
    for (const Qwen35HfRule& r : kQwen35HfRules) {
      if (rest == r.ours) {
        *out = {p + r.hf, r.values, r.squeeze};
        return true;
      }
    }
    // Routed experts fused in two tensors (transformers' layout); a checkpoint with one module per
    // expert takes the default path (hf_expert_prefix).
    if (ckpt.has(p + "mlp.experts.0.gate_proj.weight")) return false;
    const int64_t F = c.n_ff_exp;
    if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight") {
      // [E, 2F, D]: the gate's rows, then the up projection's (transformers' chunk(2))
      *out = {p + "mlp.experts.gate_up_proj", V::kAsIs, false, 2 * F, rest == "ffn_up_exps.weight" ? F : 0};
      return true;
    }
    if (rest == "ffn_down_exps.weight") {
      *out = {p + "mlp.experts.down_proj", V::kAsIs, false, int64_t(c.n_embd)};
      return true;
    }
    return false;
  }
  std::string gguf_unconvertible(const ModelConfig&) const override {
    return "the qwen35.ssm.* keys and llama.cpp's tiled value-head order are not written";
  }
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
    gp.tiled_heads = c.ssm_tiled_heads;           // llama.cpp's GGUF order of the value heads, or the checkpoint's
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
