// The llama family graph builder: Llama 2/3, Mistral, Qwen2/2.5 (q/k/v biases), Qwen3 (QK-norm),
// SmolLM (tied embeddings), and their mixture-of-experts forms: Mixtral (llama with experts),
// Qwen2-MoE (shared expert), Qwen3-MoE, OLMoE. GQA, RoPE (normal or NeoX layout,
// linear/YaRN/llama3 scaling).
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "core/graph.h"
#include "core/kv/kv_cache.h"
#include "models/model_config.h"

namespace tessera {

namespace gguf { class File; }

// A loaded weight and the factor a matmul by it is multiplied by: the f32 tensor scale of NVFP4
// weights, which their blocks leave out (quant/README.md); 1 for every other format. Set once at
// load time, so building a step graph looks nothing up.
struct WeightTensor : Tensor {
  float out_scale = 1.0f;
};

// One decoder layer's weights; the gemma3 family (models/arch/gemma3.h) uses the same struct.
struct LlamaLayer {
  WeightTensor attn_norm, wq, wk, wv, wo;
  WeightTensor bq, bk, bv;          // optional (qwen2): no buffer when absent
  WeightTensor q_norm, k_norm;      // optional (qwen3)
  WeightTensor ffn_norm, w_gate, w_up, w_down;   // dense FFN
  WeightTensor post_attn_norm, post_ffn_norm;     // optional (gemma3): norms of the block outputs
  // bert: biases of the output and FFN projections, and of its post-norms (post_attn_norm after
  // attention + residual, post_ffn_norm after the FFN + residual).
  WeightTensor bo, b_up, b_down, post_attn_norm_b, post_ffn_norm_b;
  // Mixture of experts: router [E, D], experts [E, F, D] / [E, D, F].
  WeightTensor router, gate_exps, up_exps, down_exps;
  // Shared expert (qwen2moe): sigmoid(x . shexp_gate) * FFN_shared(x).
  WeightTensor shexp_gate, gate_shexp, up_shexp, down_shexp;

  // Calls |f| on every tensor field, absent ones (no buffer) included. The one list of the
  // fields: weight_tensors() and the loader's check of llama_tensor_specs walk it, so a new field
  // goes here too (Model::load_weights fails with Internal when the spec table binds a field this
  // walk misses).
  template <class F> void for_each_tensor(F&& f) { each(*this, f); }
  template <class F> void for_each_tensor(F&& f) const { each(*this, f); }

 private:
  template <class Self, class F> static void each(Self& L, F& f) {
    for (auto* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm, &L.ffn_norm,
                    &L.post_attn_norm, &L.post_ffn_norm, &L.bo, &L.b_up, &L.b_down, &L.post_attn_norm_b, &L.post_ffn_norm_b, &L.w_gate, &L.w_up, &L.w_down, &L.router, &L.gate_exps, &L.up_exps, &L.down_exps, &L.shexp_gate,
                    &L.gate_shexp, &L.up_shexp, &L.down_shexp})
      f(*t);
  }
};

struct LlamaWeights {
  WeightTensor tok_embd, output_norm, output;
  WeightTensor rope_freqs;          // optional (llama3 scaling)
  // bert: learned positions [n_ctx, D], token types [n_types, D], the embedding LayerNorm.
  WeightTensor pos_embd, type_embd, embd_norm, embd_norm_b;
  std::vector<LlamaLayer> layers;
  // Tied models (no output.weight) on a device whose prepare_weight repacks: the token embedding
  // prepared for the output matmul, while tok_embd keeps the rows the embed op reads. Not a weight
  // of its own (for_each_tensor leaves it out: its parameters are tok_embd's).
  WeightTensor output_tied;

  // The output head's weight.
  const WeightTensor& head(const ModelConfig& c) const {
    return !c.tied_output ? output : output_tied.buffer ? output_tied : tok_embd;
  }

  // Every tensor, the model's own then each layer's (see LlamaLayer::for_each_tensor).
  template <class F> void for_each_tensor(F&& f) { each(*this, f); }
  template <class F> void for_each_tensor(F&& f) const { each(*this, f); }

 private:
  template <class Self, class F> static void each(Self& w, F& f) {
    for (auto* t : {&w.tok_embd, &w.output_norm, &w.output, &w.rope_freqs, &w.pos_embd, &w.type_embd, &w.embd_norm,
                    &w.embd_norm_b})
      f(*t);
    for (auto& L : w.layers) L.for_each_tensor(f);
  }
};

// The per-step inputs, already on the device, and the dtype the step's activations are built in
// (the residual stream and everything computed from it; the sampled rows go back to f32 before
// the output head, so logits are always f32).
struct StepTensors {
  Tensor tokens, positions, slot_mapping, query_start, seq_lens, block_tables, logit_rows;
  DType act = DType::kF32;
};

// Reads the config from GGUF metadata (general.architecture and the {arch}.* keys).
Result<ModelConfig> llama_config_from_gguf(const gguf::File& f);
// The tensor names and shapes the config implies (checked before any weight is touched).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // outermost first
  bool required;
  WeightTensor* slot;
  // Routed experts [E, ...]: the merged 3-D tensor |name| (blk.N.ffn_gate_exps.weight) or, in the
  // older layout, E tensors blk.N.ffn_gate.0.weight ... of shape[1:] each.
  bool experts = false;
  // A [1, D] row that files may also store 1-D as [D] (qwen2moe's ffn_gate_inp_shexp).
  bool row_may_be_1d = false;
  // A 2-D weight the graph reads through matmul_id (as a one-expert [1, N, K] view: qwen2moe's
  // ffn_down_shexp), so Device::prepare_weight must prepare it for kMatmulId, not kMatmul.
  bool read_by_matmul_id = false;
  // A row range of a fused weight (phi3's attn_qkv, ffn_up): the file stores |name| as
  // [fused_rows, shape[1]] and this slot takes rows [row_begin, row_begin + shape[0]). 0: not fused.
  int64_t fused_rows = 0;
  int64_t row_begin = 0;
};
// The name of expert |e|'s tensor in the per-expert layout, from the merged name.
std::string per_expert_name(const std::string& merged, int e);
std::vector<TensorSpec> llama_tensor_specs(const ModelConfig& cfg, LlamaWeights* w);

// One weight as a file loader hands it to Model: host bytes in our dtype and layout, and the
// memory region they lie in, so a device that maps host memory (the CPU) can use them in place.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first
  const void* data = nullptr;
  size_t nbytes = 0;
  const void* region = nullptr;  // start of the mapped file (or owned block) holding |data|
  size_t region_bytes = 0;
  std::shared_ptr<const void> keepalive;  // owns the region
  bool region_is_file = false;   // |region| is a read-only file mapping (its pages can be dropped
                                 // and re-read), not an owned block
  float out_scale = 1.0f;        // see WeightTensor::out_scale
  int64_t stride0 = 0;           // bytes between dim-0 slices when not contiguous (per-expert
                                 // GGUF tensors placed at equal distances); 0: contiguous
};
// Builds the step graph; returns the logits value ([R, vocab] f32), marked as output. For MoE
// models, |route_ids| (optional) receives each layer's routed expert ids ([T, k] i32), also
// marked as outputs so they stay readable after compute (expert statistics). |hidden| (optional)
// receives every token's final normed hidden state [T, D] (embeddings), marked as output.
ValueId build_llama_graph(Graph& g, const ModelConfig& cfg, const LlamaWeights& w, const StepTensors& in,
                          const KvCache& kv, std::vector<ValueId>* route_ids = nullptr, ValueId* hidden = nullptr);

}  // namespace tessera
