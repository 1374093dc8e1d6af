// The gpt-oss family graph builder (OpenAI gpt-oss 20B/120B; GGUF architecture "gpt-oss"):
//  - attention with q/k/v/o biases and a learned sink logit per head that joins each row's
//    softmax denominator (attention's optional sinks input);
//  - layers alternate a 128-token sliding window (even layers) and full attention;
//  - NeoX RoPE with YaRN scaling (factor 32 over a 4096-token original context);
//  - every FFN is a mixture of experts: a router with a bias, softmax over the top-k logits
//    (= softmax over all, renormalised over the chosen), gate/up/down with per-expert biases and
//    the clamped SwiGLU between them (GluKind::kSwigluOai, alpha 1.702, limit 7);
//  - pre-norm RMSNorm before attention and before the MoE (GGUF's post_attention_norm), final
//    RMSNorm and an untied output head.
// Experts are MXFP4 in the released checkpoints; llama.cpp's converter stores them as GGUF MXFP4
// blocks (one E8M0 scale byte and 16 bytes of E2M1 pairs per 32 weights) with gate_up split into
// ffn_gate_exps and ffn_up_exps. Layout as the converter writes it: tests/model/gpt_oss/make_gpt_oss.py.
//
// NOTE: Hugging Face's config asks for YaRN with truncate = false (correction dims not rounded);
// llama.cpp's rope (and ours, which follows it) rounds them, so long-range rotations differ from
// transformers' by a fraction of a dimension's ramp. docs/gpt-oss.md has the measured effect.
#include <string>
#include <tuple>

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

struct GptOssLayer {
  WeightTensor attn_norm, post_attn_norm;
  AttentionWeights attn;  // biases and sinks bound
  WeightTensor bo;        // attn_output.bias [D]
  MoeWeights moe;         // router and expert biases bound
};
struct GptOssWeights : ArchWeights {
  std::vector<GptOssLayer> layers;
};

// The clamped SwiGLU of gpt-oss's experts.
constexpr GluParams kExpertGlu{GluKind::kSwigluOai, 1.702f, 7.0f};

