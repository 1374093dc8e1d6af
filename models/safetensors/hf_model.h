// Hugging Face checkpoints as Tessera models: config.json -> ModelConfig, HF tensor names ->
// ours, and the quantised checkpoint forms repacked into quant/ dtypes at load.
//
// Two facts shape the mapping (docs/safetensors.md has the details):
// - RoPE layout. HF llama/mistral checkpoints rotate halves (x_i with x_{i+d/2}); GGUF's llama
//   converter permutes the q/k rows so that rope rotates adjacent pairs. We load HF q/k rows as
//   they are and use RopeMode::kNeox, which is the same function (`tessera convert` applies the
//   permutation when it writes a GGUF, whose llama loader uses RopeMode::kNormal).
// - Quantised forms become our dtypes without loss: FP8 E4M3 + weight_scale -> kFP8_E4M3 (the
//   scale in the row header), AWQ/GPTQ INT4 -> kINT4_G{32,64,128}, compressed-tensors MXFP4 and
//   gpt-oss *_blocks/*_scales -> kMXFP4, NVFP4 (ModelOpt and compressed-tensors) -> kNVFP4 with
//   the global scale applied to the matmul output.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/arch/weights.h"
#include "models/model_config.h"
#include "models/safetensors/hf_names.h"
#include "models/safetensors/safetensors.h"
#include "models/tokenizer/tokenizer.h"

namespace tessera {
class Architecture;
}

namespace tessera::safetensors {

// quantization_config of config.json (only what the INT4 unpacking needs; the other formats are
// recognised from the tensors themselves).
struct QuantConfig {
  std::string method;      // "awq", "gptq", "compressed-tensors", "modelopt", "fp8", "" (none)
  int bits = 0;
  int group_size = 0;
  bool gptq_v2 = false;    // GPTQ "checkpoint_format": "gptq_v2": zero points stored as is
};

// Phi-3 "longrope"/"su" scaling: both per-frequency factor lists of config.json's rope_scaling.
// A GGUF stores both (rope_factors_long/short); a loaded model keeps only the chosen one
// (ModelConfig::rope_freq_factors).
struct LongRopeFactors {
  std::vector<float> long_factor;   // [rope.n_dims / 2]; empty: the model has no rope_scaling
  std::vector<float> short_factor;  // [rope.n_dims / 2]
};

// Reads <dir>/config.json: model_type, sizes, rope, MoE keys. Errors name the file and key.
// |longrope| (optional) receives a phi3 model's two factor lists, both then required to be valid
// (without it only the chosen list is read).
Result<ModelConfig> read_config(const std::string& dir, QuantConfig* quant, LongRopeFactors* longrope = nullptr);

// Reads <dir>/tokenizer.json and <dir>/tokenizer_config.json (special tokens, add_bos, chat
// template); |chat_template| gets "" when there is none.
Result<TokenizerData> read_tokenizer(const std::string& dir, std::string* chat_template);

// Fits a checkpoint's vocabulary to its embedding's |n_rows|: checkpoints often pad the embedding
// past the tokenizer (Phi-3: 32064 rows, 32011 tokens; Qwen2.5: 151936 / 151665), and a GGUF holds
// one token per row, so the rows past the tokenizer become "[PAD<id>]" tokens of type unused (as
// llama.cpp's converter writes them; they are never produced by encoding). More tokens than rows
// is an error naming both counts.
Status pad_vocabulary(TokenizerData* d, int64_t n_rows, const std::string& dir);

// A 1-D f32 tensor owning a copy of |values| (tensors derived from config.json: rope factors).
HostTensor owned_f32(const std::vector<float>& values);

// Produces our tensors (names and shapes of the family's tensor_specs) from a checkpoint, through
// the family's HF names (Architecture::hf_tensor_prefix).
class Weights {
 public:
  Weights(const Checkpoint& ckpt, const ModelConfig& cfg, QuantConfig quant);
  ~Weights();
  // The tensor for |spec|, always in spec.shape (a stored shape that differs is an error naming
  // the file and tensor), or nullopt when the checkpoint lacks an optional one (a required one
  // missing is an error naming the checkpoint tensor).
  // Float weights stay in the mapped shard (1-D ones are widened to f32); quantised ones are
  // repacked into new memory.
  Result<std::optional<HostTensor>> get(const TensorSpec& spec);
  // The HF name our |name| comes from (for messages and tools), e.g.
  // "model.layers.3.self_attn.q_proj" for "blk.3.attn_q.weight" ("" when none).
  std::string hf_prefix(const std::string& name) const;

 private:
  Result<std::optional<HostTensor>> load_linear(const std::string& prefix, const std::string& suffix, const TensorSpec& spec);
  Result<HostTensor> load_fp8(const std::string& prefix, const TensorRef& w, const TensorSpec& spec);
  Result<HostTensor> load_fp4(const std::string& prefix, const TensorRef& w, const TensorSpec& spec);
  Result<HostTensor> load_int4(const std::string& prefix, const TensorRef& q, const TensorSpec& spec);
  Result<std::optional<HostTensor>> load_stacked(const std::vector<std::string>& prefixes, const TensorSpec& spec);
  Result<std::optional<HostTensor>> load_fused_rows(const TensorSpec& spec);
  Result<std::optional<HostTensor>> load_rule(const HfTensor& rule, const TensorSpec& spec);
  Result<std::optional<HostTensor>> load_fused_experts(const HfTensor& rule, const TensorRef& t,
                                                       const TensorSpec& spec);
  Result<std::optional<HostTensor>> load_fused_mxfp4(const HfTensor& rule, const TensorSpec& spec);
  Status missing(const TensorSpec& spec, const std::string& hf_name) const;
  Result<HostTensor> owned(const TensorSpec& spec, DType dtype, std::vector<uint8_t> bytes, float out_scale);

  const Checkpoint& ckpt_;
  ModelConfig cfg_;
  QuantConfig quant_;
  const Architecture* arch_;  // cfg_.arch's family (nullptr: none, so no tensor has an HF name)
  std::map<std::string, float> weight_scales_;  // our weight name -> NVFP4 global scale
};

}  // namespace tessera::safetensors
