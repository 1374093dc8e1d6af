// The Phi-3 family graph builder (GGUF architecture "phi3", HF Phi3ForCausalLM): the llama block
// (RMSNorm, SwiGLU, NeoX RoPE, GQA) with fused projections: attn_qkv [Q + 2 KV, D] holds q, k
// and v rows, ffn_up [2 F, D] holds gate then up rows. The loader splits both into the llama
// layer's wq/wk/wv and w_gate/w_up as row ranges of the one stored tensor (in place on a
// mapping device; see docs/phi3.md for why not views of one matmul output).
//
// RoPE scaling "su"/"longrope" (Phi-3 128k): per-frequency divisors rope_factors_long/short
// [n_rot / 2] and an attention factor on cos/sin (phi3.rope.scaling.attn_factor). As llama.cpp
// at its default context, the long factors are used when the context the model is loaded for
// (context_length) exceeds rope.scaling.original_context_length, else the short ones.
//
// Sliding window (phi3.attention.sliding_window, Phi-3-mini: 2047): applied on every layer as
// HF's Phi3Attention does. llama.cpp disables Phi's window; the two part past that many tokens.
#include <cmath>

#include "models/arch/architecture.h"
#include "models/arch/blocks.h"
#include "models/arch/gguf_keys.h"
#include "models/arch/graph_context.h"
#include "models/gguf/gguf.h"
#include "models/gguf/metadata_builder.h"
#include "models/safetensors/hf_config.h"
#include "models/safetensors/hf_model.h"
#include "models/safetensors/hf_names.h"

