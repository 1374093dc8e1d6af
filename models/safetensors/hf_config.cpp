// config.json -> ModelConfig, the same struct the GGUF metadata fills: the keys every family has,
// then the family's own (Architecture::config_from_hf, with the helpers of hf_config.h).
#include <cmath>
#include <filesystem>
#include <limits>

#include "models/arch/registry.h"
#include "models/mapped_file.h"
#include "models/safetensors/hf_config.h"
#include "models/safetensors/hf_model.h"

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

}  // namespace

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

Status read_rope(const JsonObject& o, ModelConfig* c, bool longrope_ok) {
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
  } else if ((type == "longrope" || type == "su") && longrope_ok) {
    // The family reads its factors (phi3: read_phi3).
  } else {
    return Unimplemented(o.file() + ": rope_scaling type '" + type + "' is not supported for checkpoints (default, linear, yarn, llama3)");
  }
  return OkStatus();
}

namespace {

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

}  // namespace

Status read_decoder_hf(const JsonObject& o, ModelConfig* c, bool longrope_ok) {
  if (c->head_dim <= 0 || c->head_dim % 2 != 0)
    return InvalidArgument(o.file() + ": head_dim " + std::to_string(c->head_dim) + " must be positive and even");
  double eps = 1e-5;
  TS_ASSIGN_OR_RETURN(eps, o.get_float("rms_norm_eps", 1e-5));
  c->rms_eps = float(eps);
  if (!(c->rms_eps > 0.0f)) return InvalidArgument(o.file() + ": rms_norm_eps must be positive");
  return read_rope(o, c, longrope_ok);
}

Result<ModelConfig> read_config(const std::string& dir, QuantConfig* quant, LongRopeFactors* longrope) {
  const std::string path = dir + "/config.json";
  json j;
  TS_ASSIGN_OR_RETURN(j, read_json_file(path));
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  const JsonObject top(j, path);
  ModelConfig c;
  std::string mt;
  TS_ASSIGN_OR_RETURN(mt, top.get_string("model_type"));
  const auto found = ArchRegistry::find_hf(mt);
  if (!found) return Unimplemented(path + ": model_type '" + mt + "' is not supported (" + ArchRegistry::hf_model_type_list() + ")");
  const Architecture& arch = *found->first;
  c.arch = found->second;
  TS_ASSIGN_OR_RETURN(c.name, top.get_string("_name_or_path", ""));
  // A multimodal checkpoint (Qwen3.5's *ForConditionalGeneration) keeps the text model's keys in
  // text_config; we load the text model. Its errors name "config.json: text_config".
  const json* text = top.find("num_hidden_layers") ? nullptr : top.find("text_config");
  if (text && !text->is_object()) return InvalidArgument(path + ": text_config should be an object");
  const JsonObject o = text ? JsonObject(*text, path + ": text_config") : top;
  TS_ASSIGN_OR_RETURN(c.n_layers, o.get_int32("num_hidden_layers"));
  TS_ASSIGN_OR_RETURN(c.n_embd, o.get_int32("hidden_size"));
  // A mixture of experts may have no dense width (Qwen3.5-MoE); checked after the family's keys.
  TS_ASSIGN_OR_RETURN(c.n_ff, o.get_int32("intermediate_size", 0));
  TS_ASSIGN_OR_RETURN(c.n_heads, o.get_int32("num_attention_heads"));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, o.get_int32("num_key_value_heads", c.n_heads));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, o.get_int32("max_position_embeddings", 2048));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff < 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ctx_train <= 0)
    return InvalidArgument(path + ": sizes must be positive (num_hidden_layers " + std::to_string(c.n_layers) + ", hidden_size " +
                           std::to_string(c.n_embd) + ", num_attention_heads " + std::to_string(c.n_heads) +
                           ", num_key_value_heads " + std::to_string(c.n_kv_heads) + ")");
  if (c.n_heads % c.n_kv_heads != 0)
    return InvalidArgument(path + ": num_attention_heads " + std::to_string(c.n_heads) + " is not a multiple of num_key_value_heads " +
                           std::to_string(c.n_kv_heads));
  TS_ASSIGN_OR_RETURN(c.head_dim, o.get_int32("head_dim", c.n_embd / c.n_heads));
  TS_RETURN_IF_ERROR(arch.config_from_hf(HfConfigInput{o, dir, mt, longrope}, &c));
  if (c.n_ff <= 0 && !c.is_moe()) {
    TS_RETURN_IF_ERROR(o.get_int32("intermediate_size").status());  // missing: named
    return InvalidArgument(o.file() + ": intermediate_size must be positive");
  }
  // n_vocab and tied_output come from the tensors (as on the GGUF path).
  TS_ASSIGN_OR_RETURN(c.n_vocab, o.get_int32("vocab_size", 0));
  if (c.is_encoder()) return c;
  TS_RETURN_IF_ERROR(read_quant(top, quant));
  return c;
}

}  // namespace tessera::safetensors
