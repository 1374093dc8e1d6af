// ModelConfig: the hyperparameters of a transformer, read from GGUF metadata and checked
// against the tensors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/op.h"

namespace tessera {

enum class QkNorm : uint8_t {
  kNone,
  kPerHead,  // qwen3, qwen3moe: RMSNorm over each head of q and k ([head_dim] weights)
  kFull,     // olmoe: RMSNorm over the whole q and k projections ([n_heads*head_dim] weights)
};

// How a sequence's hidden states become one embedding vector.
enum class Pooling : uint8_t {
  kNone,  // the model does not embed (decoders unless asked; see Model::set_pooling)
  kMean,  // mean over the sequence's tokens (sentence-transformers' default)
  kCls,   // the first token's state ([CLS])
  kLast,  // the last token's state (decoder embedding models)
};
const char* pooling_name(Pooling p);  // "none", "mean", "cls", "last"

struct ModelConfig {
  std::string arch;          // "llama", "mistral", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "olmoe", "gemma3", "phi3", "bert"
  std::string name;          // general.name
  int n_layers = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;           // n_dims, mode, base, scaling
  // [rope.n_dims / 2] divisors of each RoPE frequency derived from a checkpoint's config.json
  // (llama3 scaling); the loader hands them to the graph as the rope_freqs tensor a GGUF stores.
  // Empty: none (or the GGUF's own tensor).
  std::vector<float> rope_freq_factors;
  QkNorm qk_norm = QkNorm::kNone;
  bool qkv_bias = false;     // qwen2, qwen2moe: biases on the q/k/v projections
  bool tied_output = false;  // no output.weight: the token embedding is the output head
  // Mixture of experts (n_experts == 0: a dense FFN).
  int n_experts = 0;
  int n_experts_used = 0;
  int n_ff_exp = 0;              // width of each expert's FFN
  int n_ff_shexp = 0;            // width of the shared expert (qwen2moe); 0: none
  bool expert_weights_norm = true;  // renormalise the chosen experts' weights to sum to 1
  // Gemma 3 (the defaults leave every other family as it is).
  float embd_scale = 1.0f;       // multiplies the token embeddings (gemma3: sqrt(n_embd))
  float attn_scale = 0.0f;       // attention softmax scale; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;     // attention logit softcap (AttentionParams::softcap); 0: none
  int sliding_window = 0;        // keys a sliding-window layer sees, its own included; 0: none
  std::vector<uint8_t> layer_sliding;  // [n_layers]: 1 where the layer uses sliding_window; empty: every layer
  RopeParams rope_sliding;       // RoPE of the sliding-window layers (gemma3: a base of its own)
  // Encoders (bert): bidirectional attention, LayerNorm with bias, erf GELU, learned absolute
  // positions and token types; no output head, the hidden states are pooled.
  bool causal = true;
  float norm_eps = 1e-12f;       // LayerNorm epsilon (bert)
  int n_token_types = 0;         // rows of the token-type embedding (bert: 2); we use type 0
  Pooling pooling = Pooling::kNone;  // the model's own pooling (bert: from its files)
  bool normalize_embd = true;    // L2-normalise pooled embeddings
  // Hybrid recurrent models (qwen35): Gated DeltaNet layers beside gated full-attention ones.
  std::vector<uint8_t> layer_recurrent;  // [n_layers]: 1 for a recurrent layer; empty: none
  int ssm_conv_kernel = 0;       // taps of the short causal convolution
  int ssm_k_heads = 0;           // Hk: query/key heads of the delta rule
  int ssm_v_heads = 0;           // Hv: value heads (a multiple of Hk)
  int ssm_head_dim = 0;          // Dk = Dv
  // Value head h pairs with key head h % Hk (llama.cpp's GGUF reorders the heads so: "tiled"),
  // else h / (Hv / Hk) (the checkpoint's grouped order).
  bool ssm_tiled_heads = false;
  bool attn_output_gate = false;  // the q projection carries a per-head sigmoid gate of the output
  // Gemma 4: layers that differ in shape, KV-sharing layers, per-layer embeddings.
  std::vector<int> layer_head_dim;  // [n_layers]; empty: every layer head_dim
  std::vector<int> layer_kv_heads;  // [n_layers]; empty: every layer n_kv_heads
  std::vector<int> layer_n_ff;      // [n_layers]; empty: every layer n_ff
  // [n_layers]: the layer whose K/V layer l attends over: l itself, or for a KV-sharing layer the
  // earlier layer of its kind that computed them. Empty: every layer its own.
  std::vector<int> layer_kv_source;
  std::vector<float> layer_out_scale;  // [n_layers]: multiplies each layer's output; empty: 1
  int n_embd_per_layer = 0;            // width of each layer's per-layer embedding input; 0: none
  float final_softcap = 0.0f;          // logits = cap * tanh(logits / cap); 0: none

  bool is_encoder() const { return !causal; }
  int head_dim_of(int layer) const { return layer_head_dim.empty() ? head_dim : layer_head_dim[size_t(layer)]; }
  int kv_heads_of(int layer) const { return layer_kv_heads.empty() ? n_kv_heads : layer_kv_heads[size_t(layer)]; }
  int n_ff_of(int layer) const { return layer_n_ff.empty() ? n_ff : layer_n_ff[size_t(layer)]; }
  int kv_source(int layer) const { return layer_kv_source.empty() ? layer : layer_kv_source[size_t(layer)]; }

  bool is_moe() const { return n_experts > 0; }
  bool is_recurrent(int layer) const {
    return size_t(layer) < layer_recurrent.size() && layer_recurrent[size_t(layer)] != 0;
  }
  bool is_sliding(int layer) const {
    if (sliding_window <= 0) return false;
    if (layer_sliding.empty()) return true;  // every layer (phi3)
    return size_t(layer) < layer_sliding.size() && layer_sliding[size_t(layer)] != 0;
  }
};

}  // namespace tessera