namespace tessera {

namespace {

struct Phi3Layer {
  WeightTensor attn_norm, ffn_norm;
  AttentionWeights attn;  // wq/wk/wv: row ranges of attn_qkv
  GluFfnWeights ffn;      // gate/up: row ranges of ffn_up
};
struct Phi3Weights : ArchWeights {
  WeightTensor rope_freqs;  // the chosen longrope factors (optional)
  std::vector<Phi3Layer> layers;
};

Result<ModelConfig> phi3_config(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "phi3") return Internal("phi3_config_from_gguf: architecture '" + c.arch + "'");
  TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
  const std::string a = c.arch + ".";
  c.rope.mode = RopeMode::kNeox;  // HF's rotate_half; llama.cpp's converter keeps the q/k rows as they are
  TS_ASSIGN_OR_RETURN(c.rope.n_ctx_orig, gguf_int32_key(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
  if (c.rope.n_ctx_orig <= 0)
    return InvalidArgument(f.path() + ": " + a + "rope.scaling.original_context_length must be positive");
  double d = 1.0;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.scaling.attn_factor", 1.0));
  if (!(d > 0)) return InvalidArgument(f.path() + ": " + a + "rope.scaling.attn_factor " + std::to_string(d) + " must be positive");
  c.rope.attn_factor = float(d);
  TS_ASSIGN_OR_RETURN(c.sliding_window, gguf_int32_key(f, a + "attention.sliding_window", 0));
  if (c.sliding_window < 0)
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window " + std::to_string(c.sliding_window) + " is negative");
  // The window is on every layer: layer_sliding stays empty (ModelConfig::is_sliding).
  return c;
}

// rope_scaling.<key> of a longrope config: |n| positive numbers.
Result<std::vector<float>> longrope_factor_list(const safetensors::json& rope_scaling, const std::string& file, const std::string& key, size_t n) {
  const safetensors::json* list = rope_scaling.contains(key) ? &rope_scaling[key] : nullptr;
  if (!list || !list->is_array() || list->size() != n)
    return InvalidArgument(file + ": rope_scaling." + key + " must be a list of " + std::to_string(n) + " numbers (rotary dims / 2)");
  std::vector<float> factors;
  factors.reserve(n);
  for (const safetensors::json& v : *list) {
    if (!v.is_number() || !(v.get<double>() > 0))
      return InvalidArgument(file + ": rope_scaling." + key + " holds " + v.dump() + " (factors must be positive numbers)");
    factors.push_back(float(v.get<double>()));
  }
  return factors;
}

// Phi-3: a sliding window on every layer (sliding_window, null or absent: none) and "longrope"
// scaling: long_factor / short_factor per frequency, long when the model's context exceeds
// original_max_position_embeddings (as the GGUF path chooses; see models/arch/phi3.h), and cos/sin
// times attention_factor, by default sqrt(1 + ln(max / original) / ln(original)) as HF's
// _compute_longrope_parameters. |longrope| (optional) receives both lists.
Status read_phi3(const safetensors::JsonObject& o, ModelConfig* c, safetensors::LongRopeFactors* longrope) {
  TS_ASSIGN_OR_RETURN(c->sliding_window, o.get_int32("sliding_window", 0));
  if (c->sliding_window < 0) return InvalidArgument(o.file() + ": sliding_window must not be negative");
  // On every layer: layer_sliding stays empty (sized by a layer count not yet checked against
  // the checkpoint's tensors).
  int orig = 0;
  TS_ASSIGN_OR_RETURN(orig, o.get_int32("original_max_position_embeddings", c->n_ctx_train));
  const safetensors::json* rs = safetensors::rope_scaling_of(o);
  if (rs) {
    // read_rope has checked it is an object and refused types it does not know; "default" is
    // no scaling, and of the rest only longrope ("su" in older configs) is Phi-3's.
    std::string type;
    TS_ASSIGN_OR_RETURN(type, safetensors::rope_scaling_type(*rs, o.file()));
    if (type == "default") {
      rs = nullptr;
    } else if (type != "longrope" && type != "su") {
      return Unimplemented(o.file() + ": rope_scaling type '" + type + "' is not supported for phi3 (longrope, su)");
    }
  }
  if (rs) {
    safetensors::JsonObject s(*rs, o.file() + ": rope_scaling");
    TS_ASSIGN_OR_RETURN(orig, s.get_int32("original_max_position_embeddings", orig));
  }
  if (orig <= 0) return InvalidArgument(o.file() + ": original_max_position_embeddings must be positive");
  c->rope.n_ctx_orig = orig;
  if (rs) {
    const size_t n = size_t(c->rope.n_dims / 2);
    const char* chosen = c->n_ctx_train > orig ? "long_factor" : "short_factor";
    TS_ASSIGN_OR_RETURN(c->rope_freq_factors, longrope_factor_list(*rs, o.file(), chosen, n));
    if (longrope) {
      TS_ASSIGN_OR_RETURN(longrope->long_factor, longrope_factor_list(*rs, o.file(), "long_factor", n));
      TS_ASSIGN_OR_RETURN(longrope->short_factor, longrope_factor_list(*rs, o.file(), "short_factor", n));
    }
    const double scale = double(c->n_ctx_train) / orig;
    double attn = scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(double(orig)));
    safetensors::JsonObject so(*rs, o.file() + ": rope_scaling");
    TS_ASSIGN_OR_RETURN(attn, so.get_float("attention_factor", attn));
    if (!(attn > 0)) return InvalidArgument(o.file() + ": rope_scaling.attention_factor must be positive");
    c->rope.attn_factor = float(attn);
  }
  return OkStatus();
}

class Phi3 final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override { return {"phi3"}; }
  std::vector<std::pair<std::string, std::string>> hf_model_types() const override { return {{"phi3", "phi3"}}; }
  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override { return phi3_config(f); }
  Status config_from_hf(const HfConfigInput& in, ModelConfig* c) const override {
    TS_RETURN_IF_ERROR(safetensors::read_decoder_hf(in.json, c, /*longrope_ok=*/true));
    return read_phi3(in.json, c, in.longrope);
  }
  std::unique_ptr<ArchWeights> new_weights() const override { return std::make_unique<Phi3Weights>(); }

