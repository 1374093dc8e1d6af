// The BERT family of encoders (BERT, MiniLM, BGE, all-MiniLM-L6-v2 and other sentence-transformers
// models): learned absolute positions and token types, post-norm LayerNorm blocks with biases,
// bidirectional attention, an erf-GELU FFN, and no output head: the final hidden states are
// pooled into one embedding per sequence (Model::forward, ModelConfig::pooling).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "models/arch/architecture.h"
#include "models/arch/graph_context.h"
#include "models/arch/gguf_keys.h"
#include "models/gguf/gguf.h"
#include "models/gguf/metadata_builder.h"
#include "models/mapped_file.h"
#include "models/safetensors/hf_model.h"
#include "models/safetensors/hf_names.h"
#include "models/safetensors/json_util.h"

namespace tessera {

namespace {

struct BertLayer {
  AttentionWeights attn;  // with q/k/v biases
  WeightTensor bo;        // the output projection's bias
  WeightTensor attn_out_norm, attn_out_norm_b;   // LayerNorm after attention + residual
  WeightTensor up, b_up, down, b_down;           // GELU FFN
  WeightTensor out_norm, out_norm_b;             // LayerNorm after the FFN + residual
};
struct BertWeights : ArchWeights {
  // Learned positions [n_ctx, D], token types [n_types, D], the embedding LayerNorm.
  WeightTensor pos_embd, type_embd, embd_norm, embd_norm_b;
  std::vector<BertLayer> layers;
};

// Our names (GGUF's, as llama.cpp's converter writes them) -> HF BertModel module paths.
constexpr safetensors::HfNameRow kBertNames[] = {
    {"token_embd", "embeddings.word_embeddings"},       {"position_embd", "embeddings.position_embeddings"},
    {"token_types", "embeddings.token_type_embeddings"}, {"token_embd_norm", "embeddings.LayerNorm"},
};
constexpr safetensors::HfNameRow kBertLayerNames[] = {
    {"attn_q", "attention.self.query"},         {"attn_k", "attention.self.key"},
    {"attn_v", "attention.self.value"},         {"attn_output", "attention.output.dense"},
    {"attn_output_norm", "attention.output.LayerNorm"}, {"ffn_up", "intermediate.dense"},
    {"ffn_down", "output.dense"},               {"layer_output_norm", "output.LayerNorm"},
};

// From llama.cpp's "bert" keys: bert.{block_count, context_length, embedding_length,
// feed_forward_length, attention.head_count, attention.layer_norm_epsilon, attention.causal,
// pooling_type}. Errors name the file and key.
Result<ModelConfig> bert_config(const gguf::File& f) {
  ModelConfig c;
  TS_ASSIGN_OR_RETURN(c.arch, f.get_string("general.architecture"));
  if (c.arch != "bert") return Internal("bert_config_from_gguf: architecture '" + c.arch + "'");
  if (f.find("general.name")) {
    TS_ASSIGN_OR_RETURN(c.name, f.get_string("general.name"));
  }
  const std::string a = "bert.";
  TS_ASSIGN_OR_RETURN(c.n_layers, gguf_int32_key(f, a + "block_count"));
  TS_ASSIGN_OR_RETURN(c.n_embd, gguf_int32_key(f, a + "embedding_length"));
  TS_ASSIGN_OR_RETURN(c.n_ff, gguf_int32_key(f, a + "feed_forward_length"));
  TS_ASSIGN_OR_RETURN(c.n_heads, gguf_int32_key(f, a + "attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, gguf_int32_key(f, a + "context_length", 512));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_ctx_train <= 0 || c.n_embd % c.n_heads != 0)
    return InvalidArgument(f.path() + ": bert sizes must be positive and embedding_length a multiple of head_count (block_count " +
                           std::to_string(c.n_layers) + ", embedding_length " + std::to_string(c.n_embd) + ", head_count " +
                           std::to_string(c.n_heads) + ")");
  if (size_t(c.n_layers) > f.tensors().size())
    return InvalidArgument(f.path() + ": block_count " + std::to_string(c.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.n_embd / c.n_heads;
  double eps = 1e-12;
  TS_ASSIGN_OR_RETURN(eps, gguf_float_or(f, a + "attention.layer_norm_epsilon", 1e-12));
  if (!(eps > 0)) return InvalidArgument(f.path() + ": " + a + "attention.layer_norm_epsilon must be positive");
  c.norm_eps = float(eps);
  if (f.find(a + "attention.causal")) {
    bool causal = false;
    TS_ASSIGN_OR_RETURN(causal, f.get_bool(a + "attention.causal"));
    if (causal) return Unimplemented(f.path() + ": " + a + "attention.causal = true (a causal BERT) is not supported");
  }
  c.causal = false;
  // llama.cpp's enum llama_pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank.
  int64_t pooling = 1;
  TS_ASSIGN_OR_RETURN(pooling, gguf_int_or(f, a + "pooling_type", 1));
  switch (pooling) {
    case 0:
    case 1: c.pooling = Pooling::kMean; break;  // none: mean, as sentence-transformers would
    case 2: c.pooling = Pooling::kCls; break;
    case 3: c.pooling = Pooling::kLast; break;
    default:
      return Unimplemented(f.path() + ": " + a + "pooling_type " + std::to_string(pooling) +
                           " is not supported (0 none, 1 mean, 2 cls, 3 last)");
  }
  c.rope.n_dims = 0;  // absolute positions: no RoPE
  return c;
}

// BERT encoders: the erf GELU, LayerNorm epsilon, token types, and the sentence-transformers
// modules beside the checkpoint (1_Pooling/config.json: mean or CLS pooling; modules.json: a
// Normalize module). Without those files: mean pooling, normalised, as OpenAI's embeddings are.
Status read_bert(const safetensors::JsonObject& o, const std::string& dir, ModelConfig* c) {
  std::string act, pos;
  TS_ASSIGN_OR_RETURN(act, o.get_string("hidden_act", "gelu"));
  if (act != "gelu")
    return Unimplemented(o.file() + ": hidden_act '" + act + "' is not supported for bert (only 'gelu', the erf form)");
  TS_ASSIGN_OR_RETURN(pos, o.get_string("position_embedding_type", "absolute"));
  if (pos != "absolute")
    return Unimplemented(o.file() + ": position_embedding_type '" + pos + "' is not supported (only 'absolute')");
  if (c->n_kv_heads != c->n_heads || c->head_dim * c->n_heads != c->n_embd)
    return InvalidArgument(o.file() + ": bert needs hidden_size = num_attention_heads x head size");
  double eps = 1e-12;
  TS_ASSIGN_OR_RETURN(eps, o.get_float("layer_norm_eps", 1e-12));
  if (!(eps > 0)) return InvalidArgument(o.file() + ": layer_norm_eps must be positive");
  c->norm_eps = float(eps);
  TS_ASSIGN_OR_RETURN(c->n_token_types, o.get_int32("type_vocab_size", 2));
  if (c->n_token_types < 1) return InvalidArgument(o.file() + ": type_vocab_size must be positive");
  c->causal = false;
  c->rope.n_dims = 0;
  c->pooling = Pooling::kMean;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const std::string pool = dir + "/1_Pooling/config.json"; fs::exists(pool, ec)) {
    safetensors::json pj;
    TS_ASSIGN_OR_RETURN(pj, safetensors::read_json_file(pool));
    if (!pj.is_object()) return InvalidArgument(pool + ": not a JSON object");
    const safetensors::JsonObject po(pj, pool);
    bool cls = false, mean = true;
    TS_ASSIGN_OR_RETURN(cls, po.get_bool("pooling_mode_cls_token", false));
    TS_ASSIGN_OR_RETURN(mean, po.get_bool("pooling_mode_mean_tokens", !cls));
    for (const char* k : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                          "pooling_mode_lasttoken"}) {
      bool on = false;
      TS_ASSIGN_OR_RETURN(on, po.get_bool(k, false));
      if (on) return Unimplemented(pool + ": " + k + " is not supported (mean or CLS pooling)");
    }
    if (cls == mean) return Unimplemented(pool + ": exactly one of pooling_mode_cls_token and pooling_mode_mean_tokens must be set");
    c->pooling = cls ? Pooling::kCls : Pooling::kMean;
  }
  if (const std::string mods = dir + "/modules.json"; fs::exists(mods, ec)) {
    std::string text;
    TS_ASSIGN_OR_RETURN(text, read_file(mods));
    c->normalize_embd = text.find("sentence_transformers.models.Normalize") != std::string::npos;
  }
  return OkStatus();
}

class Bert final : public Architecture {
 public:
  std::vector<std::string> gguf_names() const override { return {"bert"}; }
  std::vector<std::pair<std::string, std::string>> hf_model_types() const override { return {{"bert", "bert"}}; }
  Result<ModelConfig> config_from_gguf(const gguf::File& f) const override { return bert_config(f); }
  Status config_from_hf(const HfConfigInput& in, ModelConfig* c) const override { return read_bert(in.json, in.dir, c); }
  std::unique_ptr<ArchWeights> new_weights() const override { return std::make_unique<BertWeights>(); }

  // GGUF names (as llama.cpp's converter writes them); hf_tensor_prefix maps them to HF's.
  std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* aw) const override {
    auto* w = static_cast<BertWeights*>(aw);
    const int64_t D = c.n_embd, F = c.n_ff, V = c.n_vocab;
    std::vector<TensorSpec> s = {
        {"token_embd.weight", {V, D}, true, &w->tok_embd, false, false, false, 0, 0, true},
        {"position_embd.weight", {c.n_ctx_train, D}, true, &w->pos_embd, false, false, false, 0, 0, true},
        {"token_types.weight", {std::max(1, c.n_token_types), D}, false, &w->type_embd, false, false, false, 0, 0, true},
        {"token_embd_norm.weight", {D}, true, &w->embd_norm},
        {"token_embd_norm.bias", {D}, true, &w->embd_norm_b},
    };
    w->layers.resize(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      BertLayer& L = w->layers[size_t(l)];
      const std::string p = "blk." + std::to_string(l) + ".";
      s.insert(s.end(), {
          {p + "attn_q.weight", {D, D}, true, &L.attn.wq},
          {p + "attn_q.bias", {D}, true, &L.attn.bq},
          {p + "attn_k.weight", {D, D}, true, &L.attn.wk},
          {p + "attn_k.bias", {D}, true, &L.attn.bk},
          {p + "attn_v.weight", {D, D}, true, &L.attn.wv},
          {p + "attn_v.bias", {D}, true, &L.attn.bv},
          {p + "attn_output.weight", {D, D}, true, &L.attn.wo},
          {p + "attn_output.bias", {D}, true, &L.bo},
          {p + "attn_output_norm.weight", {D}, true, &L.attn_out_norm},
          {p + "attn_output_norm.bias", {D}, true, &L.attn_out_norm_b},
          {p + "ffn_up.weight", {F, D}, true, &L.up},
          {p + "ffn_up.bias", {F}, true, &L.b_up},
          {p + "ffn_down.weight", {D, F}, true, &L.down},
          {p + "ffn_down.bias", {D}, true, &L.b_down},
          {p + "layer_output_norm.weight", {D}, true, &L.out_norm},
          {p + "layer_output_norm.bias", {D}, true, &L.out_norm_b},
      });
    }
    return s;
  }

  std::string hf_tensor_prefix(const ModelConfig&, const std::string& name, const safetensors::Checkpoint& ckpt) const override {
    // BertModel saves bare names; a checkpoint of a task model (BertForMaskedLM ...) nests them.
    const std::string root = ckpt.has("bert.embeddings.word_embeddings.weight") ? "bert." : "";
    const std::string stem = name.substr(0, name.rfind('.'));
    for (const auto& row : kBertNames)
      if (stem == row.ours) return root + row.hf;
    int l = 0;
    std::string layer_stem, suffix;
    if (!safetensors::split_layer_name(name, &l, &layer_stem, &suffix)) return "";
    for (const auto& row : kBertLayerNames)
      if (layer_stem == row.ours) return root + "encoder.layer." + std::to_string(l) + "." + row.hf;
    return "";
  }

  // bert as llama.cpp's converter writes it (the keys models/arch/bert.h reads).
  void add_gguf_config(gguf::MetadataBuilder& w, const ModelConfig& c, const safetensors::LongRopeFactors*) const override {
    w.u32("bert.block_count", c.n_layers);
    w.u32("bert.context_length", c.n_ctx_train);
    w.u32("bert.embedding_length", c.n_embd);
    w.u32("bert.feed_forward_length", c.n_ff);
    w.u32("bert.attention.head_count", c.n_heads);
    w.f32("bert.attention.layer_norm_epsilon", c.norm_eps);
    w.flag("bert.attention.causal", false);
    w.u32("bert.pooling_type", c.pooling == Pooling::kCls ? 2 : 1);  // llama.cpp: 1 mean, 2 cls
    w.u32("tokenizer.ggml.token_type_count", c.n_token_types);
  }

  // An encoder attends within one step's tokens: it keeps nothing between steps.
  std::vector<LayerMemory> memory_layout(const ModelConfig& c) const override {
    return std::vector<LayerMemory>(size_t(c.n_layers), LayerMemory{LayerMemoryKind::kNone, 0});
  }

  // The step graph: the final hidden states [T, D] f32 of every token, marked as output.
  ValueId build_graph(GraphContext& ctx, const ArchWeights& aw) const override {
    const auto& w = static_cast<const BertWeights&>(aw);
    const ModelConfig& c = ctx.c;
    Graph& g = ctx.g;
    const int64_t D = c.n_embd;
    AttentionParams ap;
    ap.scale = float(1.0 / std::sqrt(double(c.head_dim)));
    ap.causal = false;
    // Word + position + token type (every token is of type 0: single-segment inputs).
    ValueId x = g.embed(g.input(w.tok_embd), ctx.tokens, ctx.in.act);  // [T, D]
    x = g.add(x, g.embed(g.input(w.pos_embd), ctx.positions, ctx.in.act));
    if (w.type_embd.buffer) {
      const ValueId types = g.input(w.type_embd);
      const int64_t es = dtype_traits(g.tensor(types).dtype).block_bytes;
      x = g.add(x, g.view(types, {D}, {es}, 0));
    }
    x = g.layer_norm(x, g.input(w.embd_norm), g.input(w.embd_norm_b), c.norm_eps);
    RopeParams no_rope = c.rope;  // absolute positions (bert_config sets n_dims 0)
    no_rope.n_dims = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      const BertLayer& L = w.layers[size_t(l)];
      const ValueId a = ctx.attention(L.attn, x, l, no_rope, kNoValue, ap, g.input(L.bo));
      x = g.layer_norm(g.add(x, a), g.input(L.attn_out_norm), g.input(L.attn_out_norm_b), c.norm_eps);
      ValueId h = g.gelu(ctx.linear(x, L.up, g.input(L.b_up)));
      h = ctx.linear(h, L.down, g.input(L.b_down));
      x = g.layer_norm(g.add(x, h), g.input(L.out_norm), g.input(L.out_norm_b), c.norm_eps);
    }
    if (ctx.in.act != DType::kF32) x = g.cast(x, DType::kF32);  // the host pools f32 rows
    g.mark_output(x);
    ctx.hidden = x;
    return x;
  }
};

}  // namespace

const Architecture& bert_architecture() {
  static const Bert arch;
  return arch;
}

}  // namespace tessera