// Reads the config from the gpt-oss.* keys. The window (attention.sliding_window) is required, as
// llama.cpp requires it; attention.sliding_window_pattern n (default 2) makes every n-th layer
// full, so layer l slides when l % n < n - 1 (gpt-oss: the even layers).
Result<ModelConfig> gpt_oss_config(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "gpt-oss") return Internal("gpt_oss_config_from_gguf: architecture '" + c.arch + "'");
  TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
  const std::string a = c.arch + ".";
  int value_length = 0;
  TS_ASSIGN_OR_RETURN(value_length, gguf_int32_key(f, a + "attention.value_length", c.head_dim));
  if (value_length != c.head_dim)
    return Unimplemented(f.path() + ": attention.value_length " + std::to_string(value_length) +
                         " differs from key_length " + std::to_string(c.head_dim));
  c.rope.mode = RopeMode::kNeox;
  c.qkv_bias = true;
  TS_RETURN_IF_ERROR(read_moe_config(f, &c, /*required=*/true, /*weights_norm=*/true, /*shared_default=*/false));
  if (c.n_ff_shexp > 0)
    return Unimplemented(f.path() + ": " + a + "expert_shared_feed_forward_length: gpt-oss has no shared expert");
  if (c.n_ff_exp % 32 != 0 || c.n_embd % 32 != 0)
    return InvalidArgument(f.path() + ": embedding_length " + std::to_string(c.n_embd) +
                           " and expert_feed_forward_length " + std::to_string(c.n_ff_exp) +
                           " must be multiples of 32 (MXFP4 blocks)");
  TS_ASSIGN_OR_RETURN(c.sliding_window, gguf_int32_key(f, a + "attention.sliding_window"));
  if (c.sliding_window <= 0)
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window " + std::to_string(c.sliding_window) +
                           " must be positive");
  int pattern = 2;
  TS_ASSIGN_OR_RETURN(pattern, gguf_int32_key(f, a + "attention.sliding_window_pattern", 2));
  if (pattern < 0)
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window_pattern must not be negative");
  // Each layer has tensors of its own: checked before a per-layer table is sized by the count.
  if (size_t(c.n_layers) > f.tensors().size())
    return InvalidArgument(f.path() + ": block_count " + std::to_string(c.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  c.layer_sliding.assign(size_t(c.n_layers), 0);
  for (int l = 0; l < c.n_layers; ++l) c.layer_sliding[size_t(l)] = pattern == 0 || l % pattern < pattern - 1;
  // Both kinds of layer rotate alike unless the file gives the window layers a base of their own.
  c.rope_sliding = c.rope;
  double base = c.rope.freq_base;
  TS_ASSIGN_OR_RETURN(base, gguf_float_or(f, a + "rope.freq_base_swa", c.rope.freq_base));
  c.rope_sliding.freq_base = float(base);
  if (!(c.rope_sliding.freq_base > 0))
    return InvalidArgument(f.path() + ": " + a + "rope.freq_base_swa must be positive");
  return c;
}

// config.json (transformers' GptOssConfig): the decoder keys and YaRN through read_decoder_hf, the
// experts (intermediate_size is each expert's width), the window and which layers slide
// (layer_types, else every even layer).
Status gpt_oss_hf_config(const safetensors::JsonObject& o, ModelConfig* c) {
  TS_RETURN_IF_ERROR(safetensors::read_decoder_hf(o, c));
  bool bias = true;
  TS_ASSIGN_OR_RETURN(bias, o.get_bool("attention_bias", true));
  if (!bias) return Unimplemented(o.file() + ": attention_bias false is not supported (gpt-oss's q/k/v/o have biases)");
  c->qkv_bias = true;
  TS_ASSIGN_OR_RETURN(c->n_experts, o.get_int32("num_local_experts"));
  TS_ASSIGN_OR_RETURN(c->n_experts_used, o.find("num_experts_per_tok") ? o.get_int32("num_experts_per_tok")
                                                                       : o.get_int32("experts_per_token"));
  if (c->n_experts < 1 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
    return InvalidArgument(o.file() + ": num_experts_per_tok " + std::to_string(c->n_experts_used) +
                           " must be in [1, num_local_experts " + std::to_string(c->n_experts) + "]");
  c->n_ff_exp = c->n_ff;
  c->n_ff_shexp = 0;
  c->expert_weights_norm = true;
  double limit = 7.0;
  TS_ASSIGN_OR_RETURN(limit, o.get_float("swiglu_limit", 7.0));
  if (limit != double(kExpertGlu.limit))
    return Unimplemented(o.file() + ": swiglu_limit " + std::to_string(limit) +
                         " is not supported (gpt-oss clamps at " + std::to_string(kExpertGlu.limit) + ")");
  TS_ASSIGN_OR_RETURN(c->sliding_window, o.get_int32("sliding_window"));
  if (c->sliding_window <= 0)
    return InvalidArgument(o.file() + ": sliding_window " + std::to_string(c->sliding_window) + " must be positive");
  if (c->n_layers > (1 << 20))
    return InvalidArgument(o.file() + ": num_hidden_layers " + std::to_string(c->n_layers) + " is implausible");
  c->layer_sliding.assign(size_t(c->n_layers), 0);
  if (const safetensors::json* lt = o.find("layer_types")) {
    if (!lt->is_array() || lt->size() != size_t(c->n_layers))
      return InvalidArgument(o.file() + ": layer_types must be a list of num_hidden_layers (" +
                             std::to_string(c->n_layers) + ") names");
    for (size_t l = 0; l < lt->size(); ++l) {
      const safetensors::json& t = (*lt)[l];
      if (t != "sliding_attention" && t != "full_attention")
        return InvalidArgument(o.file() + ": layer_types holds " + t.dump() + " (sliding_attention or full_attention)");
      c->layer_sliding[l] = t == "sliding_attention";
    }
  } else {
    for (int l = 0; l < c->n_layers; ++l) c->layer_sliding[size_t(l)] = l % 2 == 0;
  }
  c->rope_sliding = c->rope;
  return OkStatus();
}

class GptOss final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override { return {"gpt-oss"}; }
  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override { return gpt_oss_config(f); }
  std::vector<std::pair<std::string, std::string>> hf_model_types() const override { return {{"gpt_oss", "gpt-oss"}}; }
  Status config_from_hf(const HfConfigInput& in, ModelConfig* c) const override {
    return gpt_oss_hf_config(in.json, c);
  }
  std::string hf_tensor_prefix(const ModelConfig& c, const std::string& name,
                               const safetensors::Checkpoint& ckpt) const override {
    int l = 0;
    std::string stem, suffix;
    if (safetensors::split_layer_name(name, &l, &stem, &suffix)) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      if (stem == "post_attention_norm") return p + "post_attention_layernorm";
      if (stem == "ffn_gate_inp") return p + "mlp.router";
    }
    return Architecture::hf_tensor_prefix(c, name, ckpt);
  }
  // The sinks (no .weight in the checkpoint) and the experts: MXFP4 blocks as released, or
  // dequantised, stored transposed with gate and up interleaved: gate_up_proj [E, D, 2F]
  // (gate = [..., ::2], up = [..., 1::2]), down_proj [E, F, D]; gate_up_proj_bias [E, 2F]
  // interleaved the same way, down_proj_bias [E, D].
  bool hf_tensor(const ModelConfig& c, const TensorSpec& s, const safetensors::Checkpoint& ckpt,
                 safetensors::HfTensor* out) const override {
    using V = safetensors::HfTensor::Values;
    int l = 0;
    std::string rest;
    if (!safetensors::split_layer_rest(s.name, &l, &rest)) return false;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t F2 = 2 * int64_t(c.n_ff_exp), D = c.n_embd;
    const bool up = rest.rfind("ffn_up_exps.", 0) == 0;
    // The released checkpoints keep the experts in MXFP4, not transposed: gate_up_proj_blocks
    // [E, 2F, D/32, 16] (gate = even rows), down_proj_blocks [E, D, F/32, 16], with their _scales.
    const bool mxfp4 = ckpt.has(p + "mlp.experts.gate_up_proj_blocks");
    if (rest == "attn_sinks.weight") {
      *out = {p + "self_attn.sinks"};
    } else if (mxfp4 && (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight")) {
      *out = {p + "mlp.experts.gate_up_proj", V::kAsIs, false, F2, up ? 1 : 0, 2, false, false, /*mxfp4=*/true};
    } else if (mxfp4 && rest == "ffn_down_exps.weight") {
      *out = {p + "mlp.experts.down_proj", V::kAsIs, false, D, 0, 1, false, false, /*mxfp4=*/true};
    } else if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight") {
      *out = {p + "mlp.experts.gate_up_proj", V::kAsIs, false, F2, up ? 1 : 0, 2, /*transposed=*/true};
    } else if (rest == "ffn_down_exps.weight") {
      *out = {p + "mlp.experts.down_proj", V::kAsIs, false, D, 0, 1, /*transposed=*/true};
    } else if (rest == "ffn_gate_exps.bias" || rest == "ffn_up_exps.bias") {
      *out = {p + "mlp.experts.gate_up_proj_bias", V::kAsIs, false, F2, up ? 1 : 0, 2, false, /*to_f32=*/true};
    } else if (rest == "ffn_down_exps.bias") {
      *out = {p + "mlp.experts.down_proj_bias", V::kAsIs, false, 0, 0, 1, false, /*to_f32=*/true};
    } else {
      return false;
    }
    return true;
  }
  std::string gguf_unconvertible(const ModelConfig&) const override {
    return "the gpt-oss.* window, sink and expert keys are not written";
  }
  std::unique_ptr<ArchWeights> new_weights() const override { return std::make_unique<GptOssWeights>(); }

  std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* aw) const override {
    auto* w = static_cast<GptOssWeights*>(aw);
    const int64_t D = c.n_embd, E = c.n_experts, F = c.n_ff_exp;
    std::vector<TensorSpec> s = decoder_io_specs(c, w);
    w->layers.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      GptOssLayer& L = w->layers[size_t(l)];
      const std::string p = "blk." + std::to_string(l) + ".";
      s.push_back({p + "attn_norm.weight", {D}, true, &L.attn_norm});
      add_attention_specs(&s, p, c, &L.attn);  // q/k/v biases required (c.qkv_bias)
      s.push_back({p + "attn_output.bias", {D}, true, &L.bo});
      s.push_back({p + "attn_sinks.weight", {c.n_heads}, true, &L.attn.sinks});
      s.push_back({p + "post_attention_norm.weight", {D}, true, &L.post_attn_norm});
      add_moe_specs(&s, p, c, &L.moe);
      // The biases: 1-D router bias; [E, F] and [E, D] expert biases read by rows (matmul_id's
      // bias input), so kept in the file's layout.
      s.push_back({p + "ffn_gate_inp.bias", {E}, true, &L.moe.router_b});
      for (auto [name, rows, slot] : {std::tuple{"ffn_gate_exps.bias", F, &L.moe.gate_exps_b},
                                      std::tuple{"ffn_up_exps.bias", F, &L.moe.up_exps_b},
                                      std::tuple{"ffn_down_exps.bias", D, &L.moe.down_exps_b}})
        s.push_back({p + name, {E, rows}, true, slot, false, false, false, 0, 0, /*embedding_rows=*/true});
    }
    return s;
  }

  ValueId build_graph(GraphContext& ctx, const ArchWeights& aw) const override {
    const auto& w = static_cast<const GptOssWeights&>(aw);
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    AttentionParams full;
    full.scale = c.attn_scale;
    AttentionParams sliding = full;
    sliding.sliding_window = c.sliding_window;
    ValueId x = ctx.embed_tokens(w.tok_embd);  // [T, D]
    for (int l = 0; l < c.n_layers; ++l) {
      const GptOssLayer& L = w.layers[size_t(l)];
      const bool slides = c.is_sliding(l);
      ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
      x = g.add(x, ctx.attention(L.attn, h, l, slides ? c.rope_sliding : c.rope, kNoValue, slides ? sliding : full,
                                 g.input(L.bo)));
      h = g.rms_norm(x, g.input(L.post_attn_norm), c.rms_eps);
      x = g.add(x, ctx.moe_ffn(L.moe, h, kExpertGlu));
    }
    return ctx.decoder_output(w, x);
  }
};

}  // namespace

const Architecture& gpt_oss_architecture() {
  static const GptOss arch;
  return arch;
}

}  // namespace tessera
