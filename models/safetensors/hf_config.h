// Reading config.json for the families (Architecture::config_from_hf): the RoPE and decoder
// keys HF stores the same way for every family, in either transformers 4's or 5's layout.
#pragma once
#include <string>

#include "models/model_config.h"
#include "models/safetensors/json_util.h"

namespace tessera::safetensors {

// Where config.json keeps its RoPE scaling: transformers < 5 write `rope_scaling` (null or absent
// when unscaled) beside top-level rope_theta and partial_rotary_factor; transformers 5 write one
// `rope_parameters` object holding all of them ({"rope_type": "default", "rope_theta": ...} when
// unscaled). nullptr: neither.
const json* rope_scaling_of(const JsonObject& o);
// rope_scaling's type ("rope_type", or the older "type"; "default" when neither is given).
Result<std::string> rope_scaling_type(const json& rs, const std::string& file);
// RoPE: partial_rotary_factor, rope_theta and the scaling types default, linear, yarn and llama3
// (its per-frequency factors into c->rope_freq_factors); "longrope"/"su" pass only when
// |longrope_ok| (the family reads their factors). The layout is NeoX (HF rotates halves).
Status read_rope(const JsonObject& o, ModelConfig* c, bool longrope_ok = false);
// A decoder's keys beyond the common sizes: head_dim checked (positive, even), rms_norm_eps,
// then read_rope.
Status read_decoder_hf(const JsonObject& o, ModelConfig* c, bool longrope_ok = false);

}  // namespace tessera::safetensors
