// Pieces the family files (models/arch/<family>.cpp) share: GGUF hyperparameter reading with
// range checks, and graph blocks that are the same across families (the linear layer, the
// attention block from projections to output projection).
#pragma once
#include <optional>
#include <string>

#include "models/arch/llama.h"

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

// The tensor when it has a buffer, else kNoValue (an absent optional weight).
ValueId optional_input(Graph& g, const Tensor& t);

// x W^T (+ bias), times the weight's tensor scale when it has one (NVFP4; the loader divided
// the bias by that scale, so the bias comes out right).
ValueId linear(Graph& g, ValueId x, const WeightTensor& W, ValueId bias = kNoValue);

// The per-step inputs as graph values, made once per graph (step_values) and shared by every layer.
struct StepValues {
  ValueId positions, slot_mapping, query_start, seq_lens, block_tables;
  int64_t n_tokens = 0;
};
StepValues step_values(Graph& g, const StepTensors& in);

// Self-attention of layer |l| from its normed input |h| [T, D] to the output projection [T, D]:
// q/k/v projections (optional biases), optional QK-norm (per head or over the whole projection,
// c.qk_norm), RoPE by |rope| (with |freq_factors| when not kNoValue), paged attention with |ap|
// (which writes the new K/V into |kv| layer l), output projection.
ValueId attention_block(Graph& g, const ModelConfig& c, const LlamaLayer& L, ValueId h, int l, const RopeParams& rope,
                        ValueId freq_factors, const AttentionParams& ap, const StepValues& in, const KvCache& kv);

// A decoder's end, shared by the families: the final norm of every row as |*hidden| (marked as
// output, when |hidden| is not null: pooled embeddings), then the logits [R, vocab] f32 of the
// sampled rows (in.logit_rows), gathered back to f32, normed and projected by the output head.
ValueId decoder_output(Graph& g, const ModelConfig& c, const LlamaWeights& w, const StepTensors& in, ValueId x,
                       ValueId* hidden);

}  // namespace tessera
