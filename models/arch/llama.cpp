// The llama family: Llama 2/3, Mistral, Qwen2/2.5 (q/k/v biases), Qwen3 (QK-norm), SmolLM (tied
// embeddings), and their mixture-of-experts forms: Mixtral (llama with experts), Qwen2-MoE
// (shared expert), Qwen3-MoE, OLMoE (QK-norm over the whole projection). GQA, RoPE (normal or
// NeoX layout, linear/YaRN/llama3 scaling). The members differ only in the traits of kVariants.
#include <cmath>

#include "models/arch/architecture.h"
#include "models/arch/blocks.h"
#include "models/arch/gguf_keys.h"
#include "models/arch/graph_context.h"
#include "models/gguf/gguf.h"
#include "models/safetensors/hf_config.h"
#include "models/safetensors/hf_names.h"

namespace tessera {

namespace {

// What tells the members apart, by GGUF name (and the HF model_type that loads as it).
struct Variant {
  const char* gguf;
  const char* hf;              // config.json model_type; nullptr: none
  RopeMode gguf_rope;          // the GGUF converter permutes llama/mistral q/k rows (kNormal)
  QkNorm qk_norm;
  bool qkv_bias;
  bool moe_required;           // a GGUF without {arch}.expert_count is an error
  bool expert_weights_norm;    // the default of {arch}.expert_weights_norm
  bool shared_expert_default;  // {arch}.expert_shared_feed_forward_length defaults to n_ff
};
constexpr Variant kVariants[] = {
    {"llama", "llama", RopeMode::kNormal, QkNorm::kNone, false, false, true, false},
    {"mistral", "mistral", RopeMode::kNormal, QkNorm::kNone, false, false, true, false},
    {"qwen2", "qwen2", RopeMode::kNeox, QkNorm::kNone, true, false, true, false},
    {"qwen3", "qwen3", RopeMode::kNeox, QkNorm::kPerHead, false, false, true, false},
    {"qwen2moe", "qwen2_moe", RopeMode::kNeox, QkNorm::kNone, true, true, false, true},
    {"qwen3moe", "qwen3_moe", RopeMode::kNeox, QkNorm::kPerHead, false, true, true, false},
    {"olmoe", "olmoe", RopeMode::kNeox, QkNorm::kFull, false, true, false, false},
};
const Variant* variant(const std::string& gguf) {
  for (const Variant& v : kVariants)
    if (gguf == v.gguf) return &v;
  return nullptr;
}

// config.json's MoE keys per model_type: the expert count's key, the expert width's key, the
// shared expert's width key (nullptr: none) and norm_topk_prob's default.
struct HfMoeKeys {
  const char* model_type;
  const char* n_experts;
  const char* expert_width;
  const char* shared_width;
  bool norm_default;
};
constexpr HfMoeKeys kHfMoe[] = {
    {"mixtral", "num_local_experts", "intermediate_size", nullptr, true},
    {"qwen2_moe", "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size", false},
    {"qwen3_moe", "num_experts", "moe_intermediate_size", nullptr, false},
    {"olmoe", "num_experts", "intermediate_size", nullptr, false},
};

struct LlamaLayer {
  WeightTensor attn_norm, ffn_norm;
  AttentionWeights attn;
  GluFfnWeights ffn;  // dense models
  MoeWeights moe;     // mixture-of-experts models
};
struct LlamaWeights : ArchWeights {
  WeightTensor rope_freqs;  // optional (llama3 scaling)
  std::vector<LlamaLayer> layers;
};

Status read_hf_moe(const safetensors::JsonObject& o, const HfMoeKeys& k, ModelConfig* c) {
  TS_ASSIGN_OR_RETURN(c->n_experts, o.get_int32(k.n_experts));
  TS_ASSIGN_OR_RETURN(c->n_experts_used, o.get_int32("num_experts_per_tok"));
  if (c->n_experts < 1 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
    return InvalidArgument(o.file() + ": num_experts_per_tok " + std::to_string(c->n_experts_used) + " must be in [1, " +
                           k.n_experts + " " + std::to_string(c->n_experts) + "]");
  TS_ASSIGN_OR_RETURN(c->n_ff_exp, o.get_int32(k.expert_width));
  if (k.shared_width) {
    TS_ASSIGN_OR_RETURN(c->n_ff_shexp, o.get_int32(k.shared_width));
  }
  TS_ASSIGN_OR_RETURN(c->expert_weights_norm, o.get_bool("norm_topk_prob", k.norm_default));
  if (c->n_ff_exp <= 0 || c->n_ff_shexp < 0) return InvalidArgument(o.file() + ": expert FFN widths must be positive");
  return OkStatus();
}

// Mixtral checkpoints name the MoE block block_sparse_moe and their experts' projections w1/w3/w2.
bool is_mixtral(const ModelConfig& c) { return c.arch == "llama" && c.is_moe(); }

class Llama final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override {
    std::vector<std::string> n;
    for (const Variant& v : kVariants) n.push_back(v.gguf);
    return n;
  }
  std::vector<std::pair<std::string, std::string>> hf_model_types() const override {
    std::vector<std::pair<std::string, std::string>> t;
    for (const Variant& v : kVariants) t.emplace_back(v.hf, v.gguf);
    t.emplace_back("mixtral", "llama");
    return t;
  }

  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override {
    ModelConfig c;
    TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
    const Variant* v = variant(c.arch);
    if (!v) return Internal("llama family: architecture '" + c.arch + "'");
    TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
    c.rope.mode = v->gguf_rope;
    c.qk_norm = v->qk_norm;
    c.qkv_bias = v->qkv_bias;
    TS_RETURN_IF_ERROR(read_moe_config(f, &c, v->moe_required, v->expert_weights_norm, v->shared_expert_default));
    return c;
  }

  Status config_from_hf(const HfConfigInput& in, ModelConfig* c) const override {
    TS_RETURN_IF_ERROR(safetensors::read_decoder_hf(in.json, c));
    const Variant* v = variant(c->arch);
    if (!v) return Internal("llama family: architecture '" + c->arch + "'");
    c->qk_norm = v->qk_norm;
    c->qkv_bias = v->qkv_bias;
    for (const HfMoeKeys& k : kHfMoe)
      if (in.model_type == k.model_type) return read_hf_moe(in.json, k, c);
    return OkStatus();
  }

  std::unique_ptr<ArchWeights> new_weights() const override { return std::make_unique<LlamaWeights>(); }

  std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* aw) const override {
    auto* w = static_cast<LlamaWeights*>(aw);
    const int64_t D = c.n_embd;
    std::vector<TensorSpec> s = decoder_io_specs(c, w);
    s.push_back({"rope_freqs.weight", {c.rope.n_dims / 2}, false, &w->rope_freqs});
    w->layers.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      LlamaLayer& L = w->layers[size_t(l)];
      const std::string p = "blk." + std::to_string(l) + ".";
      s.push_back({p + "attn_norm.weight", {D}, true, &L.attn_norm});
      add_attention_specs(&s, p, c, &L.attn);
      s.push_back({p + "ffn_norm.weight", {D}, true, &L.ffn_norm});
      if (c.is_moe())
        add_moe_specs(&s, p, c, &L.moe);
      else
        add_glu_specs(&s, p, D, c.n_ff, &L.ffn);
    }
    return s;
  }

