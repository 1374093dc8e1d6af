// The BERT family of encoders (BERT, MiniLM, BGE, all-MiniLM-L6-v2 and other sentence-transformers
// models): learned absolute positions and token types, post-norm LayerNorm blocks with biases,
// bidirectional attention, an erf-GELU FFN, and no output head: the final hidden states are
// pooled into one embedding per sequence (Model::forward, ModelConfig::pooling).
#pragma once
#include <vector>

#include "models/arch/llama.h"

namespace tessera {

namespace gguf { class File; }

// From llama.cpp's "bert" keys: bert.{block_count, context_length, embedding_length,
// feed_forward_length, attention.head_count, attention.layer_norm_epsilon, attention.causal,
// pooling_type}. Errors name the file and key.
Result<ModelConfig> bert_config_from_gguf(const gguf::File& f);
// GGUF names (as llama.cpp's converter writes them); the safetensors loader maps them to HF's.
std::vector<TensorSpec> bert_tensor_specs(const ModelConfig& cfg, LlamaWeights* w);
// The step graph: the final hidden states [T, D] f32 of every token, marked as output.
ValueId build_bert_graph(Graph& g, const ModelConfig& cfg, const LlamaWeights& w, const StepTensors& in, const KvCache& kv);

}  // namespace tessera
