// config.json -> ModelConfig, the same struct the GGUF metadata fills (models/arch/llama.cpp).
#include <cmath>
#include <filesystem>
#include <limits>

#include "models/mapped_file.h"
#include "models/safetensors/hf_model.h"
#include "models/safetensors/json_util.h"

namespace tessera::safetensors {

// ---- JSON helpers ----

Result<json> read_json_file(const std::string& path) {
  std::string text;
  TS_ASSIGN_OR_RETURN(text, read_file(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  return j;
}

const json* JsonObject::find(const std::string& key) const {
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}
Status JsonObject::missing(const std::string& key) const { return NotFound(file_ + ": key '" + key + "' is missing"); }
Status JsonObject::mistyped(const std::string& key, const char* want) const {
  return InvalidArgument(file_ + ": key '" + key + "' should be " + want + ", got " + find(key)->dump());
}
Result<int64_t> JsonObject::get_int(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  if (!v->is_number_integer()) return mistyped(key, "an integer");
  return v->get<int64_t>();
}
Result<int64_t> JsonObject::get_int(const std::string& key, int64_t fallback) const {
  if (!find(key)) return fallback;
  return get_int(key);
}
Status JsonObject::out_of_int(const std::string& key, int64_t v) const {
  return InvalidArgument(file_ + ": key '" + key + "' value " + std::to_string(v) + " does not fit in 32 bits");
}
Result<int> JsonObject::get_int32(const std::string& key) const {
  int64_t v = 0;
  TS_ASSIGN_OR_RETURN(v, get_int(key));
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) return out_of_int(key, v);
  return int(v);
}
Result<int> JsonObject::get_int32(const std::string& key, int64_t fallback) const {
  if (find(key)) return get_int32(key);
  if (fallback < std::numeric_limits<int>::min() || fallback > std::numeric_limits<int>::max()) return out_of_int(key, fallback);
  return int(fallback);
}
Result<double> JsonObject::get_float(const std::string& key, double fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number()) return mistyped(key, "a number");
  return v->get<double>();
}
Result<bool> JsonObject::get_bool(const std::string& key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) return mistyped(key, "true or false");
  return v->get<bool>();
}
Result<std::string> JsonObject::get_string(const std::string& key) const {
  const json* v = find(key);
  if (!v) return missing(key);
  if (!v->is_string()) return mistyped(key, "a string");
  return v->get<std::string>();
}
Result<std::string> JsonObject::get_string(const std::string& key, std::string fallback) const {
  if (!find(key)) return fallback;
  return get_string(key);
}