  std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* aw) const override {
    auto* w = static_cast<Phi3Weights*>(aw);
    const int64_t D = c.n_embd, F = c.n_ff, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
    const char* factors = c.n_ctx_train > c.rope.n_ctx_orig ? "rope_factors_long.weight" : "rope_factors_short.weight";
    std::vector<TensorSpec> s = decoder_io_specs(c, w);
    s.push_back({factors, {c.rope.n_dims / 2}, false, &w->rope_freqs});
    w->layers.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      Phi3Layer& L = w->layers[size_t(l)];
      const std::string p = "blk." + std::to_string(l) + ".";
      TensorSpec q{p + "attn_qkv.weight", {Q, D}, true, &L.attn.wq}, k = q, v = q;
      q.fused_rows = k.fused_rows = v.fused_rows = Q + 2 * KV;
      k.shape = v.shape = {KV, D};
      k.slot = &L.attn.wk, k.row_begin = Q;
      v.slot = &L.attn.wv, v.row_begin = Q + KV;
      TensorSpec gate{p + "ffn_up.weight", {F, D}, true, &L.ffn.gate}, up = gate;
      gate.fused_rows = up.fused_rows = 2 * F;
      up.slot = &L.ffn.up, up.row_begin = F;
      s.insert(s.end(), {
          {p + "attn_norm.weight", {D}, true, &L.attn_norm}, q, k, v,
          {p + "attn_output.weight", {D, Q}, true, &L.attn.wo},
          {p + "ffn_norm.weight", {D}, true, &L.ffn_norm}, gate, up,
          {p + "ffn_down.weight", {D, F}, true, &L.ffn.down},
      });
    }
    return s;
  }

  // HF keeps the fused projections as qkv_proj and gate_up_proj (gate rows, then up).
  std::string hf_tensor_prefix(const ModelConfig& c, const std::string& name, const safetensors::Checkpoint& ckpt) const override {
    int l = 0;
    std::string stem, suffix;
    if (safetensors::split_layer_name(name, &l, &stem, &suffix)) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      if (stem == "ffn_up") return p + "mlp.gate_up_proj";
      if (stem == "attn_qkv") return p + "self_attn.qkv_proj";
    }
    return Architecture::hf_tensor_prefix(c, name, ckpt);
  }

  // phi3's own keys as llama.cpp's converter writes them: the original context (with or without
  // rope scaling) and the window (0: none); with longrope, the factor on cos/sin. That is HF's
  // attention_factor (config.json's, else its default; see read_phi3), which llama.cpp's
  // converter recomputes from the default formula: the two differ only when config.json sets
  // its own.
  void add_gguf_config(gguf::MetadataBuilder& w, const ModelConfig& c, const safetensors::LongRopeFactors* longrope) const override {
    add_decoder_gguf_config(w, c);
    w.u32("phi3.rope.scaling.original_context_length", c.rope.n_ctx_orig);
    if (longrope && !longrope->long_factor.empty()) w.f32("phi3.rope.scaling.attn_factor", c.rope.attn_factor);
    w.u32("phi3.attention.sliding_window", c.sliding_window);
  }

  ValueId build_graph(GraphContext& ctx, const ArchWeights& aw) const override {
    const auto& w = static_cast<const Phi3Weights&>(aw);
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const ValueId freq = ctx.optional(w.rope_freqs);
    AttentionParams ap;
    ap.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    ap.sliding_window = c.sliding_window;  // every layer
    ValueId x = ctx.embed_tokens(w.tok_embd);  // [T, D]
    for (int l = 0; l < c.n_layers; ++l) {
      const Phi3Layer& L = w.layers[size_t(l)];
      ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
      x = g.add(x, ctx.attention(L.attn, h, l, c.rope, freq, ap));
      h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
      x = g.add(x, ctx.glu_ffn(L.ffn, h));
    }
    return ctx.decoder_output(w, x);
  }
};

}  // namespace

const Architecture& phi3_architecture() {
  static const Phi3 arch;
  return arch;
}

}  // namespace tessera
