// `tessera convert`: a Hugging Face checkpoint directory -> one GGUF file that the GGUF loader
// reads as the same model. Float weights keep their dtype (F32/F16/BF16); MXFP4 weights are
// written as GGUF type 39. FP8, INT4 and NVFP4 have no GGUF type with our layout: they are
// refused (convert a float checkpoint instead). llama/mistral q/k rows are permuted from HF's
// rotate-half order into the adjacent-pair order GGUF's llama loader expects (RopeMode::kNormal).
#include <cstring>

#include "models/gguf/gguf.h"
#include "models/safetensors/convert.h"
#include "models/safetensors/hf_model.h"

namespace tessera::safetensors {

namespace {

// HF rotate-half rows -> GGUF adjacent pairs, per head of |d| rows: row 2i+j <- row j*d/2+i.
std::vector<uint8_t> permute_rope_rows(const uint8_t* src, int64_t rows, int64_t row_bytes, int64_t d) {
  std::vector<uint8_t> out(size_t(rows * row_bytes));
  for (int64_t h = 0; h < rows / d; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(out.data() + (h * d + 2 * i + j) * row_bytes, src + (h * d + j * d / 2 + i) * row_bytes, size_t(row_bytes));
  return out;
}

void add_config(gguf::Writer& w, const ModelConfig& c) {
  const std::string a = c.arch + ".";
  w.add_string("general.architecture", c.arch);
  if (!c.name.empty()) w.add_string("general.name", c.name);
  w.add_u32(a + "block_count", uint32_t(c.n_layers));
  w.add_u32(a + "context_length", uint32_t(c.n_ctx_train));
  w.add_u32(a + "embedding_length", uint32_t(c.n_embd));
  w.add_u32(a + "feed_forward_length", uint32_t(c.n_ff));
  w.add_u32(a + "attention.head_count", uint32_t(c.n_heads));
  w.add_u32(a + "attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.add_u32(a + "attention.key_length", uint32_t(c.head_dim));
  w.add_u32(a + "attention.value_length", uint32_t(c.head_dim));
  w.add_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.add_f32(a + "rope.freq_base", c.rope.freq_base);
  w.add_u32(a + "rope.dimension_count", uint32_t(c.rope.n_dims));
  w.add_u32(a + "vocab_size", uint32_t(c.n_vocab));
  if (c.rope.ext_factor > 0.0f) {
    w.add_string(a + "rope.scaling.type", "yarn");
    w.add_f32(a + "rope.scaling.factor", 1.0f / c.rope.freq_scale);
    w.add_u32(a + "rope.scaling.original_context_length", uint32_t(c.rope.n_ctx_orig));
  } else if (c.rope.freq_scale != 1.0f) {
    w.add_string(a + "rope.scaling.type", "linear");
    w.add_f32(a + "rope.scaling.factor", 1.0f / c.rope.freq_scale);
  }
  if (c.is_moe()) {
    w.add_u32(a + "expert_count", uint32_t(c.n_experts));
    w.add_u32(a + "expert_used_count", uint32_t(c.n_experts_used));
    w.add_u32(a + "expert_feed_forward_length", uint32_t(c.n_ff_exp));
    if (c.n_ff_shexp > 0) w.add_u32(a + "expert_shared_feed_forward_length", uint32_t(c.n_ff_shexp));
    w.add_bool(a + "expert_weights_norm", c.expert_weights_norm);
  }
}

void add_tokenizer(gguf::Writer& w, const TokenizerData& d, const std::string& chat_template) {
  w.add_string("tokenizer.ggml.model", d.model);
  if (!d.pre.empty()) w.add_string("tokenizer.ggml.pre", d.pre);
  w.add_string_array("tokenizer.ggml.tokens", d.tokens);
  if (!d.scores.empty()) w.add_f32_array("tokenizer.ggml.scores", d.scores);
  if (!d.token_types.empty()) w.add_i32_array("tokenizer.ggml.token_type", d.token_types);
  if (!d.merges.empty()) w.add_string_array("tokenizer.ggml.merges", d.merges);
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.bos_token_id", d.bos},
                                                 {"tokenizer.ggml.eos_token_id", d.eos},
                                                 {"tokenizer.ggml.eot_token_id", d.eot},
                                                 {"tokenizer.ggml.unknown_token_id", d.unk},
                                                 {"tokenizer.ggml.padding_token_id", d.pad}};
  for (const auto& [key, id] : ids)
    if (id >= 0) w.add_u32(key, uint32_t(id));
  w.add_bool("tokenizer.ggml.add_bos_token", d.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", d.add_eos);
  if (d.model == "llama") w.add_bool("tokenizer.ggml.add_space_prefix", d.add_space_prefix);
  if (!chat_template.empty()) w.add_string("tokenizer.chat_template", chat_template);
}

}  // namespace

Status convert_to_gguf(const std::string& dir, const std::string& out_path, const ConvertOptions& opts) {
  QuantConfig quant;
  TS_ASSIGN_OR_RETURN(ModelConfig cfg, read_config(dir, &quant));
  std::string chat_template;
  TS_ASSIGN_OR_RETURN(TokenizerData tok, read_tokenizer(dir, &chat_template));
  TS_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(dir));
  const TensorRef emb = ckpt->find("model.embed_tokens.weight");
  if (!emb.file || emb.info->shape.size() != 2) return NotFound(dir + ": tensor 'model.embed_tokens.weight' ([vocab, hidden]) is missing");
  cfg.n_vocab = int(emb.info->shape[0]);
  if (cfg.n_vocab != int(tok.tokens.size()))
    return InvalidArgument(dir + ": the embedding has " + std::to_string(cfg.n_vocab) + " rows but tokenizer.json has " +
                           std::to_string(tok.tokens.size()) + " tokens");
  gguf::Writer w;
  add_config(w, cfg);
  add_tokenizer(w, tok, chat_template);
  Weights weights(*ckpt, cfg, quant);
  LlamaWeights slots;
  const bool permute = cfg.arch == "llama" || cfg.arch == "mistral";
  for (const TensorSpec& s : llama_tensor_specs(cfg, &slots)) {
    TS_ASSIGN_OR_RETURN(auto h, weights.get(s));
    if (!h) {
      if (s.required) return NotFound(dir + ": tensor '" + s.name + "' (HF '" + weights.hf_prefix(s.name) + "') is missing");
      continue;
    }
    if (h->shape != s.shape) return InvalidArgument(dir + ": tensor '" + weights.hf_prefix(s.name) + "' does not have the shape the config implies");
    if (dtype_traits(h->dtype).gguf_type < 0 || h->out_scale != 1.0f)
      return Unimplemented(dir + ": tensor '" + weights.hf_prefix(s.name) + "' loads as " + dtype_name(h->dtype) +
                           ", which GGUF cannot store; convert a float (F32/F16/BF16) checkpoint");
    const auto* data = static_cast<const uint8_t*>(h->data);
    std::vector<uint8_t> permuted;
    const bool q = s.name.find(".attn_q.") != std::string::npos, k = s.name.find(".attn_k.") != std::string::npos;
    if (permute && (q || k) && s.shape.size() == 2) {
      permuted = permute_rope_rows(data, s.shape[0], dtype_row_bytes(h->dtype, s.shape[1]), cfg.head_dim);
      data = permuted.data();
    }
    TS_RETURN_IF_ERROR(w.add_tensor(s.name, h->dtype, s.shape, data, h->nbytes));
    if (opts.progress) opts.progress(s.name);
  }
  return w.write(out_path);
}

}  // namespace tessera::safetensors
