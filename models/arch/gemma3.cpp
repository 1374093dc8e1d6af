// The Gemma 3 family graph builder (text decoder; GGUF architecture "gemma3"): per-head QK
// RMSNorm, GeGLU with tanh-GELU, sandwich norms (RMSNorm on each block's output before the
// residual add), token embeddings scaled by sqrt(n_embd), sliding-window attention on most
// layers with a RoPE base of their own, tied output head.
//
// Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w in GGUF, so the
// stored weight is the multiplier and the norm is our plain rms_norm (checked on Gemma 3 270M by
// tests/model/compare_gemma3.py: adding 1 again makes the perplexity explode).
#include <cmath>

#include "models/arch/architecture.h"
#include "models/arch/blocks.h"
#include "models/arch/gguf_keys.h"
#include "models/arch/graph_context.h"
#include "models/gguf/gguf.h"

namespace tessera {

namespace {

struct Gemma3Layer {
  WeightTensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm;
  AttentionWeights attn;
  GluFfnWeights ffn;
};
struct Gemma3Weights : ArchWeights {
  std::vector<Gemma3Layer> layers;
};

// Reads the config from the gemma3.* keys. Sliding window: gemma3.attention.sliding_window
// (0 or absent: every layer global); which layers slide: gemma3.attention.sliding_window_pattern
// (every n-th layer is global, layer l slides when l % n < n - 1; default 6, as Gemma 3 ships);
// their RoPE base: gemma3.rope.freq_base_swa (default 10000, Gemma 3's rope_local_base_freq).
// A final logit softcap (gemma3.final_logit_softcapping > 0) is refused: no op computes it.
Result<ModelConfig> gemma3_config(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "gemma3") return Internal("gemma3_config_from_gguf: architecture '" + c.arch + "'");
  TS_RETURN_IF_ERROR(read_decoder_config(f, &c));
  const std::string a = c.arch + ".";
  int value_length = 0;
  TS_ASSIGN_OR_RETURN(value_length, gguf_int32_key(f, a + "attention.value_length", c.head_dim));
  if (value_length != c.head_dim)
    return Unimplemented(f.path() + ": attention.value_length " + std::to_string(value_length) + " differs from key_length " +
                         std::to_string(c.head_dim));
  c.rope.mode = RopeMode::kNeox;  // HF's rotate_half; llama.cpp's converter leaves q/k rows as they are
  c.qk_norm = QkNorm::kPerHead;
  c.embd_scale = std::sqrt(float(c.n_embd));
  // query_pre_attn_scalar: head_dim for every released size but 27B (62 layers), whose is
  // n_embd / n_heads; GGUF has no key for it, and llama.cpp tells 27B by its layer count too.
  c.attn_scale = c.n_layers == 62 ? 1.0f / std::sqrt(float(c.n_embd) / float(c.n_heads)) : 1.0f / std::sqrt(float(c.head_dim));
  double d = 0;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "attn_logit_softcapping", 0.0));
  c.attn_softcap = float(d);
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "final_logit_softcapping", 0.0));
  if (d > 0)
    return Unimplemented(f.path() + ": " + a + "final_logit_softcapping " + std::to_string(d) +
                         " is not supported (no op computes softcap * tanh(logits / softcap))");
  if (c.attn_softcap < 0) return InvalidArgument(f.path() + ": " + a + "attn_logit_softcapping must not be negative");

  TS_ASSIGN_OR_RETURN(c.sliding_window, gguf_int32_key(f, a + "attention.sliding_window", 0));
  if (c.sliding_window < 0)
    return InvalidArgument(f.path() + ": " + a + "attention.sliding_window " + std::to_string(c.sliding_window) + " is negative");
  int pattern = 6;
  TS_ASSIGN_OR_RETURN(pattern, gguf_int32_key(f, a + "attention.sliding_window_pattern", 6));
  if (pattern < 0) return InvalidArgument(f.path() + ": " + a + "attention.sliding_window_pattern must not be negative");
  // Each layer has tensors of its own: checked before a per-layer table is sized by a count that
  // could be any 32-bit value.
  if (size_t(c.n_layers) > f.tensors().size())
    return InvalidArgument(f.path() + ": block_count " + std::to_string(c.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  c.layer_sliding.assign(size_t(c.n_layers), 0);
  // As llama.cpp's set_swa_pattern: a pattern of n makes every n-th layer global (0: none).
  for (int l = 0; l < c.n_layers; ++l) c.layer_sliding[size_t(l)] = c.sliding_window > 0 && (pattern == 0 || l % pattern < pattern - 1);
  // The sliding layers rotate by their own base and without the global layers' scaling.
  c.rope_sliding = c.rope;
  c.rope_sliding.freq_scale = 1.0f;
  c.rope_sliding.ext_factor = 0.0f;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.freq_base_swa", 10000.0));
  c.rope_sliding.freq_base = float(d);
  if (!(c.rope_sliding.freq_base > 0)) return InvalidArgument(f.path() + ": " + a + "rope.freq_base_swa must be positive");
  return c;
}

class Gemma3 final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override { return {"gemma3"}; }
  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override { return gemma3_config(f); }
  std::unique_ptr<ArchWeights> new_weights() const override { return std::make_unique<Gemma3Weights>(); }

  std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* aw) const override {
    auto* w = static_cast<Gemma3Weights*>(aw);
    const int64_t D = c.n_embd;
    std::vector<TensorSpec> s = decoder_io_specs(c, w);
    w->layers.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      Gemma3Layer& L = w->layers[size_t(l)];
      const std::string p = "blk." + std::to_string(l) + ".";
      s.push_back({p + "attn_norm.weight", {D}, true, &L.attn_norm});
      add_attention_specs(&s, p, c, &L.attn, /*biases=*/false);  // QK-norm per head (gemma3_config)
      s.push_back({p + "post_attention_norm.weight", {D}, true, &L.post_attn_norm});
      s.push_back({p + "ffn_norm.weight", {D}, true, &L.ffn_norm});
      add_glu_specs(&s, p, D, c.n_ff, &L.ffn);
      s.push_back({p + "post_ffw_norm.weight", {D}, true, &L.post_ffn_norm});
    }
    return s;
  }

  ValueId build_graph(GraphContext& ctx, const ArchWeights& aw) const override {
    const auto& w = static_cast<const Gemma3Weights&>(aw);
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    AttentionParams global;
    global.scale = c.attn_scale;
    global.softcap = c.attn_softcap;
    AttentionParams sliding = global;
    sliding.sliding_window = c.sliding_window;
    ValueId x = ctx.embed_tokens(w.tok_embd, c.embd_scale);  // [T, D]
    for (int l = 0; l < c.n_layers; ++l) {
      const Gemma3Layer& L = w.layers[size_t(l)];
      const bool slides = c.is_sliding(l);
      ValueId h = g.rms_norm(x, g.input(L.attn_norm), c.rms_eps);
      h = ctx.attention(L.attn, h, l, slides ? c.rope_sliding : c.rope, kNoValue, slides ? sliding : global);
      x = g.add(x, g.rms_norm(h, g.input(L.post_attn_norm), c.rms_eps));
      h = g.rms_norm(x, g.input(L.ffn_norm), c.rms_eps);
      h = ctx.glu_ffn(L.ffn, h, GraphContext::Glu::kGeGlu);
      x = g.add(x, g.rms_norm(h, g.input(L.post_ffn_norm), c.rms_eps));
    }
    return ctx.decoder_output(w, x);
  }
};

}  // namespace

const Architecture& gemma3_architecture() {
  static const Gemma3 arch;
  return arch;
}

}  // namespace tessera
