#include "models/arch/architecture.h"

#include "models/gguf/metadata_builder.h"
#include "models/safetensors/hf_config.h"
#include "models/safetensors/hf_names.h"

namespace tessera {

const char* layer_memory_name(LayerMemoryKind k) {
  switch (k) {
    case LayerMemoryKind::kFullAttention: return "full";
    case LayerMemoryKind::kSlidingWindow: return "window";
    case LayerMemoryKind::kRecurrent: return "recurrent";
    case LayerMemoryKind::kNone: return "none";
  }
  return "?";
}

Status Architecture::config_from_hf(const HfConfigInput& in, ModelConfig* c) const {
  return safetensors::read_decoder_hf(in.json, c);
}

// Our per-layer name (after "blk.N.") -> the HF module path after "model.layers.N.".
namespace {
constexpr safetensors::HfNameRow kLayerNames[] = {
    {"attn_norm", "input_layernorm"},        {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},          {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},     {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},     {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},           {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},           {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"}, {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
};
}  // namespace

std::string Architecture::hf_tensor_prefix(const ModelConfig&, const std::string& name, const safetensors::Checkpoint&) const {
  if (name == "token_embd.weight") return "model.embed_tokens";
  if (name == "output_norm.weight") return "model.norm";
  if (name == "output.weight") return "lm_head";
  int l = 0;
  std::string stem, suffix;
  if (!safetensors::split_layer_name(name, &l, &stem, &suffix)) return "";
  for (const auto& row : kLayerNames)
    if (stem == row.ours) return "model.layers." + std::to_string(l) + "." + row.hf;
  return "";
}

bool Architecture::hf_tensor(const ModelConfig&, const TensorSpec&, const safetensors::Checkpoint&,
                             safetensors::HfTensor*) const {
  return false;
}

std::string Architecture::hf_expert_prefix(const ModelConfig&, int layer, const std::string& proj, int e,
                                           const safetensors::Checkpoint&) const {
  const char* hf = proj == "ffn_gate" ? "gate_proj" : proj == "ffn_up" ? "up_proj" : "down_proj";
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." + hf;
}

void Architecture::add_gguf_config(gguf::MetadataBuilder& w, const ModelConfig& c, const safetensors::LongRopeFactors*) const {
  add_decoder_gguf_config(w, c);
}

void add_decoder_gguf_config(gguf::MetadataBuilder& w, const ModelConfig& c) {
  const std::string a = c.arch + ".";
  w.u32(a + "block_count", c.n_layers);
  w.u32(a + "context_length", c.n_ctx_train);
  w.u32(a + "embedding_length", c.n_embd);
  w.u32(a + "feed_forward_length", c.n_ff);
  w.u32(a + "attention.head_count", c.n_heads);
  w.u32(a + "attention.head_count_kv", c.n_kv_heads);
  w.u32(a + "attention.key_length", c.head_dim);
  w.u32(a + "attention.value_length", c.head_dim);
  w.f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.f32(a + "rope.freq_base", c.rope.freq_base);
  w.u32(a + "rope.dimension_count", c.rope.n_dims);
  w.u32(a + "vocab_size", c.n_vocab);
  if (c.rope.ext_factor > 0.0f) {
    w.str(a + "rope.scaling.type", "yarn");
    w.f32(a + "rope.scaling.factor", 1.0 / c.rope.freq_scale);
    w.u32(a + "rope.scaling.original_context_length", c.rope.n_ctx_orig);
  } else if (c.rope.freq_scale != 1.0f) {
    w.str(a + "rope.scaling.type", "linear");
    w.f32(a + "rope.scaling.factor", 1.0 / c.rope.freq_scale);
  }
  if (c.is_moe()) {
    w.u32(a + "expert_count", c.n_experts);
    w.u32(a + "expert_used_count", c.n_experts_used);
    w.u32(a + "expert_feed_forward_length", c.n_ff_exp);
    if (c.n_ff_shexp > 0) w.u32(a + "expert_shared_feed_forward_length", c.n_ff_shexp);
    w.flag(a + "expert_weights_norm", c.expert_weights_norm);
  }
}

std::vector<LayerMemory> Architecture::memory_layout(const ModelConfig& c) const {
  std::vector<LayerMemory> m(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.is_encoder())
      m[size_t(l)].kind = LayerMemoryKind::kNone;
    else if (c.is_recurrent(l))
      m[size_t(l)].kind = LayerMemoryKind::kRecurrent;
    else if (c.is_sliding(l))
      m[size_t(l)] = {LayerMemoryKind::kSlidingWindow, c.sliding_window};
  }
  return m;
}

// FLOPs: 2 per weight per token through the layers (MoE: the routed experts only), 2 per
// output-head weight per sampled row, 4 * head_dim per head and layer per query-key pair (QK
// and PV), doubled for softmax.
CostShape Architecture::cost_shape(const ModelConfig& c) const {
  const double d = c.n_embd, q = double(c.n_heads) * c.head_dim, kv = double(c.n_kv_heads) * c.head_dim;
  const double ff = c.is_moe() ? double(c.n_experts_used) * c.n_ff_exp + c.n_ff_shexp : double(c.n_ff);
  const double layer_weights = d * q * 2 + d * kv * 2 + 3 * d * ff;
  return {2 * layer_weights * c.n_layers, 2 * d * c.n_vocab, 8 * q * c.n_layers};
}

}  // namespace tessera
