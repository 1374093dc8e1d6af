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
#pragma once
#include <vector>

#include "models/arch/llama.h"

namespace tessera {

namespace gguf { class File; }

Result<ModelConfig> phi3_config_from_gguf(const gguf::File& f);
std::vector<TensorSpec> phi3_tensor_specs(const ModelConfig& cfg, LlamaWeights* w);
// Builds the step graph; returns the logits value ([R, vocab] f32), marked as output.
ValueId build_phi3_graph(Graph& g, const ModelConfig& cfg, const LlamaWeights& w, const StepTensors& in, const KvCache& kv,
                         ValueId* hidden = nullptr);

}  // namespace tessera
