// The Gemma 3 family graph builder (text decoder; GGUF architecture "gemma3"): per-head QK
// RMSNorm, GeGLU with tanh-GELU, sandwich norms (RMSNorm on each block's output before the
// residual add), token embeddings scaled by sqrt(n_embd), sliding-window attention on most
// layers with a RoPE base of their own, tied output head.
//
// Gemma's RMSNorm multiplies by (1 + w); llama.cpp's converter stores 1 + w in GGUF, so the
// stored weight is the multiplier and the norm is our plain rms_norm (checked on Gemma 3 270M by
// tests/model/compare_gemma3.py: adding 1 again makes the perplexity explode).
#pragma once
#include <vector>

#include "models/arch/llama.h"

namespace tessera {

namespace gguf { class File; }

// Reads the config from the gemma3.* keys. Sliding window: gemma3.attention.sliding_window
// (0 or absent: every layer global); which layers slide: gemma3.attention.sliding_window_pattern
// (every n-th layer is global, layer l slides when l % n < n - 1; default 6, as Gemma 3 ships);
// their RoPE base: gemma3.rope.freq_base_swa (default 10000, Gemma 3's rope_local_base_freq).
// A final logit softcap (gemma3.final_logit_softcapping > 0) is refused: no op computes it.
Result<ModelConfig> gemma3_config_from_gguf(const gguf::File& f);
std::vector<TensorSpec> gemma3_tensor_specs(const ModelConfig& cfg, LlamaWeights* w);
// Builds the step graph; returns the logits value ([R, vocab] f32), marked as output.
ValueId build_gemma3_graph(Graph& g, const ModelConfig& cfg, const LlamaWeights& w, const StepTensors& in,
                           const KvCache& kv, ValueId* hidden = nullptr);

}  // namespace tessera
