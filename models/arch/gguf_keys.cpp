#include "models/arch/gguf_keys.h"

#include <limits>

#include "models/gguf/gguf.h"

namespace tessera {

Result<int64_t> gguf_int_or(const gguf::File& f, const std::string& key, int64_t fallback) {
  if (!f.find(key)) return fallback;
  return f.get_int(key);
}

Result<int> gguf_int32_key(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback) {
  int64_t v = 0;
  if (fallback) {
    TS_ASSIGN_OR_RETURN(v, gguf_int_or(f, key, *fallback));
  } else {
    TS_ASSIGN_OR_RETURN(v, f.get_int(key));
  }
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    return InvalidArgument(f.path() + ": key '" + key + "' value " + std::to_string(v) + " does not fit in 32 bits");
  return int(v);
}

Result<double> gguf_float_or(const gguf::File& f, const std::string& key, double fallback) {
  if (!f.find(key)) return fallback;
  return f.get_float(key);
}

Status read_decoder_config(const gguf::File& f, ModelConfig* cp) {
  ModelConfig& c = *cp;
  if (f.find("general.name")) {
    TS_ASSIGN_OR_RETURN(c.name, f.get_string("general.name"));
  }
  const std::string a = c.arch + ".";
  TS_ASSIGN_OR_RETURN(c.n_layers, gguf_int32_key(f, a + "block_count"));
  TS_ASSIGN_OR_RETURN(c.n_embd, gguf_int32_key(f, a + "embedding_length"));
  // MoE files may carry no dense FFN width (Qwen3.5-MoE's config has none): the experts' then.
  if (f.find(a + "feed_forward_length") || !f.find(a + "expert_feed_forward_length")) {
    TS_ASSIGN_OR_RETURN(c.n_ff, gguf_int32_key(f, a + "feed_forward_length"));
  } else {
    TS_ASSIGN_OR_RETURN(c.n_ff, gguf_int32_key(f, a + "expert_feed_forward_length"));
  }
  TS_ASSIGN_OR_RETURN(c.n_heads, gguf_int32_key(f, a + "attention.head_count"));
  TS_ASSIGN_OR_RETURN(c.n_kv_heads, gguf_int32_key(f, a + "attention.head_count_kv", c.n_heads));
  TS_ASSIGN_OR_RETURN(c.n_ctx_train, gguf_int32_key(f, a + "context_length", 2048));
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_ff <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ctx_train <= 0)
    return InvalidArgument(f.path() + ": hyperparameters must be positive (block_count " + std::to_string(c.n_layers) +
                           ", embedding_length " + std::to_string(c.n_embd) + ", head_count " + std::to_string(c.n_heads) +
                           ", head_count_kv " + std::to_string(c.n_kv_heads) + ")");
  if (c.n_heads % c.n_kv_heads != 0)
    return InvalidArgument(f.path() + ": head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                           std::to_string(c.n_kv_heads));
  TS_ASSIGN_OR_RETURN(c.head_dim, gguf_int32_key(f, a + "attention.key_length", c.n_embd / c.n_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return InvalidArgument(f.path() + ": head dimension " + std::to_string(c.head_dim) + " must be positive and even");
  double d;
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "attention.layer_norm_rms_epsilon", 1e-5)); c.rms_eps = float(d);
  if (!(c.rms_eps > 0.0f)) return InvalidArgument(f.path() + ": layer_norm_rms_epsilon must be positive");

  RopeParams& r = c.rope;
  TS_ASSIGN_OR_RETURN(r.n_dims, gguf_int32_key(f, a + "rope.dimension_count", c.head_dim));
  if (r.n_dims <= 0 || r.n_dims > c.head_dim || r.n_dims % 2)
    return InvalidArgument(f.path() + ": rope.dimension_count " + std::to_string(r.n_dims) + " must be even and <= head dim");
  TS_ASSIGN_OR_RETURN(d, gguf_float_or(f, a + "rope.freq_base", 10000.0)); r.freq_base = float(d);
  std::string scaling = "none";
  if (f.find(a + "rope.scaling.type")) {
    TS_ASSIGN_OR_RETURN(scaling, f.get_string(a + "rope.scaling.type"));
  }
  double factor = 1.0;
  TS_ASSIGN_OR_RETURN(factor, gguf_float_or(f, a + "rope.scaling.factor", 1.0));
  if (scaling == "linear" && factor > 0) {
    r.freq_scale = float(1.0 / factor);
  } else if (scaling == "yarn" && factor > 0) {
    r.freq_scale = float(1.0 / factor);
    r.ext_factor = 1.0f;
    TS_ASSIGN_OR_RETURN(r.n_ctx_orig, gguf_int32_key(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
    // YaRN's attention temperature: mscale is applied inside rope (see core/op.h RopeParams).
  } else if (scaling != "none" && scaling != "llama3") {
    return Unimplemented(f.path() + ": rope scaling type '" + scaling + "'");
  }
  if (r.n_ctx_orig == 0) r.n_ctx_orig = c.n_ctx_train;
  return OkStatus();
}

Status read_moe_config(const gguf::File& f, ModelConfig* c, bool required, bool weights_norm, bool shared_default) {
  const std::string a = c->arch + ".";
  TS_ASSIGN_OR_RETURN(c->n_experts, gguf_int32_key(f, a + "expert_count", 0));
  if (c->n_experts == 0) {
    if (required) return NotFound(f.path() + ": key '" + a + "expert_count' is missing (required for " + c->arch + ")");
    return OkStatus();
  }
  TS_ASSIGN_OR_RETURN(c->n_experts_used, gguf_int32_key(f, a + "expert_used_count"));
  if (c->n_experts < 0 || c->n_experts_used < 1 || c->n_experts_used > c->n_experts)
    return InvalidArgument(f.path() + ": expert_used_count " + std::to_string(c->n_experts_used) + " must be in [1, expert_count " +
                           std::to_string(c->n_experts) + "]");
  TS_ASSIGN_OR_RETURN(c->n_ff_exp, gguf_int32_key(f, a + "expert_feed_forward_length", c->n_ff));
  TS_ASSIGN_OR_RETURN(c->n_ff_shexp, gguf_int32_key(f, a + "expert_shared_feed_forward_length", shared_default ? c->n_ff : 0));
  c->expert_weights_norm = weights_norm;
  if (f.find(a + "expert_weights_norm")) {
    TS_ASSIGN_OR_RETURN(c->expert_weights_norm, f.get_bool(a + "expert_weights_norm"));
  }
  if (c->n_ff_exp <= 0 || c->n_ff_shexp < 0) return InvalidArgument(f.path() + ": expert FFN widths must be positive");
  return OkStatus();
}

}  // namespace tessera
