// Name helpers for mapping our (GGUF) tensor names to a checkpoint's (Architecture::hf_tensor_prefix),
// and the rule a family gives for a tensor that needs more than a name (Architecture::hf_tensor).
#pragma once
#include <cstdint>
#include <string>

namespace tessera::safetensors {

// One row of a family's name table: our (GGUF) name part -> the HF module path part.
struct HfNameRow {
  const char* ours;
  const char* hf;
};

// Splits "blk.3.attn_q.weight" into (3, "attn_q", "weight"); false for other names.
bool split_layer_name(const std::string& name, int* layer, std::string* stem, std::string* suffix);
// Splits "blk.3.ssm_a" (a name without a suffix) or "blk.3.attn_q.weight" into the layer and
// what follows "blk.3." ("ssm_a", "attn_q.weight"); false for other names.
bool split_layer_rest(const std::string& name, int* layer, std::string* rest);

// How one of our tensors is read from a checkpoint when a name is not enough: the values change
// (Qwen's zero-centred norms are stored as w and applied as 1 + w, where our graph, as GGUF,
// multiplies by the weight), the stored shape has extra unit dims, or routed experts are fused
// in one tensor that holds two of our weights.
struct HfTensor {
  enum class Values : uint8_t {
    kAsIs,
    kPlusOne,  // 1 + w
    kNegExp,   // -exp(w) (Qwen3.5's A_log -> the decay rate GGUF stores as ssm_a)
  };
  std::string name;  // the checkpoint tensor's full name
  Values values = Values::kAsIs;
  // The stored shape may hold dims of size 1 more than ours (Qwen3.5's conv1d [C, 1, K] -> [C, K]).
  // Such tensors and every 1-D one are widened to f32.
  bool squeeze = false;
  // Routed experts fused in one tensor [E, fused_rows, ...]: ours [E, rows, ...] takes rows
  // row_begin, row_begin + row_step, ... of each expert (0: not fused).
  int64_t fused_rows = 0;
  int64_t row_begin = 0;
  int64_t row_step = 1;
  // The fused tensor is stored transposed, [E, inner, fused_rows] (gpt-oss's gate_up_proj
  // [E, D, 2F], down_proj [E, F, D]): ours [E, rows, inner] takes its columns (gathered).
  bool transposed = false;
  // Gathered into f32 (expert biases, which matmul_id reads as f32).
  bool to_f32 = false;
  // Stored as MXFP4: name + "_blocks" U8 [E, fused_rows, K/32, 16] (element 2i in the low nibble
  // of byte i) and name + "_scales" E8M0 [E, fused_rows, K/32] (gpt-oss's released experts);
  // the rows taken are repacked into kMXFP4.
  bool mxfp4 = false;
};

}  // namespace tessera::safetensors
