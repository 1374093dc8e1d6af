// Weights as the architectures declare them and the loaders deliver them: a family's weights
// struct derives from ArchWeights and binds its fields to GGUF names through TensorSpecs (one
// binding serves GGUF files and Hugging Face checkpoints alike: the safetensors loader maps the
// GGUF names to HF's through the family's hf_tensor_prefix), and the pieces several families
// share (attention, GLU FFN, mixture of experts).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/model_config.h"

namespace tessera {

// A loaded weight and the factor a matmul by it is multiplied by: the f32 tensor scale of NVFP4
// weights, which their blocks leave out (quant/README.md); 1 for every other format. Set once at
// load time, so building a step graph looks nothing up.
struct WeightTensor : Tensor {
  float out_scale = 1.0f;
  // Tensor parallelism: this rank's columns of a row-parallel matrix (a split input dim: attention
  // output, FFN down), so x W^T is its part of a sum over the ranks (GraphContext::linear and
  // moe_ffn all-reduce it).
  bool partial_sum = false;
};

// One weight a family needs: its GGUF name, the shape the config implies (checked before any
// weight is touched) and the field it loads into.
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
  // A table the embed op reads by rows (token, position and token-type embeddings): it keeps the
  // file's layout (Device::prepare_weight is not asked to repack it for a matmul).
  bool embedding_rows = false;
  // Tensor parallelism (docs/multi-device.md): the dim of |shape| split across the ranks (rank r
  // keeps the r-th of tp equal parts), -1: every rank keeps the whole tensor. Heads and FFN rows
  // split by output (q/k/v, gate/up: dim 0 of a matrix, dim 1 of experts); attention output and
  // FFN down by input (the last dim), which makes their product a partial sum.
  int tp_dim = -1;
};
// The name of expert |e|'s tensor in the per-expert layout, from the merged name.
std::string per_expert_name(const std::string& merged, int e);

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

// The base of every family's weights: the token embedding and output head (which Model handles
// for tied models), and the list of every field the family bound (Architecture::tensor_specs
// records it through bind()), so weight walks need no per-family list.
struct ArchWeights {
  virtual ~ArchWeights() = default;
  WeightTensor tok_embd, output_norm, output;
  // Tied models (no output.weight) on a device whose prepare_weight repacks: the token embedding
  // prepared for the output matmul, while tok_embd keeps the rows the embed op reads. Not a weight
  // of its own (its parameters are tok_embd's), so never bound.
  WeightTensor output_tied;

  // The output head's weight.
  const WeightTensor& head(const ModelConfig& c) const {
    return !c.tied_output ? output : output_tied.buffer ? output_tied : tok_embd;
  }
  // Every bound tensor, present or not, in binding order.
  const std::vector<const WeightTensor*>& tensors() const { return bound_; }
  // Records the fields |specs| bind (each once).
  void bind(const std::vector<TensorSpec>& specs);

 private:
  std::vector<const WeightTensor*> bound_;
};

// Self-attention projections: q/k/v/o, optional q/k/v biases (qwen2, bert) and QK-norm weights.
struct AttentionWeights {
  WeightTensor wq, wk, wv, wo;
  WeightTensor bq, bk, bv;          // optional: no buffer when absent
  WeightTensor q_norm, k_norm;      // optional (QkNorm)
  WeightTensor sinks;               // optional [Hq] f32: per-head sink logits (gpt-oss)
};

// A gated FFN: down(act(gate(x)) * up(x)).
struct GluFfnWeights {
  WeightTensor gate, up, down;
};

// Routed experts (router [E, D], experts [E, F, D] / [E, D, F]) and an optional shared expert
// (qwen2moe): sigmoid(x . shexp_gate) * FFN_shared(x).
struct MoeWeights {
  WeightTensor router, gate_exps, up_exps, down_exps;
  // Optional biases (gpt-oss): the router's [E] and each expert's [E, F] / [E, D].
  WeightTensor router_b, gate_exps_b, up_exps_b, down_exps_b;
  WeightTensor shexp_gate, gate_shexp, up_shexp, down_shexp;
};

// The per-step inputs, already on the device, and the dtype the step's activations are built in
// (the residual stream and everything computed from it; the sampled rows go back to f32 before
// the output head, so logits are always f32).
struct StepTensors {
  Tensor tokens, positions, slot_mapping, query_start, seq_lens, block_tables, logit_rows;
  // The KV cache's sliding-window layers (hybrid memory): their slots and tables in the window
  // pool; no buffer when the cache has no window group.
  Tensor window_slot_mapping, window_block_tables;
  // Recurrent layers: each sequence's row in the KV cache's state pool [S]; no buffer without them.
  Tensor state_slots;
  // LoRA: each sequence's adapter slot [S] i32 (-1: the base model); no buffer without adapters.
  Tensor lora_slots;
  DType act = DType::kF32;
};

}  // namespace tessera