namespace {

// HF model_type -> our architecture name (GGUF's general.architecture).
struct ArchRow {
  const char* model_type;
  const char* arch;
};
constexpr ArchRow kArchs[] = {
    {"llama", "llama"}, {"mistral", "mistral"}, {"qwen2", "qwen2"},       {"qwen3", "qwen3"},
    {"mixtral", "llama"}, {"qwen2_moe", "qwen2moe"}, {"qwen3_moe", "qwen3moe"}, {"olmoe", "olmoe"},
    {"bert", "bert"}, {"phi3", "phi3"},
};

// BERT encoders: the erf GELU, LayerNorm epsilon, token types, and the sentence-transformers
// modules beside the checkpoint (1_Pooling/config.json: mean or CLS pooling; modules.json: a
// Normalize module). Without those files: mean pooling, normalised, as OpenAI's embeddings are.
Status read_bert(const JsonObject& o, const std::string& dir, ModelConfig* c) {
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
    json pj;
    TS_ASSIGN_OR_RETURN(pj, read_json_file(pool));
    if (!pj.is_object()) return InvalidArgument(pool + ": not a JSON object");
    const JsonObject po(pj, pool);
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

// llama3 scaling as HF's _compute_llama3_parameters defines it: with wavelength w = 2 pi / f of
// each frequency f and L = original_max_position_embeddings, frequencies with w > L / low_freq_factor
// are divided by |factor|, those with w < L / high_freq_factor are kept, and the ones between are
// interpolated, f' = (1 - s) f / factor + s f with s = (L / w - low) / (high - low). We store the
// divisor f / f' per frequency, which is what GGUF's rope_freqs tensor holds and rope divides by.
Status llama3_factors(const JsonObject& s, const std::string& file, double factor, ModelConfig* c) {
  double low = 1.0, high = 4.0;
  TS_ASSIGN_OR_RETURN(low, s.get_float("low_freq_factor", 1.0));
  TS_ASSIGN_OR_RETURN(high, s.get_float("high_freq_factor", 4.0));
  int orig = 0;
  TS_ASSIGN_OR_RETURN(orig, s.get_int32("original_max_position_embeddings"));
  if (!(low > 0) || !(high > low) || orig <= 0)
    return InvalidArgument(file + ": rope_scaling (llama3) needs 0 < low_freq_factor (" + std::to_string(low) +
                           ") < high_freq_factor (" + std::to_string(high) + ") and original_max_position_embeddings > 0 (" +
                           std::to_string(orig) + ")");
  const RopeParams& r = c->rope;
  const double low_wavelen = orig / low, high_wavelen = orig / high;
  c->rope_freq_factors.resize(size_t(r.n_dims / 2));
  for (int i = 0; i < r.n_dims / 2; ++i) {
    const double freq = std::pow(double(r.freq_base), -2.0 * i / r.n_dims);
    const double wavelen = 2.0 * M_PI / freq;
    double scaled = freq;
    if (wavelen > low_wavelen) {
      scaled = freq / factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (orig / wavelen - low) / (high - low);
      scaled = (1.0 - smooth) * freq / factor + smooth * freq;
    }
    c->rope_freq_factors[size_t(i)] = float(freq / scaled);
  }
  return OkStatus();
}

// Where config.json keeps its RoPE scaling: transformers < 5 write `rope_scaling` (null or absent
// when unscaled) beside top-level rope_theta and partial_rotary_factor; transformers 5 write one
// `rope_parameters` object holding all of them ({"rope_type": "default", "rope_theta": ...} when
// unscaled). nullptr: neither.
const json* rope_scaling_of(const JsonObject& o) {
  const json* rs = o.find("rope_scaling");
  return rs ? rs : o.find("rope_parameters");
}

// A RoPE setting that transformers 5 keep in rope_parameters and older versions at the top level.
Result<double> rope_setting(const JsonObject& o, const std::string& key, double fallback) {
  const json* rp = o.find("rope_parameters");
  if (rp && rp->is_object() && rp->contains(key)) return JsonObject(*rp, o.file() + ": rope_parameters").get_float(key, fallback);
  return o.get_float(key, fallback);
}

// rope_scaling's type ("rope_type", or the older "type"; "default" when neither is given).
Result<std::string> rope_scaling_type(const json& rs, const std::string& file) {
  JsonObject s(rs, file + ": rope_scaling");
  std::string type;
  TS_ASSIGN_OR_RETURN(type, s.get_string("rope_type", ""));
  if (type.empty()) {
    TS_ASSIGN_OR_RETURN(type, s.get_string("type", "default"));
  }
  return type;
}

Status read_rope(const JsonObject& o, ModelConfig* c) {
  RopeParams& r = c->rope;
  // HF rotates halves of each head for every architecture here (see hf_model.h).
  r.mode = RopeMode::kNeox;
  double partial = 1.0;
  TS_ASSIGN_OR_RETURN(partial, rope_setting(o, "partial_rotary_factor", 1.0));
  // Range-checked before the conversion: a double past int's range is undefined behaviour.
  if (!(partial > 0.0 && partial <= 1.0))
    return InvalidArgument(o.file() + ": partial_rotary_factor " + std::to_string(partial) + " must be in (0, 1]");
  r.n_dims = int(c->head_dim * partial);
  if (r.n_dims <= 0 || r.n_dims > c->head_dim || r.n_dims % 2)
    return InvalidArgument(o.file() + ": partial_rotary_factor " + std::to_string(partial) + " gives " +
                           std::to_string(r.n_dims) + " rotary dims (must be even and <= head_dim)");
  double theta = 10000.0;
  TS_ASSIGN_OR_RETURN(theta, rope_setting(o, "rope_theta", 10000.0));
  r.freq_base = float(theta);
  r.n_ctx_orig = c->n_ctx_train;
  const json* rs = rope_scaling_of(o);
  if (!rs) return OkStatus();
  if (!rs->is_object()) return InvalidArgument(o.file() + ": rope_scaling should be an object or null");
  JsonObject s(*rs, o.file() + ": rope_scaling");
  std::string type;
  TS_ASSIGN_OR_RETURN(type, rope_scaling_type(*rs, o.file()));
  double factor = 1.0;
  TS_ASSIGN_OR_RETURN(factor, s.get_float("factor", 1.0));
  if (type == "default") return OkStatus();
  if (!(factor > 0)) return InvalidArgument(o.file() + ": rope_scaling.factor must be positive");
  if (type == "linear") {
    r.freq_scale = float(1.0 / factor);
  } else if (type == "yarn") {
    r.freq_scale = float(1.0 / factor);
    r.ext_factor = 1.0f;
    TS_ASSIGN_OR_RETURN(r.n_ctx_orig, s.get_int32("original_max_position_embeddings", c->n_ctx_train));
  } else if (type == "llama3") {
    TS_RETURN_IF_ERROR(llama3_factors(s, o.file(), factor, c));
  } else if ((type == "longrope" || type == "su") && c->arch == "phi3") {
    // read_phi3 reads its factors.
  } else {
    return Unimplemented(o.file() + ": rope_scaling type '" + type + "' is not supported for checkpoints (default, linear, yarn, llama3)");
  }
  return OkStatus();
}

Status read_moe(const JsonObject& o, const std::string& model_type, ModelConfig* c) {
  const char* n_key = model_type == "mixtral" ? "num_local_experts" : "num_experts";
  TS_ASSIGN_OR_RETURN(c->n_experts, o.get_int32(n_key));
  TS_ASSIGN_OR_RETURN(c->n_experts_used, o.get_int32("num_experts_per_tok"));
  if (c->n_experts < 1 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
    return InvalidArgument(o.file() + ": num_experts_per_tok " + std::to_string(c->n_experts_used) + " must be in [1, " + n_key +
                           " " + std::to_string(c->n_experts) + "]");
  // Mixtral's experts use intermediate_size; the Qwen MoE models have their own width.
  TS_ASSIGN_OR_RETURN(c->n_ff_exp, o.get_int32(model_type == "mixtral" || model_type == "olmoe" ? "intermediate_size"
                                                                                                  : "moe_intermediate_size"));
  if (model_type == "qwen2_moe") {
    TS_ASSIGN_OR_RETURN(c->n_ff_shexp, o.get_int32("shared_expert_intermediate_size"));
  }
  const bool norm_default = model_type == "mixtral";  // qwen2_moe, qwen3_moe, olmoe: norm_topk_prob
  TS_ASSIGN_OR_RETURN(c->expert_weights_norm, o.get_bool("norm_topk_prob", norm_default));
  if (c->n_ff_exp <= 0 || c->n_ff_shexp < 0) return InvalidArgument(o.file() + ": expert FFN widths must be positive");
  return OkStatus();
}

Status read_quant(const JsonObject& o, QuantConfig* q) {
  const json* qc = o.find("quantization_config");
  if (!qc) return OkStatus();
  if (!qc->is_object()) return InvalidArgument(o.file() + ": quantization_config should be an object");
  JsonObject s(*qc, o.file() + ": quantization_config");
  TS_ASSIGN_OR_RETURN(q->method, s.get_string("quant_method", ""));
  TS_ASSIGN_OR_RETURN(q->bits, s.get_int32("bits", q->method == "awq" || q->method == "gptq" ? 4 : 0));
  if ((q->method == "awq" || q->method == "gptq") && q->bits != 4)
    return Unimplemented(o.file() + ": " + q->method + " with bits " + std::to_string(q->bits) + " (only 4-bit is supported)");
  TS_ASSIGN_OR_RETURN(q->group_size, s.get_int32("group_size", 0));
  std::string fmt;
  TS_ASSIGN_OR_RETURN(fmt, s.get_string("checkpoint_format", "gptq"));
  q->gptq_v2 = fmt == "gptq_v2";
  if (q->method == "gptq") {
    bool desc_act = false;
    TS_ASSIGN_OR_RETURN(desc_act, s.get_bool("desc_act", false));
    if (desc_act) return Unimplemented(o.file() + ": GPTQ with desc_act (act-order, g_idx) is not supported");
  }
  return OkStatus();
}

// rope_scaling.<key> of a longrope config: |n| positive numbers.
Result<std::vector<float>> longrope_factor_list(const json& rope_scaling, const std::string& file, const std::string& key, size_t n) {
  const json* list = rope_scaling.contains(key) ? &rope_scaling[key] : nullptr;
  if (!list || !list->is_array() || list->size() != n)
    return InvalidArgument(file + ": rope_scaling." + key + " must be a list of " + std::to_string(n) + " numbers (rotary dims / 2)");
  std::vector<float> factors;
  factors.reserve(n);
  for (const json& v : *list) {
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
Status read_phi3(const JsonObject& o, ModelConfig* c, LongRopeFactors* longrope) {
  TS_ASSIGN_OR_RETURN(c->sliding_window, o.get_int32("sliding_window", 0));
  if (c->sliding_window < 0) return InvalidArgument(o.file() + ": sliding_window must not be negative");
  // On every layer: layer_sliding stays empty (sized by a layer count not yet checked against
  // the checkpoint's tensors).
  int orig = 0;
  TS_ASSIGN_OR_RETURN(orig, o.get_int32("original_max_position_embeddings", c->n_ctx_train));
  const json* rs = rope_scaling_of(o);
  if (rs) {
    // read_rope has checked it is an object and refused types it does not know; "default" is
    // no scaling, and of the rest only longrope ("su" in older configs) is Phi-3's.
    std::string type;
    TS_ASSIGN_OR_RETURN(type, rope_scaling_type(*rs, o.file()));
    if (type == "default") {
      rs = nullptr;
    } else if (type != "longrope" && type != "su") {
      return Unimplemented(o.file() + ": rope_scaling type '" + type + "' is not supported for phi3 (longrope, su)");
    }
  }
  if (rs) {
    JsonObject s(*rs, o.file() + ": rope_scaling");
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
    JsonObject so(*rs, o.file() + ": rope_scaling");
    TS_ASSIGN_OR_RETURN(attn, so.get_float("attention_factor", attn));
    if (!(attn > 0)) return InvalidArgument(o.file() + ": rope_scaling.attention_factor must be positive");
    c->rope.attn_factor = float(attn);
  }
  return OkStatus();
}

}  // namespace

Result<ModelConfig> read_config(const std::string& dir, QuantConfig* quant, LongRopeFactors* longrope) {
  const std::string path = dir + "/config.json";
  json j;
  TS_ASSIGN_OR_RETURN(j, read_json_file(path));
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  const JsonObject o(j, path);
  ModelConfig c;
  std::string mt;
  TS_ASSIGN_OR_RETURN(mt, o.get_string("model_type"));
  const ArchRow* row = nullptr;
  for (const auto& a : kArchs)
    if (mt == a.model_type) row = &a;
  if (!row)
    return Unimplemented(path + ": model_type '" + mt +
                         "' is not supported (llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, olmoe, bert, phi3)");
  c.arch = row->arch;
  TS_ASSIGN_OR_RETURN(c.name, o.get_string("_name_or_path", ""));
  TS_ASSIGN_OR_RETURN(c.n_layers, o.get_int32("num_hidden_layers"));
  TS_ASSIGN_OR_RETURN(c.n_embd, o.get_int32("hidden_size"));
  TS_ASSIGN_OR_RETURN(c.n_ff, o.get_int32("intermediate_size"));
  TS_ASSIGN_OR_RETURN(c.n_heads, o.get_int32("num_attention_heads"));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, o.get_int32("num_key_value_heads", c.n_heads));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, o.get_int32("max_position_embeddings", 2048));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ctx_train <= 0)
    return InvalidArgument(path + ": sizes must be positive (num_hidden_layers " + std::to_string(c.n_layers) + ", hidden_size " +
                           std::to_string(c.n_embd) + ", num_attention_heads " + std::to_string(c.n_heads) +
                           ", num_key_value_heads " + std::to_string(c.n_kv_heads) + ")");
  if (c.n_heads % c.n_kv_heads != 0)
    return InvalidArgument(path + ": num_attention_heads " + std::to_string(c.n_heads) + " is not a multiple of num_key_value_heads " +
                           std::to_string(c.n_kv_heads));
  TS_ASSIGN_OR_RETURN(c.head_dim, o.get_int32("head_dim", c.n_embd / c.n_heads));
  if (c.arch == "bert") {
    TS_RETURN_IF_ERROR(read_bert(o, dir, &c));
    TS_ASSIGN_OR_RETURN(c.n_vocab, o.get_int32("vocab_size", 0));
    return c;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return InvalidArgument(path + ": head_dim " + std::to_string(c.head_dim) + " must be positive and even");
  double eps = 1e-5;
  TS_ASSIGN_OR_RETURN(eps, o.get_float("rms_norm_eps", 1e-5));
  c.rms_eps = float(eps);
  if (!(c.rms_eps > 0.0f)) return InvalidArgument(path + ": rms_norm_eps must be positive");
  TS_RETURN_IF_ERROR(read_rope(o, &c));
  c.qk_norm = (c.arch == "qwen3" || c.arch == "qwen3moe") ? QkNorm::kPerHead : c.arch == "olmoe" ? QkNorm::kFull : QkNorm::kNone;
  c.qkv_bias = c.arch == "qwen2" || c.arch == "qwen2moe";
  if (mt == "mixtral" || mt == "qwen2_moe" || mt == "qwen3_moe" || mt == "olmoe") {
    TS_RETURN_IF_ERROR(read_moe(o, mt, &c));
  }
  if (c.arch == "phi3") {
    TS_RETURN_IF_ERROR(read_phi3(o, &c, longrope));
  }
  // n_vocab and tied_output come from the tensors (as on the GGUF path).
  TS_ASSIGN_OR_RETURN(c.n_vocab, o.get_int32("vocab_size", 0));
  TS_RETURN_IF_ERROR(read_quant(o, quant));
  return c;
}

}  // namespace tessera::safetensors
