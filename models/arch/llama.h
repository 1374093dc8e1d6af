// The llama family graph builder: Llama 2/3, Mistral, Qwen2/2.5 (q/k/v biases), Qwen3 (QK-norm),
// SmolLM (tied embeddings), and their mixture-of-experts forms: Mixtral (llama with experts),
// Qwen2-MoE (shared expert), Qwen3-MoE, OLMoE. GQA, RoPE (normal or NeoX layout,
// linear/YaRN/llama3 scaling).
#pragma once
#include <vector>

#include "core/graph.h"
#include "core/kv/kv_cache.h"
#include "models/model_config.h"

namespace tessera {

namespace gguf { class File; }

struct LlamaLayer {
  Tensor attn_norm, wq, wk, wv, wo;
  Tensor bq, bk, bv;          // optional (qwen2): no buffer when absent
  Tensor q_norm, k_norm;      // optional (qwen3)
  Tensor ffn_norm, w_gate, w_up, w_down;   // dense FFN
  // Mixture of experts: router [E, D], experts [E, F, D] / [E, D, F].
  Tensor router, gate_exps, up_exps, down_exps;
  // Shared expert (qwen2moe): sigmoid(x . shexp_gate) * FFN_shared(x).
  Tensor shexp_gate, gate_shexp, up_shexp, down_shexp;
};

struct LlamaWeights {
  Tensor tok_embd, output_norm, output;
  Tensor rope_freqs;          // optional (llama3 scaling)
  std::vector<LlamaLayer> layers;
};

// The per-step inputs, already on the device.
struct StepTensors {
  Tensor tokens, positions, slot_mapping, query_start, seq_lens, block_tables, logit_rows;
};

// Reads the config from GGUF metadata (general.architecture and the {arch}.* keys).
Result<ModelConfig> llama_config_from_gguf(const gguf::File& f);
// The tensor names and shapes the config implies (checked before any weight is touched).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // outermost first
  bool required;
  Tensor* slot;
  // Routed experts [E, ...]: the merged 3-D tensor |name| (blk.N.ffn_gate_exps.weight) or, in the
  // older layout, E tensors blk.N.ffn_gate.0.weight ... of shape[1:] each.
  bool experts = false;
  // A [1, D] row that files may also store 1-D as [D] (qwen2moe's ffn_gate_inp_shexp).
  bool row_may_be_1d = false;
};
// The name of expert |e|'s tensor in the per-expert layout, from the merged name.
std::string per_expert_name(const std::string& merged, int e);
std::vector<TensorSpec> llama_tensor_specs(const ModelConfig& cfg, LlamaWeights* w);
// Builds the step graph; returns the logits value ([R, vocab] f32), marked as output. For MoE
// models, |route_ids| (optional) receives each layer's routed expert ids ([T, k] i32), also
// marked as outputs so they stay readable after compute (expert statistics).
ValueId build_llama_graph(Graph& g, const ModelConfig& cfg, const LlamaWeights& w, const StepTensors& in,
                          const KvCache& kv, std::vector<ValueId>* route_ids = nullptr);

}  // namespace tessera