  std::string hf_tensor_prefix(const ModelConfig& c, const std::string& name, const safetensors::Checkpoint& ckpt) const override {
    int l = 0;
    std::string stem, suffix;
    if (is_mixtral(c) && safetensors::split_layer_name(name, &l, &stem, &suffix) && stem == "ffn_gate_inp")
      return "model.layers." + std::to_string(l) + ".block_sparse_moe.gate";
    return Architecture::hf_tensor_prefix(c, name, ckpt);
  }
  std::string hf_expert_prefix(const ModelConfig& c, int layer, const std::string& proj, int e,
                               const safetensors::Checkpoint& ckpt) const override {
    if (!is_mixtral(c)) return Architecture::hf_expert_prefix(c, layer, proj, e, ckpt);
    const char* hf = proj == "ffn_gate" ? "w1" : proj == "ffn_up" ? "w3" : "w2";
    return "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." + std::to_string(e) + "." + hf;
  }
  std::string tensor_parallel_unsupported(const ModelConfig& c) const override {
    return c.qk_norm == QkNorm::kFull ? "its QK-norm spans every head (it would need an all-reduce of its own)" : "";
  }
  bool gguf_rope_rows_permuted(const ModelConfig& c) const override {
    const Variant* v = variant(c.arch);
    return v && v->gguf_rope == RopeMode::kNormal;
  }

  ValueId build_graph(GraphContext& ctx, const ArchWeights& aw) const override {
    const auto& w = static_cast<const LlamaWeights&>(aw);
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const ValueId freq = ctx.optional(w.rope_freqs);
    AttentionParams ap;
    ap.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    ValueId x = ctx.embed_tokens(w.tok_embd);  // [T, D]
    for (int l = 0; l < c.n_layers; ++l) {
      const LlamaLayer& L = w.layers[size_t(l)];
      ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
      x = g.add(x, ctx.attention(L.attn, h, l, c.rope, freq, ap));
      h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
      x = g.add(x, c.is_moe() ? ctx.moe_ffn(L.moe, h) : ctx.glu_ffn(L.ffn, h));
    }
    return ctx.decoder_output(w, x);
  }
};

}  // namespace

const Architecture& llama_architecture() {
  static const Llama arch;
  return arch;
}

}  // namespace tessera
