// GGUF hyperparameter reading the family files share: optional keys with fallbacks, range-checked
// 32-bit sizes, and the decoder keys every family stores under {arch}.*.
#pragma once
#include <optional>
#include <string>

#include "core/status.h"
#include "models/model_config.h"

namespace tessera {

namespace gguf { class File; }

// An optional integer key, with |fallback| when absent (a mistyped key is still an error).
Result<int64_t> gguf_int_or(const gguf::File& f, const std::string& key, int64_t fallback);
// An integer key that must fit an int (every size in ModelConfig is one): GGUF stores them as
// u32/u64, and 2^32 + 1 must be an error, not wrap into a small, plausible 1. |fallback| as
// gguf_int_or; nullopt makes the key required.
Result<int> gguf_int32_key(const gguf::File& f, const std::string& key, std::optional<int64_t> fallback = std::nullopt);
Result<double> gguf_float_or(const gguf::File& f, const std::string& key, double fallback);

// The hyperparameters every decoder family stores under {arch}.*: sizes, heads, head dim,
// RMSNorm epsilon, context length and RoPE (dimensions, base, linear/YaRN scaling; "llama3"
// scaling is accepted, its factors come as the rope_freqs tensor). |c->arch| must be set; the
// RoPE layout (normal/NeoX) is the family's to choose. Errors name the file and key.
Status read_decoder_config(const gguf::File& f, ModelConfig* c);

// Mixture-of-experts keys: {arch}.expert_count (absent: a dense model, or an error if |required|),
// .expert_used_count, .expert_feed_forward_length (default n_ff),
// .expert_shared_feed_forward_length (default n_ff if |shared_default|, else no shared expert),
// .expert_weights_norm (default |weights_norm|).
Status read_moe_config(const gguf::File& f, ModelConfig* c, bool required, bool weights_norm, bool shared_default);

}  // namespace tessera
